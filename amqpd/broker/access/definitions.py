"""The access part of RabbitMQ's definitions JSON (users, vhosts, permissions, topic_permissions and the
vhost-limits parameters), read into and written from `AccessControl`.

Same field names and hash format as `rabbitmqctl export_definitions` / `import_definitions`, so users move
between RabbitMQ and amqpd both ways. `load_definitions` (a setting, as RabbitMQ's) imports a file at boot.
Exchanges, queues, bindings and policies in the same document are for the management API to import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amqpd.broker.access.control import SHA256, AccessControl, AccessError

# The vhost's field in the management API (PUT/GET /api/vhosts) and in definitions, beside RabbitMQ's own
# (description, tags, default_queue_type, tracing); the name says it is amqpd's.
VHOST_FIELD = "amqpd_message_ids"


def import_access(access: AccessControl, doc: dict[str, Any]) -> None:
    """Create or update what `doc` names; what it does not name is left alone (RabbitMQ's import merges)."""
    for v in doc.get("vhosts", []):
        access.add_vhost(_text(v, "name"), v.get("description", ""), _tag_list(v.get("tags", [])))
        if isinstance(v.get("limits"), dict) and v["limits"]:
            access.set_vhost_limits(v["name"], v["limits"])
        if isinstance(v.get(VHOST_FIELD), bool):
            access.set_vhost_message_ids(v["name"], v[VHOST_FIELD])
    for u in doc.get("users", []):
        access.add_user(
            _text(u, "name"),
            None,
            _tag_list(u.get("tags", [])),
            password_hash=u.get("password_hash", ""),
            hashing_algorithm=u.get("hashing_algorithm", SHA256),
        )
        if isinstance(u.get("limits"), dict):
            access.set_user_limits(u["name"], u["limits"])
    for p in doc.get("permissions", []):
        access.set_permissions(
            _text(p, "user"), _text(p, "vhost"), p.get("configure", ""), p.get("write", ""), p.get("read", "")
        )
    for t in doc.get("topic_permissions", []):
        access.set_topic_permissions(
            _text(t, "user"), _text(t, "vhost"), _text(t, "exchange"), t.get("write", ""), t.get("read", "")
        )
    for param in doc.get("parameters", []):
        if param.get("component") == "vhost-limits" and isinstance(param.get("value"), dict):
            access.set_vhost_limits(_text(param, "vhost"), param["value"])


def export_access(access: AccessControl) -> dict[str, Any]:
    """Users, vhosts, permissions, topic permissions and vhost limits as rabbitmqctl export_definitions
    writes them."""
    return {
        "users": [
            {
                "name": u.name,
                "password_hash": u.password_hash,
                "hashing_algorithm": u.hashing_algorithm,
                "tags": list(u.tags),
                "limits": dict(u.limits),
            }
            for u in access.list_users()
        ],
        "vhosts": [
            {
                "name": v.name,
                "description": v.description,
                "tags": list(v.tags),
                "metadata": {"description": v.description, "tags": list(v.tags)},
                # only when on: a plain vhost exports exactly as from RabbitMQ (which ignores the field)
                **({VHOST_FIELD: True} if v.message_ids else {}),
            }
            for v in access.list_vhosts()
        ],
        "permissions": [
            {"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for u, v, p in access.list_permissions()
        ],
        "topic_permissions": [
            {"user": u, "vhost": v, "exchange": t.exchange, "write": t.write, "read": t.read}
            for u, v, t in access.list_topic_permissions()
        ],
        "parameters": [
            {"vhost": v.name, "component": "vhost-limits", "name": "limits", "value": dict(v.limits)}
            for v in access.list_vhosts()
            if v.limits
        ],
    }


def load_definitions_file(access: AccessControl, path: str) -> None:
    """RabbitMQ's load_definitions: import a definitions file (at every boot)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise AccessError(f"cannot read definitions from {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise AccessError(f"{path}: a definitions file holds a JSON object")
    import_access(access, doc)


def _text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise AccessError(f"definitions: {key!r} missing or not a string in {item!r}")
    return value


def _tag_list(tags: Any) -> list[str]:
    if isinstance(tags, str):  # RabbitMQ < 3.10 wrote "administrator,monitoring"
        return [t for t in tags.split(",") if t]
    return [str(t) for t in tags]
