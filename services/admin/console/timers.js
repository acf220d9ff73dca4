// The timers page: the timers the key sees, by namespace, name prefix, state and kind of
// schedule, a page at a time; with a namespace chosen, a write key may pause, resume or delete the timers
// selected or every timer the filter matches.
import { api } from "./api.js";
import { confirmed } from "./confirm.js";
import { h, link, problem, router, show, table, when } from "./dom.js";
import { describeSchedule } from "./schedule.js";
import { namespaceSelect } from "./namespaces.js";
import { canWrite } from "./session.js";

const BULK = [
  ["pause", "Pause", "paused"],
  ["resume", "Resume", "resumed"],
  ["delete", "Delete", "deleted"],
];

/** Runs a bulk action over `filter` until no timer is left to change; returns how many changed. */
async function bulk(action, filter) {
  let changed = 0;
  for (;;) {
    const result = await api("POST", `v1/timers/bulk/${action}`, { body: filter });
    changed += result.changed.length;
    if (!result.more || result.changed.length === 0) return changed;
  }
}

function bulkActions(namespace, namePrefix, state, kind, status) {
  const selected = () => [...document.querySelectorAll("input[name=selected]:checked")].map((box) => box.value);
  const report = async (work) => {
    try {
      const text = await work();
      await router.route();
      document.getElementById("bulk-status")?.replaceChildren(h("p", { class: "notice" }, text));
    } catch (error) {
      status.replaceChildren(problem(error));
    }
  };
  const narrowed = [
    namePrefix ? `whose name begins with “${namePrefix}”` : null,
    state ? `that is ${state}` : null,
    kind ? `with a ${kind} schedule` : null,
  ].filter((part) => part);
  const matching = [`every timer of ${namespace}`, ...narrowed].join(" ");
  return h(
    "div",
    { class: "actions", id: "bulk" },
    BULK.map(([action, label, done]) =>
      h(
        "button",
        {
          type: "button",
          onclick: () =>
            report(async () => {
              const ids = selected();
              if (!ids.length) throw new Error("Select timers first, or act on all that match.");
              return `${await bulk(action, { namespace, ids })} ${done}.`;
            }),
        },
        `${label} selected`,
      ),
    ),
    BULK.map(([action, label, done]) =>
      confirmed(`${label} all matching`, `Yes: ${label.toLowerCase()} ${matching}`, () =>
        report(async () => {
          // The list's filters, every one: "all matching" is what the list showed.
          const filter = { namespace };
          if (namePrefix) filter.name_prefix = namePrefix;
          if (state) filter.state = state;
          if (kind) filter.schedule_kind = kind;
          return `${await bulk(action, filter)} ${done}.`;
        }),
      ),
    ),
  );
}

export async function timersPage(params) {
  const namespace = params.get("namespace") || "";
  const namePrefix = params.get("name_prefix") || "";
  const state = params.get("state") || "";
  const kind = params.get("schedule_kind") || "";
  const after = params.get("after") || "";
  const select = await namespaceSelect(namespace);
  const prefix = h("input", { id: "name-prefix", name: "name_prefix", value: namePrefix, autocomplete: "off" });
  const stateSelect = h(
    "select",
    { id: "state", name: "state" },
    [["", "Any"], ["active", "Active"], ["paused", "Paused"]].map(([v, text]) => h("option", { value: v, selected: v === state }, text)),
  );
  const kindSelect = h(
    "select",
    { id: "schedule-kind", name: "schedule_kind" },
    [["", "Any"], ["cron", "Cron"], ["interval", "Interval"], ["once", "Once"], ["delay", "Delay"]].map(([v, text]) =>
      h("option", { value: v, selected: v === kind }, text),
    ),
  );
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = link("#/timers", {
          namespace: select.value,
          name_prefix: prefix.value.trim(),
          state: stateSelect.value,
          schedule_kind: kindSelect.value,
        });
      },
    },
    h("label", { for: "namespace" }, "Namespace", select),
    h("label", { for: "name-prefix" }, "Name begins with", prefix),
    h("label", { for: "state" }, "State", stateSelect),
    h("label", { for: "schedule-kind" }, "Schedule", kindSelect),
    h("button", { type: "submit" }, "Show"),
    canWrite() ? h("a", { href: link("#/new", { namespace }), id: "new-timer" }, "New timer") : null,
  );
  const page = await api("GET", "v1/timers", {
    query: { namespace, name_prefix: namePrefix, state, schedule_kind: kind, after, limit: 50 },
  });
  const selectable = canWrite() && namespace !== "";
  const rows = page.timers.map((t) =>
    h(
      "tr",
      { "data-timer": t.id },
      selectable
        ? h("td", {}, h("input", { type: "checkbox", name: "selected", value: t.id, "aria-label": `Select ${t.name}` }))
        : null,
      h("td", {}, h("a", { href: `#/timers/${t.id}` }, t.name)),
      h("td", {}, t.namespace),
      h("td", {}, describeSchedule(t.schedule)),
      h("td", {}, h("span", { class: `state-${t.state}` }, t.state)),
      h("td", { class: "wide" }, when(t.next_fire_times[0])),
    ),
  );
  const list = table({}, "Timers", [
    selectable ? ["Selected", { unseen: true }] : null,
    ["Name"],
    ["Namespace"],
    ["Schedule"],
    ["State"],
    ["Next fire", { wide: true }],
  ], rows);
  const more = page.next_after
    ? h(
        "p",
        {},
        h("a", { href: link("#/timers", { namespace, name_prefix: namePrefix, state, schedule_kind: kind, after: page.next_after }), id: "next-page" }, "Next page"),
      )
    : null;
  const status = h("div", { id: "bulk-status", "aria-live": "polite" });
  show(
    "Timers",
    filters,
    selectable ? bulkActions(namespace, namePrefix, state, kind, status) : null,
    status,
    rows.length ? list : h("p", {}, "No timers here."),
    more,
  );
}
