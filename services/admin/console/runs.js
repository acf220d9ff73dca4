// A namespace's runs: its occurrences by status and range of scheduled times, newest
// first, each with its failed attempts and its lag (from the scheduled time to the start).
import { api } from "./api.js";
import { duration, h, link, scheduled, show, table } from "./dom.js";
import { namespaceChoices, namespaceSelect } from "./namespaces.js";
import { instant } from "./timer.js";

const STATUSES = ["", "pending", "claimed", "running", "succeeded", "dead", "cancelled"];

function lag(run) {
  return duration(run.started_at ? new Date(run.started_at) - new Date(run.scheduled_at) : null);
}

function attempts(run) {
  const failed = run.failed_attempts || [];
  if (!failed.length) return run.attempt;
  return h(
    "details",
    {},
    h("summary", {}, `${run.attempt} (${failed.length} failed)`),
    h(
      "ol",
      {},
      failed.map((a) =>
        h("li", { value: a.attempt }, `${a.http_status ? `HTTP ${a.http_status}` : "no answer"}: ${a.error || ""}${a.duration_ms != null ? `, ${a.duration_ms} ms` : ""}`),
      ),
    ),
  );
}

export async function runsPage(params) {
  const choices = await namespaceChoices();
  const namespace = params.get("namespace") || choices[0] || "";
  const status = params.get("status") || "";
  const from = params.get("from") || "";
  const to = params.get("to") || "";
  const select = await namespaceSelect(namespace, { choices, all: false });
  const statusSelect = h(
    "select",
    { id: "status", name: "status" },
    STATUSES.map((s) => h("option", { value: s, selected: s === status }, s || "Any")),
  );
  const fromInput = h("input", { id: "from", type: "datetime-local", step: 1, value: from });
  const toInput = h("input", { id: "to", type: "datetime-local", step: 1, value: to });
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = link("#/runs", {
          namespace: select.value,
          status: statusSelect.value,
          from: fromInput.value,
          to: toInput.value,
        });
      },
    },
    h("label", { for: "namespace" }, "Namespace", select),
    h("label", { for: "status" }, "Status", statusSelect),
    h("label", { for: "from" }, "Scheduled from (your time)", fromInput),
    h("label", { for: "to" }, "to", toInput),
    h("button", { type: "submit" }, "Show"),
  );
  if (!namespace) return show("Runs", filters, h("p", {}, "No namespace to show: name one."));
  const page = await api("GET", `v1/namespaces/${encodeURIComponent(namespace)}/runs`, {
    query: { status, from: from && instant(from), to: to && instant(to), limit: 100, before: params.get("before") },
  });
  const rows = page.runs.map((r) =>
    h(
      "tr",
      { "data-run": r.id },
      h("td", {}, h("a", { href: `#/timers/${r.timer_id}` }, r.timer_id.slice(0, 8))),
      h("td", {}, scheduled(r)),
      h("td", {}, h("span", { class: `status-${r.status}` }, r.status)),
      h("td", {}, attempts(r)),
      h("td", {}, r.http_status ?? "—"),
      h("td", { class: "wide" }, lag(r)),
      h("td", { class: "wide" }, r.duration_ms != null ? `${r.duration_ms} ms` : "—"),
      h("td", { class: "wide" }, r.error || r.response_excerpt || ""),
    ),
  );
  const list = table({ id: "runs" }, "Runs", [
    ["Timer"],
    ["Scheduled"],
    ["Status"],
    ["Attempts"],
    ["HTTP"],
    ["Lag", { wide: true }],
    ["Duration", { wide: true }],
    ["Answer or error", { wide: true }],
  ], rows);
  const more = page.next_before
    ? h("p", {}, h("a", { id: "next-page", href: link("#/runs", { namespace, status, from, to, before: page.next_before }) }, "Older runs"))
    : null;
  show("Runs", filters, rows.length ? list : h("p", {}, "No runs here."), more);
}
