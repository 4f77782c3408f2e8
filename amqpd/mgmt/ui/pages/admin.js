// Administration: #/users, #/users/{name}, #/vhosts, #/vhosts/{name} (administrators) and #/policies
// (policymakers too). The API refuses anyone else; the menu only hides what would be refused.

import { api, ApiError, enc } from "../api.js";
import { facts, field, flash, h, replace, section, select, show, table } from "../dom.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator", ""];
const errorText = (e) => (e instanceof ApiError ? e.reason : e.message);

// A form whose submit runs action(); the outcome shown under it, then done() (a refresh).
function form(id, fields, label, action, done) {
  const status = h("div", { class: "status" });
  const el = h("form", { id }, fields, h("button", { type: "submit" }, label), status);
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await action();
      flash(status, "Done.");
      if (done) await done();
    } catch (e) {
      flash(status, errorText(e), "error");
    }
  });
  return el;
}

function button(label, action, status, cls = "") {
  const b = h("button", { type: "button", class: cls }, label);
  b.addEventListener("click", async () => {
    try {
      await action();
    } catch (e) {
      flash(status, errorText(e), "error");
    }
  });
  return b;
}

// A vhost's or user's limits: the ones set, each with Clear, and a form that sets one (negative: no limit).
async function limitsSection(kind, name, known) {
  const box = h("div", { id: kind + "-limits" });
  const status = h("div", { class: "status" });
  const base = `${kind}-limits/${enc(name)}`;
  const fill = async () => {
    const found = await api("GET", base);
    const limits = Object.entries(found.length ? found[0].value : {});
    replace(box, table([["Limit", ([k]) => k], ["Value", ([, v]) => String(v)],
      ["", ([k]) => button("Clear", async () => {
        await api("DELETE", `${base}/${enc(k)}`);
        await fill();
      }, status)]], limits, "No limits."));
  };
  await fill();
  const which = select("limit", known, known[0]);
  const value = h("input", { name: "value", type: "number", required: true });
  const set = form("set-" + kind + "-limit", [field("Limit", which), field("Value", value)], "Set limit",
    () => api("PUT", `${base}/${enc(which.value)}`, { value: Number(value.value) }), fill);
  return [section("Limits", box, status, set), fill];
}

// -- users ----------------------------------------------------------------------------------------------

export async function usersPage() {
  const box = h("div", { id: "users" });
  const fill = async () => {
    const users = await api("GET", "users");
    replace(box, table([
      ["Name", (u) => h("a", { href: "#/users/" + enc(u.name), class: "user-name" }, u.name)],
      ["Tags", (u) => u.tags.join(", ")],
    ], users, "No users."));
  };
  await fill();
  const name = h("input", { name: "username", required: true, autocomplete: "off" });
  const password = h("input", { name: "password", type: "password", autocomplete: "new-password" });
  const tags = h("input", { name: "tags", placeholder: "administrator, monitoring, ..." });
  const add = form("add-user", [field("Username", name), field("Password", password), field("Tags", tags)], "Add user",
    () => api("PUT", "users/" + enc(name.value), { password: password.value, tags: tags.value }), fill);
  return { el: h("div", {}, h("h1", {}, "Users"), box, section("Add a user", add)), refresh: fill };
}

function permissionRows(items, key, status, changed) {
  return table([
    [key === "vhost" ? "Virtual host" : "User", (p) => p[key]],
    ["Configure", (p) => p.configure], ["Write", (p) => p.write], ["Read", (p) => p.read],
    ["", (p) => button("Clear", async () => {
      await api("DELETE", `permissions/${enc(p.vhost)}/${enc(p.user)}`);
      await changed();
    }, status)],
  ], items, "No permissions.");
}

function topicRows(items, status, changed) {
  return table([
    ["Virtual host", (p) => p.vhost], ["Exchange", (p) => p.exchange], ["Write", (p) => p.write],
    ["Read", (p) => p.read],
    ["", (p) => button("Clear", async () => {
      await api("DELETE", `topic-permissions/${enc(p.vhost)}/${enc(p.user)}`);
      await changed();
    }, status)],
  ], items, "No topic permissions.");
}

export async function userPage(ctx) {
  const [name] = ctx.params;
  const info = h("div");
  const perms = h("div", { id: "user-permissions" });
  const topics = h("div", { id: "user-topic-permissions" });
  const status = h("div", { class: "status" });
  const fill = async () => {
    const u = await api("GET", "users/" + enc(name));
    replace(info, facts([["Name", u.name], ["Tags", u.tags.join(", ")], ["Hashing", u.hashing_algorithm]]));
    replace(perms, permissionRows(await api("GET", `users/${enc(name)}/permissions`), "vhost", status, fill));
    replace(topics, topicRows(await api("GET", `users/${enc(name)}/topic-permissions`), status, fill));
  };
  await fill();
  const vhosts = (await api("GET", "vhosts")).map((v) => v.name);
  const pv = select("vhost", vhosts, "/");
  const conf = h("input", { name: "configure", value: ".*" });
  const write = h("input", { name: "write", value: ".*" });
  const read = h("input", { name: "read", value: ".*" });
  const setPerm = form("set-permission", [field("Virtual host", pv), field("Configure", conf), field("Write", write),
    field("Read", read)], "Set permission",
  () => api("PUT", `permissions/${enc(pv.value)}/${enc(name)}`, { configure: conf.value, write: write.value, read: read.value }), fill);
  const tv = select("vhost", vhosts, "/");
  const tex = h("input", { name: "exchange", value: "amq.topic" });
  const twrite = h("input", { name: "write", value: ".*" });
  const tread = h("input", { name: "read", value: ".*" });
  const setTopic = form("set-topic-permission", [field("Virtual host", tv), field("Exchange", tex),
    field("Write", twrite), field("Read", tread)], "Set topic permission",
  () => api("PUT", `topic-permissions/${enc(tv.value)}/${enc(name)}`, { exchange: tex.value, write: twrite.value, read: tread.value }), fill);
  const tags = h("input", { name: "tags" });
  const password = h("input", { name: "password", type: "password", autocomplete: "new-password" });
  const update = form("update-user", [field("Tags", tags), field("New password (empty: keep)", password)], "Update user",
    () => api("PUT", "users/" + enc(name), password.value ? { tags: tags.value, password: password.value } : { tags: tags.value }), fill);
  const del = button("Delete this user", async () => {
    if (!confirm("Delete this user?")) return;
    await api("DELETE", "users/" + enc(name));
    location.hash = "#/users";
  }, status, "danger");
  const [limits, fillLimits] = await limitsSection("user", name, ["max-connections", "max-channels"]);
  const el = h("div", {}, h("h1", {}, "User ", h("span", { class: "name" }, name)), section("Details", info),
    section("Permissions", perms, setPerm), section("Topic permissions", topics, setTopic), limits,
    section("Update", update), section("Delete", del, status));
  return { el, refresh: async () => { await fill(); await fillLimits(); } };
}

// -- virtual hosts ---------------------------------------------------------------------------------------

export async function vhostsPage() {
  const box = h("div", { id: "vhosts" });
  const fill = async () => {
    replace(box, table([
      ["Name", (v) => h("a", { href: "#/vhosts/" + enc(v.name), class: "vhost-name" }, v.name)],
      ["Description", (v) => v.description || ""], ["Tags", (v) => show(v.tags)],
      ["Messages", (v) => show(v.messages)], ["Ready", (v) => show(v.messages_ready)],
      ["Unacked", (v) => show(v.messages_unacknowledged)],
    ], await api("GET", "vhosts"), "No virtual hosts."));
  };
  await fill();
  const name = h("input", { name: "name", required: true });
  const description = h("input", { name: "description" });
  const add = form("add-vhost", [field("Name", name), field("Description", description)], "Add virtual host",
    () => api("PUT", "vhosts/" + enc(name.value), { description: description.value }), fill);
  return { el: h("div", {}, h("h1", {}, "Virtual hosts"), box, section("Add a virtual host", add)), refresh: fill };
}

export async function vhostPage(ctx) {
  const [name] = ctx.params;
  const info = h("div");
  const perms = h("div", { id: "vhost-permissions" });
  const status = h("div", { class: "status" });
  const fill = async () => {
    const v = await api("GET", "vhosts/" + enc(name));
    replace(info, facts([["Name", v.name], ["Description", v.description || ""], ["Tags", show(v.tags)],
      ["Messages", show(v.messages)]]));
    replace(perms, permissionRows(await api("GET", `vhosts/${enc(name)}/permissions`), "user", status, fill));
  };
  await fill();
  const del = button("Delete this virtual host", async () => {
    if (!confirm("Delete this virtual host, its queues and their messages?")) return;
    await api("DELETE", "vhosts/" + enc(name));
    location.hash = "#/vhosts";
  }, status, "danger");
  const [limits, fillLimits] = await limitsSection("vhost", name, ["max-queues", "max-connections"]);
  const el = h("div", {}, h("h1", {}, "Virtual host ", h("span", { class: "name" }, name)),
    section("Details", info), section("Permissions", perms), limits, section("Delete", del, status));
  return { el, refresh: async () => { await fill(); await fillLimits(); } };
}

// -- policies -------------------------------------------------------------------------------------------

export async function policiesPage() {
  const box = h("div", { id: "policies" });
  const status = h("div", { class: "status" });
  const fill = async () => {
    replace(box, table([
      ["Virtual host", (p) => p.vhost], ["Name", (p) => p.name], ["Pattern", (p) => p.pattern],
      ["Apply to", (p) => p["apply-to"]], ["Definition", (p) => show(p.definition)], ["Priority", (p) => show(p.priority)],
      ["", (p) => button("Delete", async () => {
        await api("DELETE", `policies/${enc(p.vhost)}/${enc(p.name)}`);
        await fill();
      }, status)],
    ], await api("GET", "policies"), "No policies."));
  };
  await fill();
  const vhost = h("input", { name: "vhost", value: "/" });
  const name = h("input", { name: "name", required: true });
  const pattern = h("input", { name: "pattern", required: true, placeholder: "^amq\\." });
  const applyTo = select("apply-to", ["all", "queues", "exchanges"], "all");
  const definition = h("textarea", { name: "definition", rows: 3, placeholder: '{"max-length": 1000}' });
  const priority = h("input", { name: "priority", type: "number", value: "0" });
  const add = form("add-policy", [field("Virtual host", vhost), field("Name", name), field("Pattern", pattern),
    field("Apply to", applyTo), field("Definition (JSON)", definition), field("Priority", priority)], "Add / update policy",
  () => {
    let parsed;
    try {
      parsed = JSON.parse(definition.value || "{}");
    } catch (e) {
      throw new Error("The definition is not JSON: " + e.message);
    }
    return api("PUT", `policies/${enc(vhost.value)}/${enc(name.value)}`,
      { pattern: pattern.value, definition: parsed, "apply-to": applyTo.value, priority: Number(priority.value) });
  }, fill);
  return { el: h("div", {}, h("h1", {}, "Policies"), box, status, section("Add / update a policy", add)), refresh: fill };
}
