// Dead letters: the occurrences whose last attempt failed, latest first, by namespace;
// a write key may replay one, those selected, or every one the filter matches.
import { api } from "./api.js";
import { confirmed } from "./confirm.js";
import { h, problem, router, show, table, when } from "./dom.js";
import { namespaceFilter } from "./namespaces.js";
import { canWrite } from "./session.js";

/** Replays `ids` (at most 10,000 a call); returns how many were replayed. */
async function replay(ids) {
  const { replayed } = await api("POST", "v1/tasks/replay", { body: { ids } });
  return replayed.length;
}

/** Replays every dead task of `namespace` (all the key sees if empty), a page at a time. */
async function replayAll(namespace) {
  let total = 0;
  for (;;) {
    const { tasks } = await api("GET", "v1/tasks", { query: { status: "dead", namespace, limit: 1000 } });
    if (!tasks.length) return total;
    const done = await replay(tasks.map((t) => t.id));
    total += done;
    if (done === 0) return total;
  }
}

export async function deadPage(params) {
  const namespace = params.get("namespace") || "";
  const filters = await namespaceFilter("#/dead", namespace);
  const { tasks } = await api("GET", "v1/tasks", { query: { status: "dead", namespace, limit: 100 } });
  const writable = canWrite();
  const status = h("div", { id: "replay-status", "aria-live": "polite" });
  const report = async (work) => {
    try {
      const replayed = await work();
      await router.route();
      document.getElementById("replay-status")?.replaceChildren(h("p", { class: "notice" }, `${replayed} replayed.`));
    } catch (error) {
      status.replaceChildren(problem(error));
    }
  };
  const rows = tasks.map((t) =>
    h(
      "tr",
      { "data-task": t.id },
      writable ? h("td", {}, h("input", { type: "checkbox", name: "selected", value: t.id, "aria-label": `Select task ${t.id}` })) : null,
      h("td", {}, h("a", { href: `#/timers/${t.timer_id}` }, t.timer_id.slice(0, 8))),
      h("td", {}, when(t.scheduled_at)),
      h("td", {}, t.attempt),
      h("td", {}, t.http_status ?? "—"),
      h("td", { class: "wide" }, t.error || t.response_excerpt || ""),
      writable
        ? h("td", {}, h("button", { type: "button", onclick: () => report(() => replay([t.id])) }, "Replay"))
        : null,
    ),
  );
  const actions = writable
    ? h(
        "div",
        { class: "actions" },
        h(
          "button",
          {
            type: "button",
            onclick: () =>
              report(async () => {
                const ids = [...document.querySelectorAll("input[name=selected]:checked")].map((box) => Number(box.value));
                if (!ids.length) throw new Error("Select dead letters first, or replay all that match.");
                return replay(ids);
              }),
          },
          "Replay selected",
        ),
        confirmed("Replay all matching", `Yes: replay every dead letter${namespace ? ` of ${namespace}` : ""}`, () =>
          report(() => replayAll(namespace)),
        ),
      )
    : null;
  const list = table({ id: "dead" }, "Dead letters", [
    writable ? ["Selected", { unseen: true }] : null,
    ["Timer"],
    ["Scheduled"],
    ["Attempts"],
    ["HTTP"],
    ["Last error", { wide: true }],
    writable ? ["Replay", { unseen: true }] : null,
  ], rows);
  show("Dead letters", filters, tasks.length ? actions : null, status, tasks.length ? list : h("p", {}, "No dead letters."));
}
