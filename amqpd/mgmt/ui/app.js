// The single page: login, the navigation the user's tags allow, RabbitMQ's hash routes, and a refresh every
// 5 s of whatever page is open. The API decides what each user may see and do; the UI only avoids offering
// what would be refused.

import { api, ApiError, forgetLogin, loggedIn, saveLogin, whenLoginFails } from "./api.js";
import { clear, flash, h, replace } from "./dom.js";
import { overviewPage } from "./pages/overview.js";
import { channelsPage, connectionPage, connectionsPage } from "./pages/connections.js";
import { exchangePage, exchangesPage } from "./pages/exchanges.js";
import { queuePage, queuesPage } from "./pages/queues.js";
import { policiesPage, userPage, usersPage, vhostPage, vhostsPage } from "./pages/admin.js";

export const REFRESH_MS = 5000;

// [hash prefix, page, tags that see it in the menu (null: every management user)]
const ROUTES = [
  [["connections", "*"], connectionPage],
  [["connections"], connectionsPage],
  [["channels"], channelsPage],
  [["exchanges", "*", "*"], exchangePage],
  [["exchanges"], exchangesPage],
  [["queues", "*", "*"], queuePage],
  [["queues"], queuesPage],
  [["users", "*"], userPage],
  [["users"], usersPage],
  [["vhosts", "*"], vhostPage],
  [["vhosts"], vhostsPage],
  [["policies"], policiesPage],
  [[], overviewPage],
];

const MENU = [
  ["#/", "Overview", null],
  ["#/connections", "Connections", null],
  ["#/channels", "Channels", null],
  ["#/exchanges", "Exchanges", null],
  ["#/queues", "Queues and Streams", null],
  ["#/users", "Users", ["administrator"]],
  ["#/vhosts", "Virtual hosts", ["administrator"]],
  ["#/policies", "Policies", ["administrator", "policymaker"]],
];

const state = { user: null, timer: null, generation: 0 };

export function hasTag(user, tags) {
  return tags === null || user.tags.some((t) => tags.includes(t));
}

export function isAdmin(user) {
  return user.tags.includes("administrator");
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  try {
    return raw ? raw.split("/").map((part) => decodeURIComponent(part)) : [];
  } catch (e) {
    return null;  // a malformed %-escape: no such page
  }
}

function matchRoute(parts) {
  for (const [pattern, page] of ROUTES) {
    if (pattern.length === parts.length && pattern.every((p, i) => p === "*" || p === parts[i])) {
      return [page, parts.filter((_, i) => pattern[i] === "*")];
    }
  }
  return [null, []];
}

function loginForm(message) {
  const status = h("div", { id: "login-status" });
  if (message) flash(status, message, "error");
  const form = h("form", { id: "login", class: "login" },
    h("h1", {}, "amqpd"),
    h("label", {}, "Username", h("input", { name: "username", autocomplete: "username", required: true })),
    h("label", {}, "Password",
      h("input", { name: "password", type: "password", autocomplete: "current-password" })),
    h("button", { type: "submit" }, "Login"),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    saveLogin(form.elements.username.value, form.elements.password.value);
    flash(status, "Logging in…", "info");
    try {
      await start();
    } catch (e) {
      forgetLogin();
      flash(status, e instanceof ApiError ? e.reason : String(e.message), "error");
    }
  });
  return form;
}

function showLogin(message) {
  state.user = null;
  stopTimer();
  replace(document.getElementById("app"), loginForm(message));
}

function stopTimer() {
  if (state.timer !== null) clearInterval(state.timer);
  state.timer = null;
}

function layout(user) {
  const logout = h("button", { id: "logout", class: "link", type: "button" }, "Log out");
  logout.addEventListener("click", () => {
    forgetLogin();
    showLogin("");
  });
  const nav = h("nav", { id: "menu" },
    MENU.filter(([, , tags]) => hasTag(user, tags)).map(([href, text]) => h("a", { href, "data-route": href }, text)));
  return h("div", { class: "shell" },
    h("header", {}, h("span", { class: "brand" }, "amqpd"), nav,
      h("span", { class: "who" }, "User ", h("b", { id: "whoami" }, user.name), " ", logout)),
    h("main", { id: "page" }));
}

async function render() {
  if (!state.user) return;
  stopTimer();
  const generation = ++state.generation;
  const parts = parseHash() || ["?"];
  const [page, params] = matchRoute(parts);
  for (const a of document.querySelectorAll("#menu a")) {
    const route = a.getAttribute("data-route");
    a.classList.toggle("active", route === "#/" + (parts[0] || "") || (route === "#/" && !parts.length));
  }
  const main = document.getElementById("page");
  clear(main);
  if (page === null) {
    main.appendChild(h("p", { class: "empty" }, "No such page."));
    return;
  }
  const ctx = { user: state.user, params, current: () => generation === state.generation, api };
  try {
    const view = await page(ctx);
    if (!ctx.current()) return;
    replace(main, view.el);
    if (view.refresh) {
      state.timer = setInterval(async () => {
        if (!ctx.current() || document.hidden) return;
        try {
          await view.refresh();
        } catch (e) {
          console.warn("refresh failed", e);
        }
      }, REFRESH_MS);
    }
  } catch (e) {
    if (!ctx.current()) return;
    replace(main, h("div", { class: "flash error", role: "alert" },
      e instanceof ApiError ? `${e.status}: ${e.reason}` : String(e.message)));
  }
}

async function start() {
  const user = await api("GET", "whoami");
  state.user = user;
  replace(document.getElementById("app"), layout(user));
  await render();
}

whenLoginFails((reason) => showLogin(reason));
window.addEventListener("hashchange", () => render());

if (loggedIn()) {
  start().catch((e) => {
    forgetLogin();
    showLogin(e instanceof ApiError ? e.reason : String(e.message));
  });
} else {
  showLogin("");
}
