// The audit log: who changed what through the API (the console, the CLI and scripts
// alike), and when, newest first.
import { api } from "./api.js";
import { h, link, show, table, when } from "./dom.js";
import { namespaceFilter } from "./namespaces.js";

/** What an entry changed, in a line: the target and the details, as the API gives them. */
function what(entry) {
  const detail = entry.detail && Object.keys(entry.detail).length ? JSON.stringify(entry.detail) : "";
  return [entry.target, detail].filter((part) => part).join(" ");
}

export async function auditPage(params) {
  const namespace = params.get("namespace") || "";
  const filters = await namespaceFilter("#/audit", namespace);
  const page = await api("GET", "v1/audit", { query: { namespace, limit: 100, before: params.get("before") } });
  const rows = page.entries.map((e) =>
    h(
      "tr",
      { "data-entry": e.id },
      h("td", {}, when(e.at)),
      h("td", {}, e.key_name),
      h("td", {}, e.action.replaceAll("_", " ")),
      h("td", {}, e.namespace ?? "—"),
      h("td", { class: "wide" }, h("code", {}, what(e))),
    ),
  );
  const list = table({ id: "audit" }, "Audit log", [["When"], ["Key"], ["Change"], ["Namespace"], ["What", { wide: true }]], rows);
  const more = page.next_before
    ? h("p", {}, h("a", { id: "next-page", href: link("#/audit", { namespace, before: page.next_before }) }, "Older changes"))
    : null;
  show("Audit log", filters, rows.length ? list : h("p", {}, "No changes recorded here."), more);
}
