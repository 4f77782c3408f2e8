// Bindings of an exchange or a queue: the table with an Unbind button per row, and the form that adds one.

import { api, ApiError, enc } from "./api.js";
import { field, flash, h, select, show, table } from "./dom.js";
import { parseLines } from "./messages.js";

const exName = (name) => (name === "" ? "amq.default" : name);

function bindingPath(vhost, b) {
  const kind = b.destination_type === "queue" ? "q" : "e";
  return `bindings/${enc(vhost)}/e/${enc(exName(b.source))}/${kind}/${enc(b.destination)}`;
}

export function bindingsTable(vhost, bindings, changed, status) {
  const unbind = (b) => {
    if (b.source === "") return "";  // the default exchange's implicit bindings cannot be removed
    const button = h("button", { type: "button", class: "unbind" }, "Unbind");
    button.addEventListener("click", async () => {
      try {
        await api("DELETE", bindingPath(vhost, b) + "/" + enc(b.properties_key));
        await changed();
      } catch (e) {
        flash(status, e instanceof ApiError ? e.reason : e.message, "error");
      }
    });
    return button;
  };
  return table([
    ["From", (b) => (b.source === "" ? "(AMQP default)" : h("a", { href: `#/exchanges/${enc(vhost)}/${enc(b.source)}` }, b.source))],
    ["To", (b) => h("a", { href: `#/${b.destination_type === "queue" ? "queues" : "exchanges"}/${enc(vhost)}/${enc(b.destination)}` }, b.destination)],
    ["Routing key", (b) => b.routing_key],
    ["Arguments", (b) => show(b.arguments && Object.keys(b.arguments).length ? b.arguments : "")],
    ["", unbind],
  ], bindings, "No bindings.");
}

// side "source": this exchange binds to a destination typed in; side "destination": bind this queue or
// exchange from a source exchange typed in.
export function bindForm(vhost, name, side, destinationType, changed) {
  const status = h("div", { class: "status" });
  const other = h("input", { name: "other", required: true });
  const kind = select("kind", [["q", "To queue"], ["e", "To exchange"]], "q");
  const key = h("input", { name: "routing_key" });
  const args = h("textarea", { name: "arguments", rows: 2, placeholder: "name=value, one per line" });
  const form = h("form", { class: "bind" },
    side === "source" ? [kind, field("Destination", other)] : field("From exchange", other),
    field("Routing key", key), field("Arguments", args), h("button", { type: "submit" }, "Bind"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const [source, k, dest] = side === "source"
      ? [name, kind.value, other.value]
      : [other.value, destinationType === "queue" ? "q" : "e", name];
    try {
      await api("POST", `bindings/${enc(vhost)}/e/${enc(exName(source))}/${k}/${enc(dest)}`,
        { routing_key: key.value, arguments: parseLines(args.value) });
      flash(status, "Bound.");
      await changed();
    } catch (e) {
      flash(status, e instanceof ApiError ? e.reason : e.message, "error");
    }
  });
  return [form, status];
}
