// #/ : totals, the last 10 minutes of message rates and queued messages (the broker keeps that history, so the
// charts are full as soon as the page opens), node facts, listeners, and definitions for administrators.

import { api, ApiError } from "../api.js";
import { lineChart, levelsFrom, ratesFrom } from "../chart.js";
import { facts, flash, fmtBytes, fmtDuration, fmtNumber, h, replace, section, table } from "../dom.js";

const HISTORY = "msg_rates_age=600&msg_rates_incr=5&lengths_age=600&lengths_incr=5";
const RATES = [["publish", "Publish"], ["deliver_get", "Deliver / get"], ["ack", "Consumer ack"]];
const LEVELS = [["messages_ready", "Ready"], ["messages_unacknowledged", "Unacked"], ["messages", "Total"]];

function samples(details) {
  return (details && details.samples) || [];
}

function charts(o) {
  const stats = o.message_stats || {};
  const totals = o.queue_totals || {};
  return h("div", { class: "charts" },
    lineChart("Queued messages", LEVELS.map(([key, label]) =>
      ({ label, points: levelsFrom(samples(totals[key + "_details"])) }))),
    lineChart("Message rates", RATES.map(([key, label]) =>
      ({ label, points: ratesFrom(samples(stats[key + "_details"])) })), 600000, "/s"));
}

function totalsTable(o) {
  const t = o.object_totals || {};
  const q = o.queue_totals || {};
  return facts([
    ["Connections", fmtNumber(t.connections)], ["Channels", fmtNumber(t.channels)],
    ["Exchanges", fmtNumber(t.exchanges)], ["Queues", fmtNumber(t.queues)], ["Consumers", fmtNumber(t.consumers)],
    ["Messages ready", fmtNumber(q.messages_ready)], ["Messages unacked", fmtNumber(q.messages_unacknowledged)],
  ]);
}

function nodeFacts(o, node) {
  if (!node) return h("p", { class: "empty" }, "Node details need the monitoring or administrator tag.");
  const alarms = [node.mem_alarm && "memory", node.disk_free_alarm && "disk"].filter(Boolean);
  return facts([
    ["Node", node.name], ["Version", `${o.product_name || "amqpd"} ${o.product_version || ""}`],
    ["Uptime", fmtDuration(node.uptime)], ["Memory used", fmtBytes(node.mem_used)],
    node.disk_free !== undefined && ["Disk free", fmtBytes(node.disk_free)],
    ["Disk free limit", fmtBytes(node.disk_free_limit)],
    ["Alarms", h("span", { class: alarms.length ? "alarm" : "ok", id: "alarms" }, alarms.length ? alarms.join(", ") : "none")],
  ]);
}

function listeners(o) {
  return table([["Protocol", (l) => l.protocol], ["Bound to", (l) => l.ip_address], ["Port", (l) => l.port]],
    o.listeners || []);
}

function definitions() {
  const status = h("div");
  const download = h("button", { type: "button", id: "definitions-download" }, "Download broker definitions");
  download.addEventListener("click", async () => {
    const doc = await api("GET", "definitions");
    const url = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" }));
    const a = document.createElement("a");
    a.setAttribute("href", url);  // an object URL made here, not data from the broker
    a.setAttribute("download", "amqpd-definitions.json");
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  const file = h("input", { type: "file", id: "definitions-file", accept: "application/json,.json" });
  const upload = h("button", { type: "button", id: "definitions-upload" }, "Upload broker definitions");
  upload.addEventListener("click", async () => {
    if (!file.files.length) return flash(status, "Choose a file first.", "error");
    try {
      const doc = JSON.parse(await file.files[0].text());
      await api("POST", "definitions", doc);
      flash(status, "Definitions imported.");
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : "Not a JSON document: " + e.message, "error");
    }
  });
  return section("Export / import definitions", h("div", { class: "row" }, download), h("div", { class: "row" }, file, upload), status);
}

async function load(monitor) {
  const o = await api("GET", "overview?" + HISTORY);
  let node = null;
  if (monitor) {
    try {
      node = await api("GET", "nodes/" + encodeURIComponent(o.node));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
    }
  }
  return [o, node];
}

export async function overviewPage(ctx) {
  const monitor = ctx.user.tags.some((t) => t === "administrator" || t === "monitoring");
  const chartsBox = h("div");
  const totalsBox = h("div", { id: "totals" });
  const nodeBox = h("div");
  const listenersBox = h("div");
  const fill = async () => {
    const [o, node] = await load(monitor);
    replace(chartsBox, charts(o));
    replace(totalsBox, totalsTable(o));
    replace(nodeBox, nodeFacts(o, node));
    replace(listenersBox, listeners(o));
  };
  await fill();
  const el = h("div", {}, h("h1", {}, "Overview"),
    section("Totals", totalsBox), section("Last ten minutes", chartsBox),
    section("Node", nodeBox), section("Listeners", listenersBox),
    ctx.user.tags.includes("administrator") ? definitions() : null);
  return { el, refresh: fill };
}
