// Creating and editing a timer: a form whose schedule previews its next fire times as it
// is typed, and that shows the API's errors beside the fields they name. An edit is
// conditional on the revision read, so a change made meanwhile is shown, not overwritten.
import { api, ApiError } from "./api.js";
import { h, link, problem, show, when } from "./dom.js";
import { session } from "./session.js";
import { instant } from "./timer.js";

const KINDS = [
  ["cron", "Cron expression"],
  ["every", "Every (interval)"],
  ["at", "Once, at a time"],
  ["delay", "Once, after a delay"],
];

/** A labelled input, its error shown beside it: `field` is the API's path of the field. */
function field(label, field, input, hint) {
  const error = h("p", { class: "error field-error", id: `error-${input.id}`, hidden: true });
  input.dataset.field = field;
  input.setAttribute("aria-describedby", error.id);
  return h("div", { class: "field" }, h("label", { for: input.id }, label, input), hint ? h("small", {}, hint) : null, error);
}

/** The `datetime-local` value of an ISO instant, in the browser's time zone. */
function localValue(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export async function timerForm({ id, namespace }) {
  const timer = id ? await api("GET", `v1/timers/${id}`) : null;
  const s = timer ? timer.schedule : {};
  const http = timer ? timer.action.http : {};
  const kindOf = () => (s.cron ? "cron" : s.every_ms != null ? "every" : s.at ? "at" : s.delay_ms != null ? "delay" : "cron");
  const inputs = {
    namespace: session.me.namespaces
      ? h("select", { id: "f-namespace" }, session.me.namespaces.map((ns) => h("option", { value: ns, selected: ns === namespace }, ns)))
      : h("input", { id: "f-namespace", value: namespace || "default", required: true }),
    name: h("input", { id: "f-name", value: timer ? timer.name : "", required: true, autocomplete: "off" }),
    kind: h("select", { id: "f-kind" }, KINDS.map(([v, text]) => h("option", { value: v, selected: v === kindOf() }, text))),
    cron: h("input", { id: "f-cron", value: s.cron || "", placeholder: "0 0 2 * * *", autocomplete: "off" }),
    timezone: h("input", { id: "f-timezone", value: s.timezone || "UTC", autocomplete: "off" }),
    every: h("input", { id: "f-every", type: "number", min: 1, value: s.every_ms != null ? s.every_ms / 1000 : "" }),
    at: h("input", { id: "f-at", type: "datetime-local", step: 1, value: localValue(s.at) }),
    delay: h("input", { id: "f-delay", type: "number", min: 0, value: s.delay_ms != null ? s.delay_ms / 1000 : "" }),
    url: h("input", { id: "f-url", type: "url", value: http ? http.url || "" : "", required: true }),
    method: h("select", { id: "f-method" }, ["POST", "GET", "PUT", "PATCH", "DELETE"].map((m) =>
      h("option", { value: m, selected: m === ((http && http.method) || "POST") }, m))),
    body: h("textarea", { id: "f-body", rows: 4 }, http && http.body != null ? (typeof http.body === "string" ? http.body : JSON.stringify(http.body, null, 2)) : ""),
  };
  if (timer) inputs.namespace.disabled = true;
  const groups = {
    cron: h("div", { class: "group" }, field("Cron expression (seconds first, or 5 fields)", "schedule.cron", inputs.cron),
      field("Time zone (IANA)", "schedule.timezone", inputs.timezone)),
    every: h("div", { class: "group" }, field("Every (seconds)", "schedule.every_ms", inputs.every)),
    at: h("div", { class: "group" }, field("At (your time)", "schedule.at", inputs.at)),
    delay: h("div", { class: "group" }, field("After (seconds)", "schedule.delay_ms", inputs.delay)),
  };
  const showKind = () => {
    for (const [kind, group] of Object.entries(groups)) group.hidden = kind !== inputs.kind.value;
  };
  showKind();

  const schedule = () => {
    switch (inputs.kind.value) {
      case "cron":
        return { cron: inputs.cron.value.trim(), timezone: inputs.timezone.value.trim() || "UTC" };
      case "every":
        return { every_ms: Math.round(Number(inputs.every.value) * 1000) };
      case "at":
        return { at: inputs.at.value ? instant(inputs.at.value) : "" };
      default:
        return { delay_ms: Math.round(Number(inputs.delay.value) * 1000) };
    }
  };
  const action = () => {
    const spec = { url: inputs.url.value.trim(), method: inputs.method.value };
    const text = inputs.body.value.trim();
    if (text) {
      try {
        spec.body = JSON.parse(text);
      } catch {
        spec.body = text;
      }
    }
    return { http: spec };
  };

  const form = h("form", { id: "timer-form", novalidate: true });
  const formError = h("div", { id: "form-status", "aria-live": "polite" });
  const clearErrors = (within) => {
    for (const el of form.querySelectorAll(".field-error")) {
      if (!within || el.id.startsWith("error-f-") && within.includes(el.id.slice(8))) {
        el.hidden = true;
        el.textContent = "";
      }
    }
    for (const el of form.querySelectorAll("[aria-invalid]")) {
      if (!within || within.includes(el.id.slice(2))) el.removeAttribute("aria-invalid");
    }
  };
  /** Shows `error` beside the input whose field is the longest prefix of the error's. */
  const showError = (error) => {
    const at = error instanceof ApiError ? error.field : null;
    const candidates = [...form.querySelectorAll("[data-field]")].filter(
      (el) => at && (at === el.dataset.field || at.startsWith(`${el.dataset.field}.`) || at.startsWith(`${el.dataset.field}[`)),
    );
    candidates.sort((a, b) => b.dataset.field.length - a.dataset.field.length);
    const input = candidates.find((el) => !el.closest("[hidden]")) || (at && at.startsWith("schedule") ? inputs.kind : null);
    if (!input) {
      formError.replaceChildren(problem(error));
      return;
    }
    const slot = document.getElementById(`error-${input.id}`) || formError;
    slot.textContent = error.message;
    slot.hidden = false;
    slot.setAttribute("role", "alert");
    input.setAttribute("aria-invalid", "true");
  };

  // The preview, as the schedule is typed.
  const preview = h("div", { id: "preview", "aria-live": "polite" });
  let pending = null;
  let asked = 0;
  const refreshPreview = () => {
    clearTimeout(pending);
    pending = setTimeout(async () => {
      const mine = ++asked;
      try {
        const { fire_times } = await api("POST", "v1/schedules/preview", { body: { schedule: schedule(), count: 10 } });
        if (mine !== asked) return;
        clearErrors(["cron", "timezone", "every", "at", "delay", "kind"]);
        preview.replaceChildren(
          fire_times.length
            ? h("ol", {}, fire_times.map((t) => h("li", {}, when(t))))
            : h("p", {}, "It would not fire again."),
        );
      } catch (error) {
        if (mine !== asked) return;
        clearErrors(["cron", "timezone", "every", "at", "delay", "kind"]);
        preview.replaceChildren();
        showError(error);
      }
    }, 300);
  };
  for (const input of [inputs.kind, inputs.cron, inputs.timezone, inputs.every, inputs.at, inputs.delay]) {
    input.addEventListener("input", () => {
      showKind();
      refreshPreview();
    });
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    formError.replaceChildren();
    try {
      const saved = timer
        ? await api("PATCH", `v1/timers/${id}`, {
            body: { revision: timer.revision, name: inputs.name.value.trim(), schedule: schedule(), action: action() },
          })
        : await api("POST", "v1/timers", {
            body: { namespace: inputs.namespace.value.trim(), name: inputs.name.value.trim(), schedule: schedule(), action: action() },
          });
      location.hash = `#/timers/${saved.id}`;
    } catch (error) {
      if (error.status === 409 && timer) {
        formError.replaceChildren(
          problem(new Error(`Not saved: the timer was changed since you opened it (${error.message}).`)),
          h("p", {}, h("a", { href: `#/timers/${id}` }, "See the timer as it is now")),
        );
      } else {
        showError(error);
      }
    }
  });

  form.append(
    field("Namespace", "namespace", inputs.namespace),
    field("Name", "name", inputs.name),
    field("Schedule", "schedule", inputs.kind),
    ...Object.values(groups),
    h("h2", {}, "Next fire times"),
    preview,
    h("h2", {}, "Callback"),
    field("URL", "action.http.url", inputs.url),
    field("Method", "action.http.method", inputs.method),
    field("Body (JSON or text)", "action.http.body", inputs.body),
    formError,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "primary" }, timer ? "Save" : "Create"),
      h("a", { href: timer ? `#/timers/${id}` : link("#/timers", { namespace }) }, "Cancel"),
    ),
  );
  show(timer ? `Edit ${timer.name}` : "New timer", form);
  refreshPreview();
}
