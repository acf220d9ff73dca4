// The console's only way to the service: the public API, with the signed-in key.
// The key lives in sessionStorage (this tab, until sign-out or the tab closes).

const KEY = "punctual.key";

/** The API's root, beside the console's own folder: works behind any path prefix. */
const root = new URL("../", document.baseURI);

export class ApiError extends Error {
  /** @param {number} status @param {{title?: string, detail?: string, field?: string|null}} problem */
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.field = problem.field ?? null;
  }
}

export const key = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  forget: () => sessionStorage.removeItem(KEY),
};

/**
 * Calls the API: `path` is relative to its root (`v1/timers`), `query` an object of
 * parameters (empty ones left out), `body` sent as JSON.
 */
export async function api(method, path, { query, body, apiKey } = {}) {
  const url = new URL(path, root);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  const headers = { Accept: "application/json" };
  const bearer = apiKey ?? key.get();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { detail: text };
  }
  if (!response.ok) throw new ApiError(response.status, parsed || {});
  return parsed;
}
