// A timer's page: what it is, when it fires next, its latest runs, and what a write key
// may do to it (pause or resume with a note, trigger, backfill, edit, delete).
import { api } from "./api.js";
import { confirmed } from "./confirm.js";
import { h, problem, router, scheduled, show, table, when } from "./dom.js";
import { describeSchedule } from "./schedule.js";
import { canWrite } from "./session.js";

/** A `datetime-local` input's value (the browser's own time zone) as an ISO instant. */
export const instant = (value) => new Date(value).toISOString();

// The page shown may be another by the time an action ends (a link followed meanwhile).
function notice(text) {
  document.getElementById("action-status")?.replaceChildren(h("p", { class: "notice" }, text));
}

function failed(error) {
  document.getElementById("action-status")?.replaceChildren(problem(error));
}

/** Posts an action on the timer, then builds its page again and says `done` (or the error). */
async function act(id, path, done, body) {
  try {
    await api("POST", `v1/timers/${id}/${path}`, { body });
    await router.route();
    notice(done);
  } catch (error) {
    failed(error);
  }
}

function actionButton(id, label, path, done) {
  return h("button", { type: "button", onclick: () => act(id, path, done) }, label);
}

/** Pause or resume, with an optional note on why (kept beside the state until its next change). */
function stateForm(id, state) {
  const [path, label, done] = state === "active" ? ["pause", "Pause", "Paused."] : ["resume", "Resume", "Resumed."];
  const note = h("input", { id: "state-note", name: "note", maxlength: 500, autocomplete: "off" });
  return h(
    "form",
    {
      class: "inline",
      id: "state-change",
      onsubmit: (event) => {
        event.preventDefault();
        return act(id, path, done, { note: note.value.trim() || null });
      },
    },
    h("label", { for: "state-note" }, "Note (why, optional)", note),
    h("button", { type: "submit" }, label),
  );
}

/** Delete, confirmed. */
function deleteButton(id) {
  return confirmed("Delete", "Yes, delete it", async () => {
    try {
      await api("DELETE", `v1/timers/${id}`);
      location.hash = "#/timers";
    } catch (error) {
      failed(error);
    }
  });
}

/** Backfill a past range: counted first (a dry run), then confirmed. */
function backfillForm(id) {
  const from = h("input", { id: "backfill-from", name: "from", type: "datetime-local", step: 1, required: true });
  const to = h("input", { id: "backfill-to", name: "to", type: "datetime-local", step: 1, required: true });
  const outcome = h("div", { id: "backfill-outcome", "aria-live": "polite" });
  const body = () => ({ from: instant(from.value), to: instant(to.value) });
  const confirm = async () => {
    try {
      const done = await api("POST", `v1/timers/${id}/backfill`, { body: body() });
      outcome.replaceChildren(h("p", { class: "notice" }, `Backfilled: ${done.added} occurrences added.`));
    } catch (error) {
      outcome.replaceChildren(problem(error));
    }
  };
  return h(
    "form",
    {
      class: "filters",
      id: "backfill",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const counted = await api("POST", `v1/timers/${id}/backfill`, { body: { ...body(), dry_run: true } });
          // replaceChildren writes a null out as the text "null": only what is there.
          const parts = [
            h("p", {}, `${counted.occurrences} occurrences in that range; ${counted.added} will be added.`),
            counted.added > 0 ? h("button", { type: "button", class: "primary", onclick: confirm }, "Confirm backfill") : null,
          ];
          outcome.replaceChildren(...parts.filter((part) => part));
        } catch (error) {
          outcome.replaceChildren(problem(error));
        }
      },
    },
    h("label", { for: "backfill-from" }, "From (your time)", from),
    h("label", { for: "backfill-to" }, "To (your time)", to),
    h("button", { type: "submit" }, "Count occurrences"),
    outcome,
  );
}

/** What a timer's fan-out makes of each occurrence. */
function fanOut(fan) {
  if (fan.shards) return `${fan.shards} shards an occurrence`;
  if (fan.broadcast === "dns") return "a call to every address of the URL's host";
  return `a call to each of ${fan.broadcast.join(", ")}`;
}

function runsTable(runs) {
  if (!runs.length) return h("p", { id: "runs" }, "No runs yet.");
  const rows = runs.map((r) =>
    h(
      "tr",
      { "data-run": r.id },
      h("td", {}, scheduled(r)),
      h("td", {}, h("span", { class: `status-${r.status}` }, r.status)),
      h("td", {}, r.attempt),
      h("td", {}, r.http_status ?? "—"),
      h("td", { class: "wide" }, r.duration_ms != null ? `${r.duration_ms} ms` : "—"),
      h("td", { class: "wide" }, r.error || r.response_excerpt || ""),
    ),
  );
  return table({ id: "runs" }, "Runs", [
    ["Scheduled"],
    ["Status"],
    ["Attempt"],
    ["HTTP"],
    ["Duration", { wide: true }],
    ["Answer or error", { wide: true }],
  ], rows);
}

export async function timerPage(id) {
  const timer = await api("GET", `v1/timers/${id}`);
  const { runs } = await api("GET", `v1/timers/${id}/runs`, { query: { limit: 20 } });
  const writable = canWrite();
  const actions = writable
    ? h(
        "div",
        { class: "actions" },
        stateForm(id, timer.state),
        actionButton(id, "Trigger now", "trigger", "Triggered: its run is below."),
        timer.action.http ? h("a", { href: `#/timers/${id}/edit`, id: "edit" }, "Edit") : null,
        deleteButton(id),
      )
    : null;
  const facts = h(
    "dl",
    { class: "facts" },
    [
      ["Namespace", timer.namespace],
      ["State", h("span", { class: `state-${timer.state}` }, timer.state)],
      timer.state_note ? ["Note", h("span", { id: "state-note-shown" }, timer.state_note)] : null,
      ["Schedule", describeSchedule(timer.schedule)],
      ["Revision", timer.revision],
      ["Misfire policy", timer.misfire_policy],
      ["Overlap policy", timer.overlap_policy],
      timer.fan_out ? ["Fan-out", fanOut(timer.fan_out)] : null,
      ["Created", when(timer.created_at)],
      ["Updated", when(timer.updated_at)],
    ]
      .filter((fact) => fact)
      .flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
  const upcoming = timer.next_fire_times.length
    ? h("ol", { id: "next-fire-times" }, timer.next_fire_times.map((t) => h("li", {}, when(t))))
    : h("p", { id: "next-fire-times" }, "Nothing more to fire.");
  show(
    timer.name,
    actions,
    h("div", { "aria-live": "polite", id: "action-status" }),
    facts,
    h("h2", {}, "Next fire times"),
    upcoming,
    h("h2", {}, "Runs"),
    runsTable(runs),
    writable && timer.state === "active" ? h("h2", {}, "Backfill") : null,
    writable && timer.state === "active" ? backfillForm(id) : null,
    h("h2", {}, "Definition"),
    h("pre", { id: "definition" }, JSON.stringify({ schedule: timer.schedule, action: timer.action, retry: timer.retry }, null, 2)),
  );
}
