// Punctual's console: pages over the public API, routed by the URL's fragment
// (#/timers, #/timers/{id}), so the service serves the same few files for every page.
import { api, ApiError, key } from "./api.js";

/** The signed-in key as `GET /v1/me` describes it. */
let me = null;

const main = document.getElementById("main");

/** An element: `h("a", {href: "#"}, "text", child…)`. Text is never parsed as HTML. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(title, ...content) {
  document.title = `${title} · Punctual`;
  main.replaceChildren(h("h1", {}, title), ...content.filter((c) => c));
  // A new page: read from its start, by a screen reader as by the eye.
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

const canWrite = () => me && (me.role === "write" || me.role === "admin");

function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return h("time", { datetime: iso, title: iso }, d.toLocaleString());
}

/** The schedule in words, from the timer's `schedule`. */
export function describeSchedule(s) {
  if (s.cron) return `cron ${s.cron} (${s.timezone || "UTC"})`;
  if (s.at) return `once at ${new Date(s.at).toLocaleString()}`;
  if (s.delay_ms != null) return `once, ${duration(s.delay_ms)} after it was created`;
  if (s.every_ms != null) return `every ${duration(s.every_ms)}`;
  return "—";
}

function duration(ms) {
  const parts = [];
  let rest = Math.round(ms / 1000);
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]]) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
  }
  return parts.length ? parts.join(" ") : `${ms} ms`;
}

function problem(error) {
  const text = error instanceof ApiError && error.field ? `${error.field}: ${error.message}` : error.message;
  return h("p", { class: "error", role: "alert" }, text);
}

// ---- sign in -------------------------------------------------------------------------

function signInPage(message) {
  const input = h("input", { id: "api-key", name: "api-key", type: "password", autocomplete: "off", required: true });
  const status = h("div", { "aria-live": "polite" }, message ? problem(new Error(message)) : null);
  const form = h(
    "form",
    {
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          me = await api("GET", "v1/me", { apiKey: input.value.trim() });
          key.set(input.value.trim());
          // The page asked for before signing in (a link to a timer), or the timers.
          await route();
        } catch (error) {
          status.replaceChildren(problem(error.status === 401 ? new Error("That key is not valid.") : error));
        }
      },
    },
    h("label", { for: "api-key" }, "API key", input),
    h("button", { class: "primary", type: "submit" }, "Sign in"),
    status,
  );
  document.title = "Sign in · Punctual";
  main.replaceChildren(h("section", { class: "signin" }, h("h1", {}, "Sign in"), form));
  input.focus();
}

// ---- timers ------------------------------------------------------------------------------

async function namespaceChoices() {
  if (me.namespaces) return me.namespaces;
  const { namespaces } = await api("GET", "v1/namespaces");
  return namespaces.map((n) => n.namespace);
}

async function timersPage(params) {
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
        go("#/timers", { namespace: select.value });
      },
    },
    h("label", { for: "namespace" }, "Namespace", select),
    h("button", { type: "submit" }, "Show"),
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
      h("thead", {}, h("tr", {}, ["Name", "Namespace", "Schedule", "State"].map((c) => h("th", { scope: "col" }, c)),
        h("th", { scope: "col", class: "wide" }, "Next fire"))),
      h("tbody", {}, rows),
    ),
  );
  const more = page.next_after
    ? h("p", {}, h("a", { href: link("#/timers", { namespace, after: page.next_after }), id: "next-page" }, "Next page"))
    : null;
  show("Timers", filters, rows.length ? table : h("p", {}, "No timers here."), more);
}

// ---- one timer -----------------------------------------------------------------------------

async function timerPage(id) {
  const timer = await api("GET", `v1/timers/${id}`);
  const { runs } = await api("GET", `v1/timers/${id}/runs`, { query: { limit: 20 } });
  const status = h("div", { "aria-live": "polite", id: "action-status" });
  const act = (label, path, done) =>
    h(
      "button",
      {
        type: "button",
        onclick: async () => {
          try {
            await api("POST", `v1/timers/${id}/${path}`);
            await timerPage(id);
            document.getElementById("action-status").replaceChildren(h("p", { class: "notice" }, done));
          } catch (error) {
            status.replaceChildren(problem(error));
          }
        },
      },
      label,
    );
  const actions = canWrite()
    ? h(
        "div",
        { class: "actions" },
        timer.state === "active" ? act("Pause", "pause", "Paused.") : act("Resume", "resume", "Resumed."),
        act("Trigger now", "trigger", "Triggered: its run is below."),
      )
    : null;
  const facts = h(
    "dl",
    { class: "facts" },
    [
      ["Namespace", timer.namespace],
      ["State", h("span", { class: `state-${timer.state}` }, timer.state)],
      ["Schedule", describeSchedule(timer.schedule)],
      ["Revision", timer.revision],
      ["Misfire policy", timer.misfire_policy],
      ["Overlap policy", timer.overlap_policy],
      ["Created", when(timer.created_at)],
      ["Updated", when(timer.updated_at)],
    ].flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
  const upcoming = timer.next_fire_times.length
    ? h("ol", { id: "next-fire-times" }, timer.next_fire_times.map((t) => h("li", {}, when(t))))
    : h("p", {}, "Nothing more to fire.");
  const runRows = runs.map((r) =>
    h(
      "tr",
      { "data-run": r.id },
      h("td", {}, when(r.scheduled_at)),
      h("td", {}, h("span", { class: `status-${r.status}` }, r.status)),
      h("td", {}, r.attempt),
      h("td", {}, r.http_status ?? "—"),
      h("td", { class: "wide" }, r.duration_ms != null ? `${r.duration_ms} ms` : "—"),
      h("td", { class: "wide" }, r.error || r.response_excerpt || ""),
    ),
  );
  const runTable = runRows.length
    ? h(
        "div",
        { class: "table" },
        h(
          "table",
          { id: "runs" },
          h("thead", {}, h("tr", {}, ["Scheduled", "Status", "Attempt", "HTTP"].map((c) => h("th", { scope: "col" }, c)),
            ["Duration", "Answer or error"].map((c) => h("th", { scope: "col", class: "wide" }, c)))),
          h("tbody", {}, runRows),
        ),
      )
    : h("p", { id: "runs" }, "No runs yet.");
  show(
    timer.name,
    actions,
    status,
    facts,
    h("h2", {}, "Next fire times"),
    upcoming,
    h("h2", {}, "Runs"),
    runTable,
    h("h2", {}, "Definition"),
    h("pre", { id: "definition" }, JSON.stringify({ schedule: timer.schedule, action: timer.action, retry: timer.retry }, null, 2)),
  );
}

// ---- routing ---------------------------------------------------------------------------

function link(path, params) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v));
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

function go(path, params) {
  location.hash = link(path, params);
}

async function route() {
  const [path, search] = (location.hash.slice(1) || "/timers").split("?");
  const params = new URLSearchParams(search || "");
  if (!key.get()) return signInPage();
  try {
    if (!me) me = await api("GET", "v1/me");
    document.getElementById("nav").hidden = false;
    document.getElementById("who").textContent = `${me.name} (${me.role})`;
    const timer = path.match(/^\/timers\/([0-9a-f-]{36})$/);
    if (timer) await timerPage(timer[1]);
    else await timersPage(params);
  } catch (error) {
    if (error.status === 401) {
      key.forget();
      me = null;
      return signInPage("The key was refused; sign in again.");
    }
    show("Something went wrong", problem(error));
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  key.forget();
  me = null;
  document.getElementById("nav").hidden = true;
  location.hash = "#/sign-in";
});
// The fragment routes pages, so the skip link moves the focus itself.
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
route();
