// The live page: each namespace's last minute (fires a second, lag, failures, deferrals)
// and its due backlog, from GET /v1/live, read again every few seconds while the page is
// shown, without a reload.
import { api } from "./api.js";
import { duration, h, link, problem, show, table } from "./dom.js";

/** How often the figures are read again, in milliseconds. */
const REFRESH_MS = 2000;
const WINDOWS = [
  [60, "Last minute"],
  [300, "Last 5 minutes"],
  [900, "Last 15 minutes"],
];

const rate = (perSecond) => (perSecond >= 10 ? perSecond.toFixed(0) : perSecond.toFixed(2));

function row(n) {
  const number = (value, attrs = {}) => h("td", { class: `number ${attrs.class || ""}`.trim() }, value);
  const backlog = n.backlog
    ? `${n.backlog} (oldest ${duration(n.backlog_oldest_seconds * 1000)})`
    : "0";
  return h(
    "tr",
    { "data-namespace": n.namespace },
    h("td", {}, h("a", { href: link("#/runs", { namespace: n.namespace }) }, n.namespace)),
    number(rate(n.fires_per_second)),
    number(duration(n.lag_p50_ms)),
    number(duration(n.lag_p99_ms), { class: n.lag_p99_ms > 2000 ? "behind" : "" }),
    number(n.succeeded),
    number(n.failed_attempts, { class: n.failed_attempts ? "behind" : "" }),
    number(n.dead, { class: n.dead ? "behind" : "" }),
    number(n.deferred),
    number(backlog, { class: n.backlog ? "behind" : "" }),
  );
}

const COLUMNS = [
  ["Namespace"],
  ["Fires/s"],
  ["Lag p50"],
  ["Lag p99"],
  ["Succeeded"],
  ["Failed attempts"],
  ["Dead"],
  ["Deferred"],
  ["Backlog"],
];

export async function livePage(params) {
  // One of the windows offered: another in the address is the first.
  const asked = Number(params.get("window"));
  const windowSeconds = WINDOWS.some(([seconds]) => seconds === asked) ? asked : WINDOWS[0][0];
  const windowSelect = h(
    "select",
    { id: "window", name: "window" },
    WINDOWS.map(([seconds, text]) => h("option", { value: seconds, selected: seconds === windowSeconds }, text)),
  );
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = link("#/live", { window: windowSelect.value });
      },
    },
    h("label", { for: "window" }, "Occurrences scheduled in the", windowSelect),
    h("button", { type: "submit" }, "Show"),
  );
  const figures = h("div", { id: "live" });
  const updated = h("p", { class: "updated", id: "live-updated" });
  const read = async () => {
    try {
      const live = await api("GET", "v1/live", { query: { window_seconds: windowSeconds } });
      const parts = [
        live.namespaces.length
          ? table({ class: "live" }, "Each namespace's figures", COLUMNS, live.namespaces.map(row))
          : h("p", {}, "Nothing was scheduled in this window, and nothing is due."),
        live.backlog_capped ? h("p", { class: "error" }, "The backlog is larger than was counted: at least these.") : null,
      ];
      // A keyboard user on a namespace's link stays on it as the table is built again.
      const focused = figures.contains(document.activeElement)
        ? document.activeElement.closest("tr")?.dataset.namespace
        : undefined;
      figures.replaceChildren(...parts.filter((part) => part));
      if (focused !== undefined) figures.querySelector(`tr[data-namespace="${CSS.escape(focused)}"] a`)?.focus();
      updated.textContent = `Updated ${new Date(live.at).toLocaleTimeString()}; read again every ${REFRESH_MS / 1000} s.`;
    } catch (error) {
      figures.replaceChildren(problem(error));
    }
  };
  await read();
  show("Live", filters, updated, figures);
  // Read again while this very page is shown; another page (or the same with another
  // window) replaces it, and this loop ends.
  const tick = async () => {
    if (!figures.isConnected) return;
    await read();
    setTimeout(tick, REFRESH_MS);
  };
  setTimeout(tick, REFRESH_MS);
}
