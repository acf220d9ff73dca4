// The namespaces a page offers to choose from.
import { api } from "./api.js";
import { h, link } from "./dom.js";
import { session } from "./session.js";

/** The key's own namespaces, or (an admin key) those with a policy of their own. */
export async function namespaceChoices() {
  if (session.me.namespaces) return session.me.namespaces;
  const { namespaces } = await api("GET", "v1/namespaces");
  return namespaces.map((n) => n.namespace);
}

/**
 * A select of the namespaces (`choices`, or the key's), `current` chosen; "All you can see"
 * first unless `all` is false.
 */
export async function namespaceSelect(current, { choices, all = true } = {}) {
  const names = choices ?? (await namespaceChoices());
  return h(
    "select",
    { id: "namespace", name: "namespace" },
    all ? h("option", { value: "" }, "All you can see") : null,
    names.map((ns) => h("option", { value: ns, selected: ns === current }, ns)),
  );
}

/** A form choosing the namespace of the page at `path` (`#/dead`), `current` chosen. */
export async function namespaceFilter(path, current) {
  const select = await namespaceSelect(current);
  return h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = link(path, { namespace: select.value });
      },
    },
    h("label", { for: "namespace" }, "Namespace", select),
    h("button", { type: "submit" }, "Show"),
  );
}
