"""amqpctl: rabbitmqctl's commands and columns, over the management HTTP API.

    amqpctl list_queues name messages consumers
    amqpctl -p /orders purge_queue incoming
    amqpctl --formatter json list_exchanges | jq .

Connection: --url, else the amqpd whose data dir is --data-dir (AMQPD_DATA_DIR, default amqpd's own), found
by its runtime file, else http://127.0.0.1:15672 if amqpd (not another broker) answers there;
--username/--password (default guest/guest), or
AMQPCTL_URL, AMQPCTL_USERNAME, AMQPCTL_PASSWORD; over https://, --ssl-ca-cert-file (--cacert) and, when the
broker checks client certificates, --ssl-cert-file and --ssl-key-file (or AMQPCTL_SSL_*). Exit codes: 0 done,
64 bad usage, 65 the broker refused the request (400/404), 69 the broker is unreachable (a TLS handshake that
fails included), 77 not authorised (401). Errors go to stderr in one line.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import ssl
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx

from amqpd import __version__, runtime_file
from amqpd.config import default_data_dir

EX_OK, EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_NOPERM = 0, 64, 65, 69, 77


class CtlError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- talking to the API ---------------------------------------------------------------------------------------


class API:
    def __init__(
        self, url: str, username: str, password: str, timeout: float, tls: ssl.SSLContext | None = None
    ) -> None:
        self.client = httpx.Client(
            base_url=url.rstrip("/"),
            auth=(username, password),
            timeout=timeout,
            verify=tls if tls is not None else True,
        )
        self.url = url

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        try:
            r = self.client.request(method, path, json=body, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise CtlError(f"cannot reach the broker's management API at {self.url}: {exc}", EX_UNAVAILABLE) from None
        if r.status_code >= 400:
            try:
                detail = r.json()
                reason = detail.get("reason") or detail.get("error") or r.text
            except ValueError:
                reason = r.text or r.reason_phrase
            code = EX_NOPERM if r.status_code == 401 else EX_UNAVAILABLE if r.status_code >= 500 else EX_DATAERR
            raise CtlError(f"{reason} ({r.status_code} {method} {path})", code)
        return r.json() if r.content and "json" in r.headers.get("content-type", "") else None


def tls_context(ca_file: str | None, cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """For an https:// URL: the system's CAs or ca_file, and a client certificate when the broker asks for
    one (mgmt_tls_verify_peer). None: httpx's defaults."""
    if not (ca_file or cert_file):
        return None
    ctx = ssl.create_default_context(cafile=ca_file or None)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or None)
    return ctx


def q(name: str) -> str:
    """A path segment: vhost names like "/" and queue names with any character."""
    return urllib.parse.quote(name, safe="")


# -- finding the broker -----------------------------------------------------------------------------------------

FALLBACK_URL = "http://127.0.0.1:15672"


def broker_url(url: str | None, data_dir: str | None) -> tuple[str, str | None]:
    """The management API to talk to, and the runtime file it came from: --url (or AMQPCTL_URL) as given
    (None); else the URL a running amqpd wrote in its data dir's runtime file; else RabbitMQ's default port
    (None: check_amqpd then makes sure amqpd, not another broker, answers there)."""
    if url:
        return url, ""
    directory = data_dir or default_data_dir()
    info = runtime_file.read(directory)
    if info is None:
        return FALLBACK_URL, None
    found = str(runtime_file.path(directory))
    if not info.get("management_url"):
        raise CtlError(
            f"amqpd (pid {info.get('pid')}, {found}) serves no management API; start it with --management-port",
            EX_UNAVAILABLE,
        )
    return str(info["management_url"]), found


class NotAmqpd(CtlError):
    """The management API found without --url is another broker's."""


def open_api(args: argparse.Namespace) -> API:
    url, found_in = broker_url(args.url, args.data_dir)
    api = API(
        url, args.login, args.login_password, args.timeout, tls_context(args.ca_file, args.cert_file, args.key_file)
    )
    if found_in is None:
        check_amqpd(api, args.data_dir)
    return api


def check_amqpd(api: API, data_dir: str | None) -> None:
    """Refuse to act on a management API that is not amqpd's (a RabbitMQ beside it holds 15672) unless the
    operator named it with --url."""
    overview = api.call("GET", "/api/overview") or {}
    product = overview.get("product_name")
    if product != "amqpd":
        what = f"{product or 'RabbitMQ'} {overview.get('product_version') or overview.get('rabbitmq_version', '')}"
        raise NotAmqpd(
            f"the management API at {api.url} is {what.strip()}, not amqpd (no running amqpd's runtime file in "
            f"{data_dir or default_data_dir()}); name it with --url to act on it anyway",
            EX_UNAVAILABLE,
        )


# -- output ---------------------------------------------------------------------------------------------------

# rabbitmqctl's column names that differ from the API's field names.
ALIASES = {
    "source_name": "source",
    "source_kind": "source_kind",
    "destination_name": "destination",
    "destination_kind": "destination_type",
    "queue_name": "queue.name",
    "channel_pid": "channel_details.name",
    "pid": "name",
    "user": "user",
    "publish_rate": "message_stats.publish_details.rate",
    "deliver_rate": "message_stats.deliver_get_details.rate",
    "ack_rate": "message_stats.ack_details.rate",
    "apply-to": "apply-to",
}


def field(item: dict[str, Any], column: str) -> Any:
    path = ALIASES.get(column, column)
    if path == "source_kind":
        return "exchange"
    value: Any = item
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def render(rows: list[dict[str, Any]], columns: list[str], formatter: str) -> str:
    table = [{c: field(r, c) for c in columns} for r in rows]
    if formatter == "json":
        return json.dumps(table, indent=1, sort_keys=False)
    if formatter == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for r in table:
            writer.writerow([cell(r[c]) for c in columns])
        return out.getvalue().rstrip("\n")
    cells = [[cell(r[c]) for c in columns] for r in table]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


# -- commands -------------------------------------------------------------------------------------------------

# list command -> (API path, taking the vhost?, default columns, what rabbitmqctl says first)
LISTS: dict[str, tuple[str, bool, list[str], str]] = {
    "list_queues": ("queues", True, ["name", "messages"], "Listing queues for vhost {vhost} ..."),
    "list_exchanges": ("exchanges", True, ["name", "type"], "Listing exchanges for vhost {vhost} ..."),
    "list_bindings": (
        "bindings",
        True,
        ["source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"],
        "Listing bindings for vhost {vhost}...",
    ),
    "list_connections": ("connections", False, ["user", "peer_host", "peer_port", "state"], "Listing connections ..."),
    "list_channels": (
        "channels",
        False,
        ["name", "user", "consumer_count", "messages_unacknowledged"],
        "Listing channels ...",
    ),
    "list_consumers": (
        "consumers",
        True,
        ["queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments"],
        "Listing consumers in vhost {vhost} ...",
    ),
    "list_users": ("users", False, ["user", "tags"], "Listing users ..."),
    "list_vhosts": ("vhosts", False, ["name"], "Listing vhosts ..."),
    "list_permissions": (
        "permissions",
        True,
        ["user", "configure", "write", "read"],
        'Listing permissions for vhost "{vhost}" ...',
    ),
    "list_policies": (
        "policies",
        True,
        ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
        'Listing policies for vhost "{vhost}" ...',
    ),
    "list_parameters": (
        "parameters",
        True,
        ["component", "name", "value"],
        'Listing runtime parameters for vhost "{vhost}" ...',
    ),
    "list_global_parameters": ("global-parameters", False, ["name", "value"], "Listing global runtime parameters ..."),
    "shovel_status": (
        "shovels",
        False,
        ["name", "vhost", "type", "state", "src_uri", "dest_uri", "messages_moved", "reason"],
        "Shovel status ...",
    ),
}
WATCH_COLUMNS = [
    "name",
    "messages_ready",
    "messages_unacknowledged",
    "consumers",
    "publish_rate",
    "deliver_rate",
    "ack_rate",
]


def list_rows(api: API, args: argparse.Namespace) -> list[dict[str, Any]]:
    path, per_vhost, _columns, _banner = LISTS[args.command]
    whole = path in ("permissions", "parameters")  # their per-vhost paths have another shape: filtered here
    url = f"/api/{path}/{q(args.vhost)}" if per_vhost and not whole else f"/api/{path}"
    rows = api.call("GET", url) or []
    if whole:
        rows = [r for r in rows if r.get("vhost") == args.vhost]
    if path == "users":
        rows = [dict(r, user=r["name"], tags=",".join(r.get("tags", []))) for r in rows]
    if args.filter:
        pattern = re.compile(args.filter)
        key = "user" if path in ("users", "permissions") else "name"
        rows = [r for r in rows if pattern.search(str(field(r, ALIASES.get(key, key)) or r.get("name", "")))]
    return rows


def run_list(api: API, args: argparse.Namespace) -> None:
    _path, _per_vhost, default, banner = LISTS[args.command]
    columns = args.columns or (WATCH_COLUMNS if args.watch and args.command == "list_queues" else default)
    while True:
        rows = list_rows(api, args)
        text = render(rows, columns, args.formatter)
        if args.watch:
            sys.stdout.write("\x1b[H\x1b[2J" if sys.stdout.isatty() else "")
            print(time.strftime("%H:%M:%S"), banner.format(vhost=args.vhost), file=sys.stdout)
        elif not args.quiet and args.formatter == "table":
            print(banner.format(vhost=args.vhost), file=sys.stderr)
        print(text, flush=True)
        if not args.watch:
            return
        time.sleep(args.watch)
        if args.watch_count is not None:
            args.watch_count -= 1
            if args.watch_count <= 0:
                return


def status(api: API, args: argparse.Namespace) -> None:
    o = api.call("GET", "/api/overview")
    if args.formatter == "json":
        print(json.dumps(o, indent=1))
        return
    totals = o.get("object_totals", {})
    lines = [
        f"Status of node {o.get('node')} ...",
        f"Product: {o.get('product_name')} {o.get('product_version')}",
        f"RabbitMQ API version: {o.get('rabbitmq_version')}",
        "",
        "Listeners",
        "",
    ]
    lines += [
        f"Interface: {x['ip_address']}, port: {x['port']}, protocol: {x['protocol']}" for x in o.get("listeners", [])
    ]
    lines += ["", "Totals", ""] + [f"{k}: {v}" for k, v in totals.items()]
    qt = o.get("queue_totals", {})
    lines += [
        f"messages: {qt.get('messages', 0)} (ready {qt.get('messages_ready', 0)}, "
        f"unacknowledged {qt.get('messages_unacknowledged', 0)})"
    ]
    print("\n".join(lines))


def await_startup(args: argparse.Namespace) -> None:
    """Until the broker answers: without --url, until an amqpd has written its runtime file (or answers on the
    fallback port; another broker answering there is waited past, as an amqpd may be starting)."""
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            open_api(args).call("GET", "/api/overview")
            return
        except CtlError as exc:
            if exc.code != EX_UNAVAILABLE or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def simple(
    method: str,
    path: Callable[[argparse.Namespace], str],
    body: Callable[[argparse.Namespace], Any] | None = None,
    params: Callable[[argparse.Namespace], dict[str, str]] | None = None,
    done: str = "",
) -> Callable[[API, argparse.Namespace], None]:
    """A command that is one API request."""

    def run(api: API, args: argparse.Namespace) -> None:
        headers = {"X-Reason": args.reason} if getattr(args, "reason", None) else None
        api.call(method, path(args), body(args) if body else None, params(args) if params else None, headers)
        if done and not args.quiet:
            print(done.format(**vars(args)), file=sys.stderr)

    return run


def add_vhost_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.description is not None:
        body["description"] = args.description
    if args.amqpd_message_ids:
        body["amqpd_message_ids"] = True  # access/definitions.VHOST_FIELD (amqpctl imports nothing of the broker)
    return body


def delete_queue_params(args: argparse.Namespace) -> dict[str, str]:
    flags = {"if-empty": args.if_empty, "if-unused": args.if_unused}
    return {k: "true" for k, v in flags.items() if v}


def set_policy_body(args: argparse.Namespace) -> dict[str, Any]:
    try:
        definition = json.loads(args.definition)
    except ValueError:
        raise CtlError(f"the policy definition is not JSON: {args.definition}", EX_USAGE) from None
    return {"pattern": args.pattern, "definition": definition, "priority": args.priority, "apply-to": args.apply_to}


def json_argument(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise CtlError(f"{what} is not JSON: {text}", EX_USAGE) from None


def set_vhost_limits(api: API, args: argparse.Namespace) -> None:
    """rabbitmqctl's: the JSON object replaces every limit of the vhost."""
    limits = json_argument(args.definition, "the limits")
    if not isinstance(limits, dict):
        raise CtlError(f"the limits are not a JSON object: {args.definition}", EX_USAGE)
    if not args.quiet:
        print(f'Applying limits "{args.definition}" to vhost "{args.vhost}" ...', file=sys.stderr)
    for name in current_limits(api, args.vhost):
        if name not in limits:
            api.call("DELETE", f"/api/vhost-limits/{q(args.vhost)}/{q(name)}")
    for name, value in limits.items():
        api.call("PUT", f"/api/vhost-limits/{q(args.vhost)}/{q(name)}", {"value": value})


def current_limits(api: API, vhost: str) -> dict[str, Any]:
    rows = api.call("GET", f"/api/vhost-limits/{q(vhost)}") or []
    return dict(rows[0]["value"]) if rows else {}


def clear_vhost_limits(api: API, args: argparse.Namespace) -> None:
    if not args.quiet:
        print(f'Clearing vhost "{args.vhost}" limits ...', file=sys.stderr)
    for name in current_limits(api, args.vhost):
        api.call("DELETE", f"/api/vhost-limits/{q(args.vhost)}/{q(name)}")


def list_vhost_limits(api: API, args: argparse.Namespace) -> None:
    if not args.quiet and args.formatter == "table":
        print(f'Listing limits for vhost "{args.vhost}" ...', file=sys.stderr)
    print(json.dumps(current_limits(api, args.vhost)))


def export_definitions(api: API, args: argparse.Namespace) -> None:
    doc = api.call("GET", "/api/definitions")
    text = json.dumps(doc, indent=2)
    if args.file == "-":
        print(text)
    else:
        with open(args.file, "w") as f:
            f.write(text + "\n")
        if not args.quiet:
            print(f'Exported definitions for the broker to "{args.file}"', file=sys.stderr)


def import_definitions(api: API, args: argparse.Namespace) -> None:
    raw = sys.stdin.read() if args.file == "-" else open(args.file).read()  # noqa: SIM115 - read and closed
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CtlError(f"{args.file} is not JSON: {exc}", EX_DATAERR) from None
    api.call("POST", "/api/definitions", doc)
    if not args.quiet:
        print(f'Imported definitions from "{args.file}"', file=sys.stderr)


def peek_queue(api: API, args: argparse.Namespace) -> None:
    msgs = api.call(
        "POST",
        f"/api/queues/{q(args.vhost)}/{q(args.queue)}/peek",
        {"count": args.n, "from": args.start, "encoding": "auto"},
    )
    columns = args.columns or ["routing_key", "redelivered", "payload_bytes", "payload", "properties"]
    print(render(msgs, columns, args.formatter))


def move_messages(api: API, args: argparse.Namespace) -> None:
    body = {"destination": args.destination, "count": args.n or 0}
    moved = api.call("POST", f"/api/queues/{q(args.vhost)}/{q(args.source)}/move", body)
    print(f"Moved {moved['moved']} messages from {args.source} to {args.destination}")


def replay_dead_letters(api: API, args: argparse.Namespace) -> None:
    body = {"dead_letters": True, "count": args.n or 0}
    moved = api.call("POST", f"/api/queues/{q(args.vhost)}/{q(args.queue)}/move", body)
    print(f"Replayed {moved['moved']} messages from {args.queue}")


COMMANDS: dict[str, Callable[[API, argparse.Namespace], None]] = {
    "status": status,
    "purge_queue": simple(
        "DELETE",
        lambda a: f"/api/queues/{q(a.vhost)}/{q(a.queue)}/contents",
        done="Purging queue '{queue}' in vhost '{vhost}' ...",
    ),
    "delete_queue": simple(
        "DELETE",
        lambda a: f"/api/queues/{q(a.vhost)}/{q(a.queue)}",
        params=delete_queue_params,
        done="Deleting queue '{queue}' on vhost '{vhost}' ...",
    ),
    "close_connection": simple(
        "DELETE",
        lambda a: f"/api/connections/{q(a.connection)}",
        done="Closing connection {connection}, reason: {reason}...",
    ),
    "add_user": simple(
        "PUT",
        lambda a: f"/api/users/{q(a.username)}",
        lambda a: {"password": a.password, "tags": ""},
        done='Adding user "{username}" ...',
    ),
    "delete_user": simple("DELETE", lambda a: f"/api/users/{q(a.username)}", done='Deleting user "{username}" ...'),
    "set_user_tags": simple(
        "PUT",
        lambda a: f"/api/users/{q(a.username)}",
        lambda a: {"tags": ",".join(a.tags)},
        done='Setting tags for user "{username}" ...',
    ),
    "add_vhost": simple("PUT", lambda a: f"/api/vhosts/{q(a.name)}", add_vhost_body, done='Adding vhost "{name}" ...'),
    "delete_vhost": simple("DELETE", lambda a: f"/api/vhosts/{q(a.name)}", done='Deleting vhost "{name}" ...'),
    "set_permissions": simple(
        "PUT",
        lambda a: f"/api/permissions/{q(a.vhost)}/{q(a.username)}",
        lambda a: {"configure": a.conf, "write": a.write, "read": a.read},
        done='Setting permissions for user "{username}" in vhost "{vhost}" ...',
    ),
    "clear_permissions": simple(
        "DELETE",
        lambda a: f"/api/permissions/{q(a.vhost)}/{q(a.username)}",
        done='Clearing permissions for user "{username}" in vhost "{vhost}" ...',
    ),
    "set_policy": simple(
        "PUT",
        lambda a: f"/api/policies/{q(a.vhost)}/{q(a.name)}",
        set_policy_body,
        done='Setting policy "{name}" for pattern "{pattern}" to "{definition}" ...',
    ),
    "clear_policy": simple(
        "DELETE",
        lambda a: f"/api/policies/{q(a.vhost)}/{q(a.name)}",
        done='Clearing policy "{name}" on vhost "{vhost}" ...',
    ),
    "set_parameter": simple(
        "PUT",
        lambda a: f"/api/parameters/{q(a.component)}/{q(a.vhost)}/{q(a.name)}",
        lambda a: {"value": json_argument(a.value, "the value")},
        done='Setting runtime parameter "{name}" for component "{component}" to "{value}" in vhost "{vhost}" ...',
    ),
    "clear_parameter": simple(
        "DELETE",
        lambda a: f"/api/parameters/{q(a.component)}/{q(a.vhost)}/{q(a.name)}",
        done='Clearing runtime parameter "{name}" for component "{component}" on vhost "{vhost}" ...',
    ),
    "set_global_parameter": simple(
        "PUT",
        lambda a: f"/api/global-parameters/{q(a.name)}",
        lambda a: {"value": json_argument(a.value, "the value")},
        done='Setting global runtime parameter "{name}" to "{value}" ...',
    ),
    "clear_global_parameter": simple(
        "DELETE", lambda a: f"/api/global-parameters/{q(a.name)}", done='Clearing global runtime parameter "{name}" ...'
    ),
    "set_vhost_limits": set_vhost_limits,
    "clear_vhost_limits": clear_vhost_limits,
    "list_vhost_limits": list_vhost_limits,
    "delete_shovel": simple(
        "DELETE",
        lambda a: f"/api/parameters/shovel/{q(a.vhost)}/{q(a.name)}",
        done='Deleting shovel "{name}" in vhost "{vhost}" ...',
    ),
    "restart_shovel": simple(
        "DELETE",
        lambda a: f"/api/shovels/vhost/{q(a.vhost)}/{q(a.name)}/restart",
        done='Restarting dynamic Shovel "{name}" in virtual host "{vhost}" ...',
    ),
    "export_definitions": export_definitions,
    "import_definitions": import_definitions,
    "peek_queue": peek_queue,
    "move_messages": move_messages,
    "replay_dead_letters": replay_dead_letters,
}


def change_password(api: API, args: argparse.Namespace) -> None:
    user = api.call("GET", f"/api/users/{q(args.username)}")
    api.call("PUT", f"/api/users/{q(args.username)}", {"password": args.password, "tags": ",".join(user["tags"])})
    if not args.quiet:
        print(f'Changing password for user "{args.username}" ...', file=sys.stderr)


COMMANDS["change_password"] = change_password


# -- command line ---------------------------------------------------------------------------------------------


def global_options(p: argparse.ArgumentParser, defaults: bool) -> None:
    """Options accepted before or after the command, as rabbitmqctl's; only the top level sets defaults."""
    env = os.environ

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    p.add_argument(
        "--url",
        default=default(env.get("AMQPCTL_URL")),
        help="management API URL (AMQPCTL_URL); default: the one in the runtime file of the amqpd using "
        "--data-dir, else http://127.0.0.1:15672 if amqpd answers there",
    )
    p.add_argument(
        "--data-dir",
        default=default(env.get("AMQPD_DATA_DIR")),
        help="find the amqpd using this data dir (AMQPD_DATA_DIR; default: amqpd's default data dir)",
    )
    p.add_argument("-u", "--username", dest="login", default=default(env.get("AMQPCTL_USERNAME", "guest")))
    p.add_argument("--password", dest="login_password", default=default(env.get("AMQPCTL_PASSWORD", "guest")))
    p.add_argument("-p", "--vhost", default=default(env.get("AMQPCTL_VHOST", "/")))
    # HTTPS (an https:// URL), with rabbitmqadmin's option names.
    p.add_argument(
        "--ssl-ca-cert-file",
        "--cacert",
        dest="ca_file",
        metavar="FILE",
        default=default(env.get("AMQPCTL_SSL_CA_CERT_FILE")),
        help="CA to check the broker's certificate",
    )
    p.add_argument(
        "--ssl-cert-file",
        "--cert",
        dest="cert_file",
        metavar="FILE",
        default=default(env.get("AMQPCTL_SSL_CERT_FILE")),
        help="client certificate (PEM)",
    )
    p.add_argument(
        "--ssl-key-file",
        "--key",
        dest="key_file",
        metavar="FILE",
        default=default(env.get("AMQPCTL_SSL_KEY_FILE")),
        help="its key, if not in the certificate file",
    )
    p.add_argument("--formatter", choices=("table", "json", "csv"), default=default("table"))
    p.add_argument("-q", "--quiet", action="store_true", default=default(False), help="no informational messages")
    p.add_argument("-t", "--timeout", type=float, default=default(30.0), help="seconds (await_startup, requests)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amqpctl", description="Operate amqpd (rabbitmqctl's commands, over HTTP).")
    p.add_argument("--version", action="version", version=f"amqpctl {__version__}")
    global_options(p, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    global_options(common, defaults=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common])

    for name in LISTS:
        s = command(name)
        s.add_argument("columns", nargs="*")
        s.add_argument("--filter", metavar="REGEX", help="only rows whose name matches")
        s.add_argument(
            "--watch",
            type=float,
            nargs="?",
            const=2.0,
            metavar="SECONDS",
            help="refresh every SECONDS (default 2) with live rates",
        )
        s.add_argument("--watch-count", type=int, help=argparse.SUPPRESS)  # bounded watching, for tests
    command("status")
    command("await_startup")
    for name in ("purge_queue",):
        command(name).add_argument("queue")
    s = command("delete_queue")
    s.add_argument("queue")
    s.add_argument("--if-empty", action="store_true")
    s.add_argument("--if-unused", action="store_true")
    s = command("close_connection")
    s.add_argument("connection")
    s.add_argument("reason", nargs="?", default="Closed via amqpctl")
    for name in ("add_user", "change_password"):
        s = command(name)
        s.add_argument("username")
        s.add_argument("password")
    command("delete_user").add_argument("username")
    s = command("set_user_tags")
    s.add_argument("username")
    s.add_argument("tags", nargs="*")
    command("delete_vhost").add_argument("name")
    s = command("add_vhost")
    s.add_argument("name")
    s.add_argument("--description", help="as rabbitmqctl add_vhost --description")
    s.add_argument(
        "--amqpd-message-ids",
        action="store_true",
        help="every queue in the vhost stamps time-ordered ids (x-amqpd-message-id), as if declared with it",
    )
    s = command("set_permissions")
    for arg in ("username", "conf", "write", "read"):
        s.add_argument(arg)
    command("clear_permissions").add_argument("username")
    s = command("set_policy")
    for arg in ("name", "pattern", "definition"):
        s.add_argument(arg)
    s.add_argument("--priority", type=int, default=0)
    s.add_argument("--apply-to", default="all", choices=("all", "queues", "exchanges"))
    command("clear_policy").add_argument("name")
    s = command("set_parameter")
    for arg in ("component", "name", "value"):
        s.add_argument(arg)
    s = command("clear_parameter")
    for arg in ("component", "name"):
        s.add_argument(arg)
    s = command("set_global_parameter")
    for arg in ("name", "value"):
        s.add_argument(arg)
    command("clear_global_parameter").add_argument("name")
    command("set_vhost_limits").add_argument("definition", help="e.g. '{\"max-connections\": 64}'")
    command("clear_vhost_limits")
    command("list_vhost_limits")
    for name in ("delete_shovel", "restart_shovel"):
        command(name).add_argument("name")
    for name in ("export_definitions", "import_definitions"):
        command(name).add_argument("file", help="a path, or - for stdout/stdin")
    s = command("peek_queue")
    s.add_argument("queue")
    s.add_argument("columns", nargs="*")
    s.add_argument("-n", type=int, default=10, help="how many messages (default 10)")
    s.add_argument("--from", dest="start", type=int, default=0, help="position of the first one (0: the head)")
    s = command("move_messages")
    s.add_argument("source")
    s.add_argument("destination")
    s.add_argument("-n", type=int, help="at most this many (default: all)")
    s = command("replay_dead_letters")
    s.add_argument("queue")
    s.add_argument("-n", type=int, help="at most this many (default: all)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    try:
        args, extra = p.parse_known_args(argv)
        # Columns may follow options too (`peek_queue q -n 5 payload`), which argparse leaves over.
        if extra and hasattr(args, "columns") and not any(e.startswith("-") for e in extra):
            args.columns = [*args.columns, *extra]
        elif extra:
            p.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return EX_USAGE if exc.code else EX_OK
    try:
        if args.command == "await_startup":
            await_startup(args)
        elif args.command in LISTS:
            run_list(open_api(args), args)
        else:
            COMMANDS[args.command](open_api(args), args)
    except CtlError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.code
    except (re.error, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EX_USAGE if isinstance(exc, re.error) else EX_DATAERR
    except KeyboardInterrupt:
        return 130
    return EX_OK


if __name__ == "__main__":
    sys.exit(main())
