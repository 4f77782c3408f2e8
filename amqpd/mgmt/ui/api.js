// The HTTP API, called with the credentials typed into the login form. They live in sessionStorage (this tab
// only, gone when it closes) and travel as the Authorization header: the browser never attaches them by itself,
// so a page on another site cannot make requests with them (no cookie, hence no CSRF).

const KEY = "amqpd.credentials";

export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
    this.reason = reason;
  }
}

function encodeCredentials(username, password) {
  const bytes = new TextEncoder().encode(username + ":" + password);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

export function saveLogin(username, password) {
  sessionStorage.setItem(KEY, encodeCredentials(username, password));
}

export function forgetLogin() {
  sessionStorage.removeItem(KEY);
}

export function loggedIn() {
  return sessionStorage.getItem(KEY) !== null;
}

export const enc = encodeURIComponent;

let onLoginFailed = () => {};
export function whenLoginFails(callback) {
  onLoginFailed = callback;
}

export async function api(method, path, body, extraHeaders = {}) {
  const headers = {
    ...extraHeaders,
    "X-Requested-With": "XMLHttpRequest",
    Authorization: "Basic " + sessionStorage.getItem(KEY),
  };
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch("/api/" + path, init);
  if (response.status === 204 || response.status === 201) return null;
  let data = null;
  try {
    data = await response.json();
  } catch (e) {
    data = null;
  }
  if (!response.ok) {
    const reason = data && data.reason ? String(data.reason) : response.statusText;
    if (response.status === 401 && data && data.error === "not_authorized") onLoginFailed(reason);
    throw new ApiError(response.status, reason);
  }
  return data;
}

export const get = (path) => api("GET", path);
