// Punctual's console: pages over the public API, routed by the URL's fragment
// (#/timers, #/timers/{id}, #/timers/{id}/edit, #/new, #/runs, #/dead, #/live, #/audit), so that the service serves the
// same few files for every page.
import { api, key } from "./api.js";
import { auditPage } from "./audit.js";
import { deadPage } from "./dead.js";
import { h, main, problem, router, show } from "./dom.js";
import { timerForm } from "./form.js";
import { livePage } from "./live.js";
import { session } from "./session.js";
import { runsPage } from "./runs.js";
import { timerPage } from "./timer.js";
import { timersPage } from "./timers.js";

function signInPage(message) {
  const input = h("input", { id: "api-key", name: "api-key", type: "password", autocomplete: "off", required: true });
  const status = h("div", { "aria-live": "polite" }, message ? problem(new Error(message)) : null);
  const form = h(
    "form",
    {
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          session.me = await api("GET", "v1/me", { apiKey: input.value.trim() });
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

const ID = "[0-9a-f-]{36}";

// One page is built at a time, the latest asked for last: a page still waiting for the API
// when another is asked for (a link followed while the first one loads, an action's page
// built again) would otherwise finish after it and replace it. The promise is the whole
// run's: awaiting it waits for the latest page.
let building = null;
let asked = false;
function route() {
  asked = true;
  if (!building) {
    building = (async () => {
      try {
        while (asked) {
          asked = false;
          await buildPage();
        }
      } finally {
        building = null;
      }
    })();
  }
  return building;
}
router.route = route;

async function buildPage() {
  const [path, search] = (location.hash.slice(1) || "/timers").split("?");
  const params = new URLSearchParams(search || "");
  if (!key.get()) return signInPage();
  try {
    if (!session.me) session.me = await api("GET", "v1/me");
    document.getElementById("nav").hidden = false;
    document.getElementById("who").textContent = `${session.me.name} (${session.me.role})`;
    let m;
    if ((m = path.match(new RegExp(`^/timers/(${ID})$`)))) await timerPage(m[1]);
    else if ((m = path.match(new RegExp(`^/timers/(${ID})/edit$`)))) await timerForm({ id: m[1] });
    else if (path === "/new") await timerForm({ namespace: params.get("namespace") || "" });
    else if (path === "/dead") await deadPage(params);
    else if (path === "/runs") await runsPage(params);
    else if (path === "/live") await livePage(params);
    else if (path === "/audit") await auditPage(params);
    else await timersPage(params);
  } catch (error) {
    if (error.status === 401) {
      key.forget();
      session.me = null;
      return signInPage("The key was refused; sign in again.");
    }
    show("Something went wrong", problem(error));
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  key.forget();
  session.me = null;
  document.getElementById("nav").hidden = true;
  // Signed in at #/sign-in already, the hash would not change: the page is built anyway.
  if (location.hash === "#/sign-in") route();
  else location.hash = "#/sign-in";
});
// The fragment routes pages, so the skip link moves the focus itself.
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
route();
