// Building pages: elements from data (text is never parsed as HTML), times, errors.
import { ApiError } from "./api.js";

export const main = document.getElementById("main");

/** The console's router (app.js sets it): `await router.route()` builds the current page again. */
export const router = { route: async () => {} };

/** An element: `h("a", {href: "#"}, "text", child…)`; `on…` attributes are listeners. */
export function h(tag, attrs = {}, ...children) {
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

/** Shows a page: its title, then `content` (empty parts left out). */
export function show(title, ...content) {
  document.title = `${title} · Punctual`;
  main.replaceChildren(h("h1", {}, title), ...content.filter((c) => c));
  // A new page: read from its start, by a screen reader as by the eye.
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

/** A duration in milliseconds, as "850 ms" or "2.3 s"; "—" for none. */
export function duration(ms) {
  if (ms == null) return "—";
  return ms < 1000 ? `${Math.max(Math.round(ms), 0)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function when(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: iso }, new Date(iso).toLocaleString());
}

/** When a run was scheduled, and which shard of its occurrence it is when fanned out. */
export function scheduled(run) {
  if (!(run.shards > 1)) return when(run.scheduled_at);
  return h("span", {}, when(run.scheduled_at), ` · shard ${run.shard}/${run.shards}`);
}

/** An API error (or any), as an alert naming the field at fault. */
export function problem(error) {
  const text = error instanceof ApiError && error.field ? `${error.field}: ${error.message}` : error.message;
  return h("p", { class: "error", role: "alert" }, text);
}

/** A link within the console: `path` and its parameters (empty ones left out). */
export function link(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v));
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * A table of `rows` under `columns`: each `[label, {wide, unseen}]` (`wide`: hidden on a
 * narrow screen; `unseen`: named for screen readers only), or null to leave it out.
 */
export function table(attrs, caption, columns, rows) {
  const heading = ([label, { wide, unseen } = {}]) =>
    h("th", { scope: "col", class: wide ? "wide" : null }, unseen ? h("span", { class: "skip" }, label) : label);
  return h(
    "div",
    { class: "table" },
    h(
      "table",
      attrs,
      h("caption", { class: "skip" }, caption),
      h("thead", {}, h("tr", {}, columns.filter((c) => c).map(heading))),
      h("tbody", {}, rows),
    ),
  );
}
