"""Definitions: the broker's users, vhosts, permissions, policies, exchanges, queues and bindings as RabbitMQ's
JSON document (`rabbitmqctl export_definitions`, GET /api/definitions), and its import.

Import merges as RabbitMQ's does (what the document names is created or updated, the rest is left alone) but is
atomic: every entry is checked against the broker and the rest of the document first, and a document with a bad
entry changes nothing; the error names the entry (`queues[3] 'orders' in vhost '/': ...`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqpd import __version__, errors
from amqpd.broker.access.control import AccessError
from amqpd.broker.access.definitions import VHOST_FIELD, export_access, import_access
from amqpd.broker.arguments import (
    EXCHANGE_EQUIVALENCE_ARGS,
    QUEUE_EQUIVALENCE_ARGS,
    check_equivalent_args,
    check_queue_arguments,
    check_queue_type,
)
from amqpd.broker.parameters import ParameterError
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.exchanges import EXCHANGE_TYPES, make_exchange
from amqpd.broker.routing.policy import PolicyError, check
from amqpd.mgmt.objects import API_VERSION, jsonable

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker

HASHING_ALGORITHMS = ("rabbit_password_hashing_sha256", "rabbit_password_hashing_sha512", "rabbit_password_hashing_md5")


log = logging.getLogger("amqpd")  # the listener's: a definitions file is read at boot


class DefinitionsError(ValueError):
    """A document that cannot be imported; the text names the entry at fault."""


# -- export -----------------------------------------------------------------------------------------------------


def export(broker: Broker, vhost: str | None = None) -> dict[str, Any]:
    """The whole broker's definitions, or (vhost given) one vhost's, without users, vhosts and permissions and
    without `vhost` fields, as RabbitMQ's per-vhost export."""
    vhosts = [vhost] if vhost is not None else sorted(broker.vhosts)
    doc: dict[str, Any] = {
        "rabbit_version": API_VERSION,
        "rabbitmq_version": API_VERSION,
        "product_name": "amqpd",
        "product_version": __version__,
    }
    if vhost is None:
        doc |= export_access(broker.access)
        doc["global_parameters"] = broker.parameters.global_entries()
    else:
        doc = {"rabbit_version": API_VERSION, "parameters": []}
    doc["parameters"] += [p for v in vhosts for p in broker.parameters.entries(vhost=v)]
    doc["policies"] = [p.as_json() for v in vhosts for p in broker.policies.entries(v)]
    doc["queues"], doc["exchanges"], doc["bindings"] = [], [], []
    for name in vhosts:
        v = broker.vhosts[name]
        doc["queues"] += [
            {
                "name": q.name,
                "vhost": name,
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": jsonable(q.arguments),
            }
            for q in v.queues.values()
            if q.exclusive_owner is None
        ]
        doc["exchanges"] += [
            {
                "name": x.name,
                "vhost": name,
                "type": x.type_name,
                "durable": x.durable,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": jsonable(x.arguments),
            }
            for x in v.exchanges.values()
            if x.name and not x.name.startswith("amq.")
        ]
        for x in v.exchanges.values():
            if not x.name:
                continue
            for dest, key, args in x.bindings():
                if isinstance(dest, Queue) and dest.exclusive_owner is not None:
                    continue
                kind = "queue" if isinstance(dest, Queue) else "exchange"
                doc["bindings"].append(
                    {
                        "source": x.name,
                        "vhost": name,
                        "destination": getattr(dest, "name", ""),
                        "destination_type": kind,
                        "routing_key": key,
                        "arguments": jsonable(args),
                    }
                )
    if vhost is not None:
        for section in ("policies", "queues", "exchanges", "bindings"):
            for item in doc[section]:
                item.pop("vhost", None)
    return doc


# -- import -----------------------------------------------------------------------------------------------------

# The order entries are checked in: exchanges and queues before the bindings that name them, whatever the
# document's order.
IMPORT_ORDER = (
    "users",
    "vhosts",
    "permissions",
    "topic_permissions",
    "parameters",
    "global_parameters",
    "policies",
    "exchanges",
    "queues",
    "bindings",
)


class Plan:
    """What the document will create, so later entries can refer to earlier ones during the checks."""

    def __init__(self, broker: Broker, doc: dict[str, Any], vhost: str | None) -> None:
        self.broker = broker
        self.doc = doc
        self.default_vhost = vhost
        self.vhosts = set(broker.vhosts) | {v.get("name") for v in doc.get("vhosts", []) if isinstance(v, dict)}
        self.users = set(broker.access.users) | {u.get("name") for u in doc.get("users", []) if isinstance(u, dict)}
        self.exchanges: dict[tuple[str, str], str] = {}  # (vhost, name) -> type, for bindings
        self.queues: set[tuple[str, str]] = set()

    def vhost_of(self, item: dict[str, Any]) -> str:
        if self.default_vhost is not None:
            return self.default_vhost
        vhost = item.get("vhost")
        if not isinstance(vhost, str):
            raise DefinitionsError("'vhost' missing or not a string")
        if vhost not in self.vhosts:
            raise DefinitionsError(f"vhost '{vhost}' does not exist")
        return vhost

    def has_exchange(self, vhost: str, name: str) -> bool:
        v = self.broker.vhosts.get(vhost)
        return (vhost, name) in self.exchanges or (v is not None and name in v.exchanges) or name == ""

    def has_queue(self, vhost: str, name: str) -> bool:
        v = self.broker.vhosts.get(vhost)
        return (vhost, name) in self.queues or (v is not None and name in v.queues)


def _text(item: dict[str, Any], key: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise DefinitionsError(f"'{key}' missing or not a string")
    return value


def _flag(item: dict[str, Any], key: str, default: bool) -> bool:
    value = item.get(key, default)
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    if not isinstance(value, bool):
        raise DefinitionsError(f"'{key}' is not a boolean")
    return value


def _args(item: dict[str, Any]) -> dict[str, Any]:
    args = item.get("arguments", {})
    if not isinstance(args, dict):
        raise DefinitionsError("'arguments' is not an object")
    return args


def check_user(plan: Plan, u: dict[str, Any]) -> None:
    _text(u, "name")
    algorithm = _text(u, "hashing_algorithm", "rabbit_password_hashing_sha256")
    if algorithm not in HASHING_ALGORITHMS:
        raise DefinitionsError(f"unknown hashing_algorithm '{algorithm}'")
    password_hash = _text(u, "password_hash", "")
    try:
        base64.b64decode(password_hash, validate=True)
    except (binascii.Error, ValueError):
        raise DefinitionsError("password_hash is not base64") from None
    tags = u.get("tags", [])
    names = tags.split(",") if isinstance(tags, str) else tags
    if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
        raise DefinitionsError("'tags' is not a list of strings")


def check_vhost(v: dict[str, Any]) -> None:
    _text(v, "name")
    if not isinstance(v.get(VHOST_FIELD, False), bool):
        raise DefinitionsError(f"'{VHOST_FIELD}' is not true or false")


def check_permission(plan: Plan, p: dict[str, Any], keys: tuple[str, ...]) -> None:
    import re

    if _text(p, "user") not in plan.users:
        raise DefinitionsError(f"user '{p['user']}' does not exist")
    plan.vhost_of(p)
    for key in keys:
        try:
            re.compile(_text(p, key))
        except re.error as exc:
            raise DefinitionsError(f"'{key}' is not a valid regular expression: {exc}") from None


def check_parameter(plan: Plan, p: dict[str, Any]) -> None:
    component = _text(p, "component")
    vhost = plan.vhost_of(p)
    if component == "vhost-limits":
        if not isinstance(p.get("value"), dict):
            raise DefinitionsError("'value' is not an object")
        return
    owner = plan.broker.parameters.components.get(component)
    if owner is None:
        raise DefinitionsError(f"component {component} not found")
    try:
        owner.validate(vhost, _text(p, "name"), p.get("value"))
    except ParameterError as exc:
        raise DefinitionsError(str(exc)) from None


def check_global_parameter(plan: Plan, p: dict[str, Any]) -> None:
    _text(p, "name")
    if "value" not in p:
        raise DefinitionsError("'value' is missing")


def check_policy(plan: Plan, p: dict[str, Any]) -> None:
    _text(p, "name")
    plan.vhost_of(p)
    try:
        check(p.get("pattern"), p.get("definition"), p.get("priority", 0), p.get("apply-to", "all"))
    except PolicyError as exc:
        raise DefinitionsError(str(exc)) from None


def check_exchange(plan: Plan, x: dict[str, Any]) -> None:
    name, vhost, type_name = _text(x, "name"), plan.vhost_of(x), _text(x, "type")
    durable, auto_delete, internal = (
        _flag(x, "durable", True),
        _flag(x, "auto_delete", False),
        _flag(x, "internal", False),
    )
    args = _args(x)
    if type_name not in EXCHANGE_TYPES:
        raise DefinitionsError(f"unknown exchange type '{type_name}'")
    existing = plan.broker.vhosts[vhost].exchanges.get(name) if vhost in plan.broker.vhosts else None
    if existing is not None:
        for arg, new, old in (
            ("type", type_name, existing.type_name),
            ("durable", durable, existing.durable),
            ("auto_delete", auto_delete, existing.auto_delete),
            ("internal", internal, existing.internal),
        ):
            if new != old:
                raise DefinitionsError(f"inequivalent arg '{arg}': received '{new}' but current is '{old}'")
        _amqp(
            lambda: check_equivalent_args("exchange", name, vhost, EXCHANGE_EQUIVALENCE_ARGS, args, existing.arguments)
        )
    elif name.startswith("amq."):
        raise DefinitionsError("exchange name contains reserved prefix 'amq.*'")
    else:  # the type's own checks (x-max-hops, x-delayed-type), before anything of the document is applied
        _amqp(lambda: EXCHANGE_TYPES[type_name].check_arguments(args))
        _amqp(lambda: make_exchange(type_name, name, arguments=args))
    plan.exchanges[(vhost, name)] = type_name


def check_queue(plan: Plan, q: dict[str, Any]) -> None:
    name, vhost = _text(q, "name"), plan.vhost_of(q)
    durable, auto_delete, args = _flag(q, "durable", True), _flag(q, "auto_delete", False), _args(q)
    if not name or name.startswith("amq."):
        raise DefinitionsError("queue names must be given and not start with 'amq.'")
    _amqp(lambda: check_queue_arguments(args, name, vhost))
    _amqp(lambda: check_queue_type(args, name, vhost, durable, False, auto_delete))
    existing = plan.broker.vhosts[vhost].queues.get(name) if vhost in plan.broker.vhosts else None
    if existing is not None:
        if existing.durable != durable or existing.auto_delete != auto_delete:
            raise DefinitionsError("inequivalent durable/auto_delete with the existing queue")
        _amqp(lambda: check_equivalent_args("queue", name, vhost, QUEUE_EQUIVALENCE_ARGS, args, existing.arguments))
    plan.queues.add((vhost, name))


def check_binding(plan: Plan, b: dict[str, Any]) -> None:
    source, vhost = _text(b, "source"), plan.vhost_of(b)
    dest, kind = _text(b, "destination"), _text(b, "destination_type")
    key, args = _text(b, "routing_key", ""), _args(b)
    if not source:
        raise DefinitionsError("bindings from the default exchange cannot be declared")
    if not plan.has_exchange(vhost, source):
        raise DefinitionsError(f"no exchange '{source}' in vhost '{vhost}'")
    if kind not in ("queue", "exchange"):
        raise DefinitionsError(f"destination_type '{kind}' is neither queue nor exchange")
    if not (plan.has_queue(vhost, dest) if kind == "queue" else plan.has_exchange(vhost, dest)):
        raise DefinitionsError(f"no {kind} '{dest}' in vhost '{vhost}'")
    v = plan.broker.vhosts.get(vhost)
    type_name = plan.exchanges.get((vhost, source)) or (v.exchanges[source].type_name if v else "direct")
    _amqp(lambda: make_exchange(type_name, source).validate_binding(key, dict(args)))


def _amqp(check_fn: Callable[[], Any]) -> None:
    try:
        check_fn()
    except errors.AMQPError as exc:
        raise DefinitionsError(exc.text) from None


CHECKS: dict[str, Callable[[Plan, dict[str, Any]], None]] = {
    "users": check_user,
    "vhosts": lambda plan, v: check_vhost(v),
    "permissions": lambda plan, p: check_permission(plan, p, ("configure", "write", "read")),
    "topic_permissions": lambda plan, p: check_permission(plan, p, ("write", "read")),
    "parameters": check_parameter,
    "global_parameters": check_global_parameter,
    "policies": check_policy,
    "exchanges": check_exchange,
    "queues": check_queue,
    "bindings": check_binding,
}


def _label(section: str, index: int, item: Any) -> str:
    if not isinstance(item, dict):
        return f"{section}[{index}]"
    name = item.get("name") or item.get("user") or item.get("destination")
    where = f" in vhost '{item['vhost']}'" if isinstance(item.get("vhost"), str) else ""
    return f"{section}[{index}] '{name}'{where}" if name is not None else f"{section}[{index}]{where}"


def validate(broker: Broker, doc: Any, vhost: str | None = None) -> None:
    """Raise DefinitionsError naming the first entry that cannot be imported; change nothing."""
    if not isinstance(doc, dict):
        raise DefinitionsError("a definitions document is a JSON object")
    if vhost is not None and vhost not in broker.vhosts:
        raise DefinitionsError(f"vhost '{vhost}' does not exist")
    plan = Plan(broker, doc, vhost)
    for section in IMPORT_ORDER:
        items = doc.get(section, [])
        if not isinstance(items, list):
            raise DefinitionsError(f"'{section}' is not a list")
        if vhost is not None and section in ("users", "vhosts", "permissions", "topic_permissions") and items:
            raise DefinitionsError(f"'{section}' cannot be imported into one vhost")
        for i, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise DefinitionsError("not an object")
                CHECKS[section](plan, item)
            except DefinitionsError as exc:
                raise DefinitionsError(f"{_label(section, i, item)}: {exc}") from None


def apply(broker: Broker, doc: dict[str, Any], vhost: str | None = None) -> None:
    """Import a document that validate() accepted."""
    try:
        import_access(
            broker.access,
            {k: doc.get(k, []) for k in ("users", "vhosts", "permissions", "topic_permissions", "parameters")},
        )
    except AccessError as exc:  # validate() checks what import_access refuses; this is a bug if it happens
        raise DefinitionsError(str(exc)) from None
    for p in doc.get("parameters", []):
        if p["component"] != "vhost-limits":  # those are the access model's (import_access above)
            broker.parameters.put(p["component"], vhost or p["vhost"], p["name"], p["value"])
    for p in doc.get("global_parameters", []):
        broker.parameters.put_global(p["name"], p["value"])
    for p in doc.get("policies", []):
        broker.policies.put(
            vhost or p["vhost"],
            p["name"],
            p["pattern"],
            p["definition"],
            p.get("priority", 0),
            p.get("apply-to", "all"),
        )
    for x in doc.get("exchanges", []):
        broker.vhosts[vhost or x["vhost"]].declare_exchange(
            x["name"],
            x["type"],
            passive=False,
            durable=_flag(x, "durable", True),
            auto_delete=_flag(x, "auto_delete", False),
            internal=_flag(x, "internal", False),
            arguments=_args(x),
        )
    for q in doc.get("queues", []):
        broker.vhosts[vhost or q["vhost"]].declare_queue(
            q["name"],
            passive=False,
            durable=_flag(q, "durable", True),
            exclusive=False,
            auto_delete=_flag(q, "auto_delete", False),
            arguments=_args(q),
            owner=None,
        )
    for b in doc.get("bindings", []):
        v = broker.vhosts[vhost or b["vhost"]]
        dest = v.queues[b["destination"]] if b["destination_type"] == "queue" else v.exchanges[b["destination"]]
        v.bind(b["source"], dest, b.get("routing_key", ""), _args(b))


def import_definitions(broker: Broker, doc: Any, vhost: str | None = None) -> None:
    validate(broker, doc, vhost)
    apply(broker, doc, vhost)


def load_definitions_file(broker: Broker, path: str) -> bool:
    """RabbitMQ's load_definitions (`--definitions FILE`): the whole document (users, vhosts, permissions,
    policies, exchanges, queues, bindings), imported atomically before clients are accepted."""
    try:
        import_definitions(broker, json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:  # DefinitionsError is a ValueError, as is bad JSON
        what = "" if isinstance(exc, DefinitionsError) else "cannot read "
        log.error("definitions %s%s: %s", what, path, exc)
        return False
    log.info("imported definitions from %s", path)
    return True
