// The timers page: the timers the key sees, by namespace, a page at a time.
import { api } from "./api.js";
import { h, link, show, when } from "./dom.js";
import { describeSchedule } from "./schedule.js";
import { canWrite, session } from "./session.js";

/** The namespaces to choose from: the key's own, or (an admin key) those with a policy. */
export async function namespaceChoices() {
  if (session.me.namespaces) return session.me.namespaces;
  const { namespaces } = await api("GET", "v1/namespaces");
  return namespaces.map((n) => n.namespace);
}

export async function timersPage(params) {
  const namespace = params.get("namespace") || "";
  const after = params.get("after") || "";
  const choices = await namespaceChoices();
  const select = h(
    "select",
    { id: "namespace", name: "namespace" },
    h("option", { value: "" }, "All you can see"),
    choices.map((ns) => h("option", { value: ns, selected: ns === namespace }, ns)),
  );
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = link("#/timers", { namespace: select.value });
      },
    },
    h("label", { for: "namespace" }, "Namespace", select),
    h("button", { type: "submit" }, "Show"),
    canWrite() ? h("a", { href: link("#/new", { namespace }), id: "new-timer" }, "New timer") : null,
  );
  const page = await api("GET", "v1/timers", { query: { namespace, after, limit: 50 } });
  const rows = page.timers.map((t) =>
    h(
      "tr",
      { "data-timer": t.id },
      h("td", {}, h("a", { href: `#/timers/${t.id}` }, t.name)),
      h("td", {}, t.namespace),
      h("td", {}, describeSchedule(t.schedule)),
      h("td", {}, h("span", { class: `state-${t.state}` }, t.state)),
      h("td", { class: "wide" }, when(t.next_fire_times[0])),
    ),
  );
  const table = h(
    "div",
    { class: "table" },
    h(
      "table",
      {},
      h("caption", { class: "skip" }, "Timers"),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Name", "Namespace", "Schedule", "State"].map((c) => h("th", { scope: "col" }, c)),
          h("th", { scope: "col", class: "wide" }, "Next fire"),
        ),
      ),
      h("tbody", {}, rows),
    ),
  );
  const more = page.next_after
    ? h("p", {}, h("a", { href: link("#/timers", { namespace, after: page.next_after }), id: "next-page" }, "Next page"))
    : null;
  show("Timers", filters, rows.length ? table : h("p", {}, "No timers here."), more);
}
