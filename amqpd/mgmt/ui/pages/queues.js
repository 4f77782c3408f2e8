// #/queues: one page of queues at a time, sorted, filtered (substring or regular expression) and paged by the
// broker (RabbitMQ's page, page_size, name, use_regex, sort, sort_reverse), so a broker with many thousands of
// queues sends only the rows on screen.
// #/queues/{vhost}/{name}: counts, a rate chart, consumers, bindings, publish, get, and beyond RabbitMQ: peek,
// move, replay of dead letters and, for a stream, a browser by offset or time.

import { api, ApiError, enc } from "../api.js";
import { bindForm, bindingsTable } from "../bindings.js";
import { History, lineChart } from "../chart.js";
import { facts, field, flash, fmtBytes, fmtNumber, fmtTime, h, replace, section, select, show, table } from "../dom.js";
import { messageList, parseLines, publishForm } from "../messages.js";

const COLUMNS = [
  "name", "vhost", "type", "state", "durable", "auto_delete", "exclusive", "arguments", "policy", "consumers",
  "messages", "messages_ready", "messages_unacknowledged", "message_stats.publish_details.rate",
  "message_stats.deliver_get_details.rate", "message_stats.ack_details.rate",
];
const PAGE_SIZES = ["20", "100", "500"];

// The list's settings survive leaving and coming back to the page.
const listState = { page: 1, pageSize: "100", name: "", regex: false, sort: "", reverse: false };

const rateOf = (q, key) => {
  const stats = q.message_stats || {};
  return stats[key + "_details"] ? fmtNumber(stats[key + "_details"].rate) + "/s" : "";
};

function features(q) {
  const args = Object.keys(q.arguments || {}).map((k) => k.replace(/^x-/, ""));
  return [q.durable && "D", q.auto_delete && "AD", q.exclusive && "Excl", ...args, q.policy && "Pol:" + q.policy]
    .filter(Boolean).join(" ");
}

function queueLink(q) {
  return h("a", { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}`, class: "q-name" }, q.name);
}

function query() {
  const s = listState;
  const params = new URLSearchParams({
    page: String(s.page), page_size: s.pageSize, name: s.name, use_regex: String(s.regex), pagination: "true",
    columns: COLUMNS.join(","),
  });
  if (s.sort) {
    params.set("sort", s.sort);
    params.set("sort_reverse", String(s.reverse));
  }
  return "queues?" + params.toString();
}

function sortable(title, key, fill) {
  const arrow = listState.sort === key ? (listState.reverse ? " ▼" : " ▲") : "";
  const button = h("button", { type: "button", class: "sort", "data-sort": key }, title + arrow);
  button.addEventListener("click", () => {
    listState.reverse = listState.sort === key ? !listState.reverse : false;
    listState.sort = key;
    listState.page = 1;
    fill();
  });
  return button;
}

function pager(result, fill) {
  const go = (page) => () => {
    listState.page = page;
    fill();
  };
  const prev = h("button", { type: "button", id: "page-prev", disabled: result.page <= 1 }, "‹ Previous");
  const next = h("button", { type: "button", id: "page-next", disabled: result.page >= result.page_count }, "Next ›");
  prev.addEventListener("click", go(result.page - 1));
  next.addEventListener("click", go(result.page + 1));
  return h("div", { class: "pager" }, prev,
    h("span", { id: "page-info" },
      ` Page ${result.page} of ${result.page_count} — ${fmtNumber(result.filtered_count)} matching, ` +
      `${fmtNumber(result.total_count)} in all `), next);
}

function listTable(items, fill) {
  const s = (title, key) => sortable(title, key, fill);
  if (!items.length) return h("p", { class: "empty" }, "No queues match.");
  const heads = [
    s("Virtual host", "vhost"), s("Name", "name"), s("Type", "type"), "Features", s("State", "state"),
    s("Consumers", "consumers"), s("Ready", "messages_ready"), s("Unacked", "messages_unacknowledged"),
    s("Total", "messages"), s("Incoming", "message_stats.publish_details.rate"),
    s("Deliver / get", "message_stats.deliver_get_details.rate"), s("Ack", "message_stats.ack_details.rate"),
  ];
  const cells = [
    (q) => q.vhost, queueLink, (q) => q.type, features, (q) => q.state, (q) => fmtNumber(q.consumers),
    (q) => fmtNumber(q.messages_ready), (q) => fmtNumber(q.messages_unacknowledged), (q) => fmtNumber(q.messages),
    (q) => rateOf(q, "publish"), (q) => rateOf(q, "deliver_get"), (q) => rateOf(q, "ack"),
  ];
  return h("table", { class: "list", id: "queue-table" },
    h("thead", {}, h("tr", {}, heads.map((t) => h("th", {}, t)))),
    h("tbody", {}, items.map((q) => h("tr", {}, cells.map((c) => h("td", {}, c(q)))))));
}

function filterBar(fill, status) {
  const name = h("input", { name: "filter", id: "queue-filter", value: listState.name, placeholder: "Filter" });
  const regex = h("input", { type: "checkbox", name: "regex", id: "queue-regex", checked: listState.regex });
  const size = select("page_size", PAGE_SIZES, listState.pageSize);
  let timer = null;
  const changed = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      listState.name = name.value;
      listState.regex = regex.checked;
      listState.pageSize = size.value;
      listState.page = 1;
      fill();
    }, 250);
  };
  name.addEventListener("input", changed);
  regex.addEventListener("change", changed);
  size.addEventListener("change", changed);
  return h("div", { class: "filter" }, name, h("label", {}, regex, " Regex"), h("label", {}, " Page size ", size), status);
}

function addQueueForm(refresh) {
  const status = h("div", { class: "status" });
  const vhost = h("input", { name: "vhost", value: "/" });
  const name = h("input", { name: "name", required: true });
  const type = select("type", [["classic", "Classic"], ["quorum", "Quorum"], ["stream", "Stream"]], "classic");
  const durable = select("durable", [["true", "Durable"], ["false", "Transient"]], "true");
  const args = h("textarea", { name: "arguments", rows: 2, placeholder: "x-message-ttl=60000" });
  const form = h("form", { id: "add-queue" }, field("Virtual host", vhost), field("Name", name), field("Type", type),
    field("Durability", durable), field("Arguments", args), h("button", { type: "submit" }, "Add queue"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const args2 = parseLines(args.value);
    if (type.value !== "classic") args2["x-queue-type"] = type.value;
    try {
      await api("PUT", `queues/${enc(vhost.value)}/${enc(name.value)}`, { durable: durable.value === "true", arguments: args2 });
      flash(status, "Queue added.");
      await refresh();
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : e.message, "error");
    }
  });
  return form;
}

export async function queuesPage(ctx) {
  const box = h("div", { id: "queues" });
  const status = h("span", { class: "status", id: "filter-status" });
  const fill = async () => {
    let result;
    try {
      result = await api("GET", query());
    } catch (e) {
      if (e instanceof ApiError && e.status === 400 && listState.page > 1 && e.reason.startsWith("Page out of range")) {
        listState.page = 1;  // the list shrank under us
        return fill();
      }
      if (e instanceof ApiError && e.status === 400) return flash(status, e.reason, "error");
      throw e;
    }
    if (!ctx.current()) return;
    replace(status);
    replace(box, pager(result, fill), listTable(result.items, fill));
  };
  await fill();
  return {
    el: h("div", {}, h("h1", {}, "Queues and Streams"), filterBar(fill, status), box,
      section("Add a new queue", addQueueForm(fill))),
    refresh: fill,
  };
}

// -- one queue --------------------------------------------------------------------------------------------

function counts(q) {
  return facts([
    ["Type", q.type], ["State", q.state], ["Features", features(q)], ["Arguments", show(q.arguments)],
    ["Policy", q.policy || ""], ["Consumers", fmtNumber(q.consumers)],
    ["Ready", h("span", { id: "count-ready" }, fmtNumber(q.messages_ready))],
    ["Unacked", h("span", { id: "count-unacked" }, fmtNumber(q.messages_unacknowledged))],
    ["Total", h("span", { id: "count-total" }, fmtNumber(q.messages))],
    ["Ready bytes", fmtBytes(q.message_bytes_ready)],
    ["Incoming", rateOf(q, "publish")], ["Deliver / get", rateOf(q, "deliver_get")], ["Ack", rateOf(q, "ack")],
    q.idle_since && ["Idle since", q.idle_since],
  ]);
}

function streamFacts(s) {
  return facts([
    ["First offset", show(s.first_offset)], ["Last offset", show(s.last_offset)],
    ["First timestamp", s.first_timestamp ? fmtTime(s.first_timestamp) : ""], ["Messages", fmtNumber(s.messages)],
    ["Size", fmtBytes(s.size_bytes)], ["Segments", fmtNumber(s.segments)],
    ["Consumers' offsets", table([["Consumer", ([t]) => t], ["Offset", ([, c]) => show(c.offset)],
      ["Lag", ([, c]) => show(c.lag)], ["Tracked", ([, c]) => show(c.tracked)]], Object.entries(s.consumers || {}))],
  ]);
}

function consumersTable(q) {
  return table([
    ["Channel", (c) => c.channel_details.name], ["Consumer tag", (c) => c.consumer_tag],
    ["Ack required", (c) => show(c.ack_required)], ["Exclusive", (c) => show(c.exclusive)],
    ["Prefetch", (c) => show(c.prefetch_count)], ["Arguments", (c) => show(c.arguments)],
  ], q.consumer_details || [], "No consumers.");
}

const ACK_MODES = [
  ["ack_requeue_true", "Nack message requeue true"], ["reject_requeue_true", "Reject requeue true"],
  ["ack_requeue_false", "Automatic ack"], ["reject_requeue_false", "Reject requeue false"],
];

function errorText(e) {
  return e instanceof ApiError ? e.reason : e.message;
}

function getForm(base, changed) {
  const out = h("div", { id: "get-result" });
  const mode = select("ackmode", ACK_MODES, "ack_requeue_true");
  const encoding = select("encoding", [["auto", "Automatic string/base64"], ["base64", "Base64"]], "auto");
  const count = h("input", { name: "count", type: "number", min: 1, value: "1" });
  const truncate = h("input", { name: "truncate", type: "number", min: 1, value: "50000" });
  const form = h("form", { id: "get-messages" }, field("Ack mode", mode), field("Encoding", encoding),
    field("Messages", count), field("Truncate (bytes)", truncate), h("button", { type: "submit" }, "Get message(s)"), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const messages = await api("POST", base + "/get", {
        count: Number(count.value), ackmode: mode.value, encoding: encoding.value, truncate: Number(truncate.value),
      });
      replace(out, messageList(messages, "Queue is empty."));
      await changed();
    } catch (e) {
      flash(out, errorText(e), "error");
    }
  });
  return form;
}

function peekForm(base) {
  const out = h("div", { id: "peek-result" });
  const from = h("input", { name: "from", type: "number", min: 0, value: "0" });
  const count = h("input", { name: "count", type: "number", min: 1, value: "10" });
  const form = h("form", { id: "peek-messages" }, field("From position", from), field("Messages", count),
    h("button", { type: "submit" }, "Peek"), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const messages = await api("POST", base + "/peek", { from: Number(from.value), count: Number(count.value) });
      replace(out, messageList(messages, "No ready messages there."));
    } catch (e) {
      flash(out, errorText(e), "error");
    }
  });
  return form;
}

function streamBrowser(base, stream) {
  const out = h("div", { id: "stream-result" });
  const offset = h("input", { name: "offset", type: "number", min: 0, value: String(stream.first_offset || 0) });
  const time = h("input", { name: "time", type: "datetime-local", step: 1 });
  const count = h("input", { name: "count", type: "number", min: 1, max: 500, value: "20" });
  const next = h("button", { type: "button", id: "stream-next", disabled: true }, "Next page");
  const read = async (from) => {
    offset.value = String(from);
    const messages = await api("POST", base + "/peek", { from, count: Number(count.value) });
    replace(out, messageList(messages, "Nothing at or after that offset."));
    next.disabled = !messages.length;
    next.dataset.from = messages.length ? String(messages[messages.length - 1].offset + 1) : "";
  };
  const guard = (fn) => async (event) => {
    if (event) event.preventDefault();
    try {
      await fn();
    } catch (e) {
      flash(out, errorText(e), "error");
    }
  };
  const byTime = h("button", { type: "button", id: "stream-by-time" }, "Read from time");
  byTime.addEventListener("click", guard(async () => {
    if (!time.value) throw new Error("Choose a time first.");
    const at = new Date(time.value + "Z").getTime();  // the input is read as UTC, as times are shown
    const found = await api("GET", base + "/offset?timestamp=" + at);
    await read(found.offset);
  }));
  next.addEventListener("click", guard(() => read(Number(next.dataset.from))));
  const form = h("form", { id: "stream-browser" }, field("From offset", offset), field("Messages per page", count),
    h("button", { type: "submit" }, "Read from offset"), field("Or from time (UTC)", time), byTime, next, out);
  form.addEventListener("submit", guard(() => read(Number(offset.value))));
  return form;
}

function moveForm(base, changed) {
  const status = h("div", { class: "status", id: "move-status" });
  const count = h("input", { name: "count", type: "number", min: 0, placeholder: "all" });
  const dest = h("input", { name: "destination", placeholder: "queue name" });
  const exchange = h("input", { name: "exchange", placeholder: "or exchange" });
  const key = h("input", { name: "routing_key", placeholder: "routing key" });
  const run = async (body) => {
    try {
      const r = await api("POST", base + "/move", body);
      flash(status, `${r.moved} message(s) moved.`);
    } catch (e) {
      flash(status, errorText(e), "error");
    }
    await changed();
  };
  const form = h("form", { id: "move-messages" }, field("Messages (empty: all)", count), field("To queue", dest),
    field("Or to exchange", exchange), field("With routing key", key), h("button", { type: "submit" }, "Move"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const body = count.value ? { count: Number(count.value) } : {};
    if (exchange.value) Object.assign(body, { exchange: exchange.value, routing_key: key.value });
    else Object.assign(body, { destination: dest.value });
    run(body);
  });
  const replay = h("button", { type: "button", id: "replay-dead-letters" }, "Replay dead letters to where they came from");
  replay.addEventListener("click", () => run(count.value ? { count: Number(count.value), dead_letters: true } : { dead_letters: true }));
  return h("div", {}, form, h("div", { class: "row" }, replay), status);
}

function dangerZone(base, changed) {
  const status = h("div", { class: "status", id: "danger-status" });
  const purge = h("button", { type: "button", id: "purge-queue" }, "Purge messages");
  purge.addEventListener("click", async () => {
    if (!confirm("Purge every ready message of this queue?")) return;
    try {
      await api("DELETE", base + "/contents");
      flash(status, "Queue purged.");
      await changed();
    } catch (e) {
      flash(status, errorText(e), "error");
    }
  });
  const ifEmpty = h("input", { type: "checkbox", name: "if-empty" });
  const ifUnused = h("input", { type: "checkbox", name: "if-unused" });
  const del = h("button", { type: "button", id: "delete-queue", class: "danger" }, "Delete queue");
  del.addEventListener("click", async () => {
    if (!confirm("Delete this queue and its messages?")) return;
    const flags = new URLSearchParams({ "if-empty": String(ifEmpty.checked), "if-unused": String(ifUnused.checked) });
    try {
      await api("DELETE", base + "?" + flags.toString());
      location.hash = "#/queues";
    } catch (e) {
      flash(status, errorText(e), "error");
    }
  });
  return h("div", {}, h("div", { class: "row" }, purge),
    h("div", { class: "row" }, h("label", {}, ifEmpty, " If empty "), h("label", {}, ifUnused, " If unused "), del), status);
}

export async function queuePage(ctx) {
  const [vhost, name] = ctx.params;
  const base = `queues/${enc(vhost)}/${enc(name)}`;
  const history = new History();
  const info = h("div", { id: "queue-details" });
  const chart = h("div");
  const consumers = h("div", { id: "consumers" });
  const bindings = h("div", { id: "queue-bindings" });
  const bindStatus = h("div", { class: "status" });
  const streamBox = h("div");
  let q = await api("GET", base);
  const fill = async () => {
    q = await api("GET", base);
    history.add("Ready", q.messages_ready);
    history.add("Unacked", q.messages_unacknowledged);
    const stats = q.message_stats || {};
    for (const [key, label] of [["publish", "Incoming"], ["deliver_get", "Deliver / get"], ["ack", "Ack"]]) {
      history.add(label, stats[key + "_details"] ? stats[key + "_details"].rate : 0);
    }
    replace(info, counts(q));
    replace(chart, h("div", { class: "charts" },
      lineChart("Queued messages (since this page opened)", [history.get("Ready"), history.get("Unacked")]),
      lineChart("Message rates (since this page opened)",
        [history.get("Incoming"), history.get("Deliver / get"), history.get("Ack")], 600000, "/s")));
    replace(consumers, consumersTable(q));
    if (q.stream) replace(streamBox, streamFacts(q.stream));
    replace(bindings, bindingsTable(vhost, await api("GET", base + "/bindings"), fill, bindStatus));
  };
  await fill();
  const isStream = q.type === "stream";
  const el = h("div", {},
    h("h1", {}, isStream ? "Stream " : "Queue ", h("span", { class: "name", id: "queue-name" }, name),
      h("span", { class: "vhost" }, " in virtual host " + vhost)),
    section("Overview", info, chart), isStream ? section("Stream", streamBox) : null,
    section("Consumers", consumers),
    section("Bindings", bindings, bindStatus, bindForm(vhost, name, "destination", "queue", fill)),
    section("Publish message", publishForm(vhost, "", name)),
    isStream ? section("Stream browser", streamBrowser(base, q.stream)) : [
      section("Get messages", getForm(base, fill)),
      section("Peek at messages (they stay where they are)", peekForm(base)),
      section("Move messages", moveForm(base, fill)),
    ],
    section("Purge / delete", dangerZone(base, fill)));
  return { el, refresh: fill };
}
