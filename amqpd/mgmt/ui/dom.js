// Building the page: every element through createElement, every piece of data through text nodes or
// attribute values, never through HTML parsing. Names, headers and bodies come from clients and are
// attacker-controlled; this module is the only place the page gets built, so nothing here parses markup.

// Hash routes and same-origin paths only: no javascript: URL, no other site ("//host" or "/\\host").
const SAFE_LINK = /^(#|\/(?![\/\\]))/;

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) {
      el.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      el.className = value;
    } else if (key === "href") {
      if (!SAFE_LINK.test(String(value))) throw new Error("refusing a link that is not a route: " + value);
      el.setAttribute("href", value);
    } else if (key === "value") {
      el.value = value;
    } else if (key === "checked" || key === "selected" || key === "disabled") {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

// A table of rows; columns are [heading, row => cell content] pairs.
export function table(columns, rows, empty = "Nothing to show.") {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("table", { class: "list" },
    h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", {}, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row)))))));
}

// Key/value facts as a two-column table.
export function facts(pairs) {
  return h("table", { class: "facts" },
    h("tbody", {}, pairs.filter(Boolean).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

export function field(label, input) {
  return h("label", { class: "field" }, h("span", {}, label), input);
}

export function select(name, options, value) {
  return h("select", { name },
    options.map((o) => {
      const [v, text] = Array.isArray(o) ? o : [o, o];
      return h("option", { value: v, selected: v === value }, text);
    }));
}

export function section(title, ...body) {
  return h("section", { class: "panel" }, h("h2", {}, title), ...body);
}

export function fmtNumber(n) {
  if (n === undefined || n === null) return "";
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(1);
}

export function fmtBytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

export function fmtDuration(ms) {
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const mm = Math.floor(s / 60); s -= mm * 60;
  return (d ? d + "d " : "") + (d || hh ? hh + "h " : "") + mm + "m " + s + "s";
}

export function fmtTime(ms) {
  if (typeof ms !== "number") return "";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

// A value from the API (maybe nested) as readable text: objects as compact JSON.
export function show(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function flash(el, text, kind = "ok") {
  replace(el, h("div", { class: "flash " + kind, role: kind === "error" ? "alert" : "status" }, text));
}
