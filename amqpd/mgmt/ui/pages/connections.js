// #/connections, #/connections/{name}, #/channels: who is connected, with what, and closing a connection with
// a reason (the API lets a user close its own connections; monitoring users see everyone's).

import { api, ApiError, enc } from "../api.js";
import { facts, flash, fmtNumber, fmtTime, h, replace, section, show, table } from "../dom.js";

function rate(stats, key) {
  const d = stats && stats[key + "_details"];
  return d ? fmtNumber(d.rate) + "/s" : "";
}

const CONNECTION_COLUMNS = [
  ["Name", (c) => h("a", { href: "#/connections/" + enc(c.name), class: "conn-name" }, c.name)],
  ["Client-provided name", (c) => h("span", { class: "user-provided" }, c.user_provided_name || "")],
  ["User", (c) => c.user],
  ["Virtual host", (c) => c.vhost],
  ["State", (c) => c.state],
  ["Channels", (c) => fmtNumber(c.channels)],
  ["Client", (c) => show((c.client_properties || {}).product)],
];

export async function connectionsPage() {
  const box = h("div", { id: "connections" });
  const fill = async () => replace(box, table(CONNECTION_COLUMNS, await api("GET", "connections"), "No connections."));
  await fill();
  return { el: h("div", {}, h("h1", {}, "Connections"), box), refresh: fill };
}

function closeForm(name) {
  const status = h("div");
  const reason = h("input", { name: "reason", value: "Closed via management UI", size: 40 });
  const form = h("form", { id: "close-connection" }, h("label", {}, "Reason ", reason),
    h("button", { type: "submit" }, "Force close"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api("DELETE", "connections/" + enc(name), undefined, { "X-Reason": reason.value });
      flash(status, "Connection closed.");
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : e.message, "error");
    }
  });
  return form;
}

export async function connectionPage(ctx) {
  const [name] = ctx.params;
  const info = h("div");
  const chans = h("div");
  const fill = async () => {
    const c = await api("GET", "connections/" + enc(name));
    replace(info, facts([
      ["Name", c.name], ["Client-provided name", c.user_provided_name || ""], ["User", c.user],
      ["Virtual host", c.vhost], ["State", c.state], ["Peer", `${c.peer_host}:${c.peer_port}`],
      ["Protocol", c.protocol], ["Connected at", fmtTime(c.connected_at)], ["Heartbeat", c.timeout + " s"],
      ["Frame max", fmtNumber(c.frame_max)], ["Channel max", fmtNumber(c.channel_max)],
      ["Client properties", h("pre", { class: "json" }, JSON.stringify(c.client_properties, null, 2))],
    ]));
    replace(chans, table(CHANNEL_COLUMNS, await api("GET", "connections/" + enc(name) + "/channels"), "No channels."));
  };
  await fill();
  const el = h("div", {}, h("h1", {}, "Connection ", h("span", { class: "name" }, name)),
    section("Details", info), section("Channels", chans), section("Close this connection", closeForm(name)));
  return { el, refresh: fill };
}

const CHANNEL_COLUMNS = [
  ["Channel", (c) => c.name],
  ["User", (c) => c.user],
  ["Virtual host", (c) => c.vhost],
  ["Mode", (c) => [c.confirm && "confirm", c.transactional && "transactional"].filter(Boolean).join(", ")],
  ["Prefetch", (c) => fmtNumber(c.prefetch_count)],
  ["Unacked", (c) => fmtNumber(c.messages_unacknowledged)],
  ["Unconfirmed", (c) => fmtNumber(c.messages_unconfirmed)],
  ["Consumers", (c) => fmtNumber(c.consumer_count)],
  ["Publish", (c) => rate(c.message_stats, "publish")],
  ["Deliver / get", (c) => rate(c.message_stats, "deliver_get")],
  ["Ack", (c) => rate(c.message_stats, "ack")],
];

export async function channelsPage() {
  const box = h("div", { id: "channels" });
  const fill = async () => replace(box, table(CHANNEL_COLUMNS, await api("GET", "channels"), "No channels."));
  await fill();
  return { el: h("div", {}, h("h1", {}, "Channels"), box), refresh: fill };
}
