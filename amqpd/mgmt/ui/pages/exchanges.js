// #/exchanges and #/exchanges/{vhost}/{name}: exchanges with their features, delayed-message counts and the
// next due time (amqpd's x-delayed-message), bindings, publishing, adding and deleting.

import { api, ApiError, enc } from "../api.js";
import { bindForm, bindingsTable } from "../bindings.js";
import { facts, field, flash, fmtNumber, fmtTime, h, replace, section, select, show, table } from "../dom.js";
import { parseLines, publishForm } from "../messages.js";

const TYPES = ["direct", "fanout", "topic", "headers", "x-delayed-message"];

function features(x) {
  return [x.durable && "D", x.auto_delete && "AD", x.internal && "I", x.policy && "Pol"].filter(Boolean).join(" ");
}

function link(x) {
  const shown = x.name === "" ? "(AMQP default)" : x.name;
  return h("a", { href: `#/exchanges/${enc(x.vhost)}/${enc(x.name === "" ? "amq.default" : x.name)}`, class: "ex-name" }, shown);
}

function delayed(x) {
  if (x.messages_delayed === undefined) return "";
  const due = x.next_delivery_due ? " (next " + fmtTime(x.next_delivery_due) + ")" : "";
  return fmtNumber(x.messages_delayed) + due;
}

function addForm(refresh) {
  const status = h("div", { class: "status" });
  const vhost = h("input", { name: "vhost", value: "/" });
  const name = h("input", { name: "name", required: true });
  const type = select("type", TYPES, "direct");
  const durable = select("durable", [["true", "Durable"], ["false", "Transient"]], "true");
  const args = h("textarea", { name: "arguments", rows: 2, placeholder: "x-delayed-type=direct" });
  const form = h("form", { id: "add-exchange" }, field("Virtual host", vhost), field("Name", name),
    field("Type", type), field("Durability", durable), field("Arguments", args),
    h("button", { type: "submit" }, "Add exchange"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api("PUT", `exchanges/${enc(vhost.value)}/${enc(name.value)}`,
        { type: type.value, durable: durable.value === "true", arguments: parseLines(args.value) });
      flash(status, "Exchange added.");
      await refresh();
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : e.message, "error");
    }
  });
  return form;
}

export async function exchangesPage() {
  const box = h("div", { id: "exchanges" });
  const fill = async () => {
    const items = await api("GET", "exchanges");
    replace(box, table([
      ["Virtual host", (x) => x.vhost], ["Name", link], ["Type", (x) => x.type], ["Features", features],
      ["Delayed messages", delayed],
    ], items, "No exchanges."));
  };
  await fill();
  return { el: h("div", {}, h("h1", {}, "Exchanges"), box, section("Add a new exchange", addForm(fill))), refresh: fill };
}

function deleteForm(vhost, name) {
  const status = h("div", { class: "status" });
  const button = h("button", { type: "button", id: "delete-exchange", class: "danger" }, "Delete this exchange");
  button.addEventListener("click", async () => {
    if (!confirm("Delete this exchange?")) return;
    try {
      await api("DELETE", `exchanges/${enc(vhost)}/${enc(name)}`);
      location.hash = "#/exchanges";
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : e.message, "error");
    }
  });
  return [button, status];
}

export async function exchangePage(ctx) {
  const [vhost, name] = ctx.params;
  const info = h("div");
  const out = h("div", { id: "bindings-source" });
  const into = h("div", { id: "bindings-destination" });
  const status = h("div", { class: "status" });
  const base = `exchanges/${enc(vhost)}/${enc(name)}`;
  const fill = async () => {
    const x = await api("GET", base);
    replace(info, facts([
      ["Name", x.name === "" ? "(AMQP default)" : x.name], ["Virtual host", x.vhost], ["Type", x.type],
      ["Features", features(x)], ["Arguments", show(x.arguments)], ["Policy", x.policy || ""],
      x.messages_delayed !== undefined && ["Delayed messages", fmtNumber(x.messages_delayed)],
      x.messages_delayed !== undefined && ["Next due", x.next_delivery_due ? fmtTime(x.next_delivery_due) : "none"],
    ]));
    replace(out, bindingsTable(vhost, await api("GET", base + "/bindings/source"), fill, status));
    replace(into, bindingsTable(vhost, await api("GET", base + "/bindings/destination"), fill, status));
  };
  await fill();
  const isDefault = name === "amq.default";
  const el = h("div", {},
    h("h1", {}, "Exchange ", h("span", { class: "name" }, isDefault ? "(AMQP default)" : name)),
    section("Details", info),
    section("Bindings from this exchange", out, status, isDefault ? null : bindForm(vhost, name, "source", "exchange", fill)),
    section("Bindings to this exchange", into),
    section("Publish message", publishForm(vhost, isDefault ? "" : name)),
    isDefault || name.startsWith("amq.") ? null : section("Delete", deleteForm(vhost, name)));
  return { el, refresh: fill };
}
