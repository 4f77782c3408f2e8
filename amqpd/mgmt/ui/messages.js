// Showing and sending messages: the message view (properties, headers, x-death as a table, the body as JSON,
// text, hex or base64) and the publish form shared by the exchange and queue pages.

import { api, ApiError, enc } from "./api.js";
import { facts, field, flash, fmtTime, h, replace, select, show, table } from "./dom.js";

function bodyBytes(m) {
  if (m.payload_encoding === "base64") {
    const raw = atob(m.payload);
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }
  return new TextEncoder().encode(m.payload);
}

function hex(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const chunk = Array.from(bytes.slice(i, i + 16));
    const hexes = chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = chunk.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(i.toString(16).padStart(8, "0") + "  " + hexes.padEnd(48) + "  " + text);
  }
  return lines.join("\n");
}

function base64(bytes) {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

// The forms a body can be shown in, the first that applies chosen by default.
function views(m) {
  const bytes = bodyBytes(m);
  const out = [];
  if (m.payload_encoding === "string") {
    try {
      out.push(["JSON", JSON.stringify(JSON.parse(m.payload), null, 2)]);
    } catch (e) {
      /* not JSON: shown as text */
    }
    out.push(["Text", m.payload]);
  }
  out.push(["Hex", hex(bytes)], ["Base64", base64(bytes)]);
  return out;
}

function bodyView(m) {
  const forms = views(m);
  const pre = h("pre", { class: "payload" }, forms[0][1]);
  const buttons = forms.map(([name, text], i) => {
    const b = h("button", { type: "button", class: i ? "tab" : "tab active" }, name);
    b.addEventListener("click", () => {
      for (const other of buttons) other.classList.remove("active");
      b.classList.add("active");
      replace(pre, text);
    });
    return b;
  });
  return h("div", { class: "body-view" }, h("div", { class: "tabs" }, buttons), pre);
}

function deathTable(deaths) {
  return table([
    ["Queue", (d) => show(d.queue)], ["Reason", (d) => show(d.reason)], ["Count", (d) => show(d.count)],
    ["Exchange", (d) => show(d.exchange)], ["Routing keys", (d) => show(d["routing-keys"])],
    ["Time", (d) => (typeof d.time === "number" ? fmtTime(d.time * 1000) : show(d.time))],
  ], deaths);
}

function headersView(headers) {
  const rows = Object.entries(headers || {}).filter(([k]) => k !== "x-death");
  const deaths = Array.isArray((headers || {})["x-death"]) ? headers["x-death"] : null;
  return [
    rows.length ? h("div", { class: "headers" }, h("h4", {}, "Headers"),
      table([["Header", ([k]) => k], ["Value", ([, v]) => show(v)]], rows)) : null,
    deaths ? h("div", { class: "x-death" }, h("h4", {}, "x-death"), deathTable(deaths)) : null,
  ];
}

export function messageView(m, index) {
  const props = { ...(m.properties || {}) };
  const headers = props.headers;
  delete props.headers;
  return h("div", { class: "message" },
    h("h3", {}, "Message " + (index + 1)),
    facts([
      m.offset !== undefined && ["Offset", String(m.offset)],
      m.timestamp !== undefined && ["Appended", fmtTime(m.timestamp)],
      ["Exchange", m.exchange === "" ? "(AMQP default)" : m.exchange],
      ["Routing key", m.routing_key],
      m.redelivered !== undefined && ["Redelivered", String(m.redelivered)],
      m.message_count !== undefined && ["Messages left", String(m.message_count)],
      ["Properties", Object.keys(props).length ? table([["Property", ([k]) => k], ["Value", ([, v]) => show(v)]],
        Object.entries(props)) : ""],
      ["Payload", `${m.payload_bytes} bytes, ${m.payload_encoding}`],
    ]),
    headersView(headers),
    bodyView(m));
}

export function messageList(messages, empty = "No messages.") {
  if (!messages.length) return h("p", { class: "empty" }, empty);
  return h("div", { class: "messages" }, messages.map((m, i) => messageView(m, i)));
}

// "key=value" lines as an object; numbers stay numbers so that x-delay and friends have the right type.
export function parseLines(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const at = line.indexOf("=");
    if (at < 1) continue;
    const key = line.slice(0, at).trim();
    const raw = line.slice(at + 1).trim();
    out[key] = /^-?\d+$/.test(raw) ? Number(raw) : raw;
  }
  return out;
}

// Publish to an exchange; fixedKey: the queue page's form, which publishes to the default exchange.
export function publishForm(vhost, exchange, fixedKey) {
  const status = h("div", { class: "status" });
  const key = h("input", { name: "routing_key", value: fixedKey || "", disabled: fixedKey !== undefined });
  const mode = select("delivery_mode", [["1", "1 - Non-persistent"], ["2", "2 - Persistent"]], "1");
  const headers = h("textarea", { name: "headers", rows: 2, placeholder: "name=value, one per line" });
  const props = h("textarea", { name: "properties", rows: 2, placeholder: "content_type=application/json" });
  const payload = h("textarea", { name: "payload", rows: 4 });
  const encoding = select("payload_encoding", [["string", "String"], ["base64", "Base64"]], "string");
  const form = h("form", { class: "publish" },
    field("Routing key", key), field("Delivery mode", mode), field("Headers", headers),
    field("Properties", props), field("Payload", payload), field("Payload encoding", encoding),
    h("button", { type: "submit" }, "Publish message"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const properties = { ...parseLines(props.value), delivery_mode: Number(mode.value) };
    const hdrs = parseLines(headers.value);
    if (Object.keys(hdrs).length) properties.headers = hdrs;
    const name = exchange === "" ? "amq.default" : exchange;
    try {
      const r = await api("POST", `exchanges/${enc(vhost)}/${enc(name)}/publish`, {
        routing_key: fixedKey !== undefined ? fixedKey : key.value, properties, payload: payload.value,
        payload_encoding: encoding.value,
      });
      flash(status, r.routed ? "Message published." : "Message published, but not routed.", r.routed ? "ok" : "warn");
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : e.message, "error");
    }
  });
  return form;
}
