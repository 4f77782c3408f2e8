"""The users and vhosts the access scenarios log in as, the same on both brokers.

One RabbitMQ definitions document per test session (names carry the session's run token): amqpd imports
it at boot (`AMQPD_LOAD_DEFINITIONS`, RabbitMQ's load_definitions), the reference RabbitMQ through
`rabbitmqctl import_definitions`; `remove_from_reference` deletes them there afterwards. The password
hashes are made by amqpd (`rabbit_password_hashing_sha256`), so RabbitMQ accepting them is itself a check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any
from urllib.parse import quote

from amqpd.broker.access.control import hash_password
from interop.scope import new_token

TOKEN = new_token()
PASSWORD = "itp-secret"
FULL = (".*", ".*", ".*")
# profile -> (configure, write, read) on "/"; None: no permission at all on "/".
PROFILES: dict[str, tuple[str, str, str] | None] = {
    "full": FULL,
    "no-configure": ("^$", ".*", ".*"),
    "no-write": (".*", "^$", ".*"),
    "no-read": (".*", ".*", "^$"),
    "none": None,
    "topic": FULL,
    "impersonator": FULL,
    "limited": FULL,
}
USER_LIMITS = {"limited": {"max-connections": 1, "max-channels": 2}}
# Vhosts with limits, where "full" and guest have every permission.
VHOST_LIMITS = {"maxq": {"max-queues": 1}, "maxc": {"max-connections": 1}}


def user(profile: str) -> str:
    return f"itp.{profile}.{TOKEN}"


def vhost(name: str) -> str:
    return f"itp.{name}.{TOKEN}"


def user_url(url: str, profile: str, vhost_name: str | None = None, password: str = PASSWORD) -> str:
    """`url` with this profile's user (and another vhost, if given)."""
    scheme, rest = url.split("://", 1)
    _, hostpart = rest.rsplit("@", 1)
    host, _, path = hostpart.partition("/")
    if vhost_name is not None:
        path = quote(vhost_name, safe="")
    return f"{scheme}://{quote(user(profile), safe='')}:{password}@{host}/{path}"


def definitions() -> dict[str, Any]:
    users = [
        {
            "name": user(p),
            "password_hash": hash_password(PASSWORD),
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": ["impersonator"] if p == "impersonator" else [],
            "limits": USER_LIMITS.get(p, {}),
        }
        for p in PROFILES
    ]
    users.append(
        {"name": user("nopass"), "password_hash": "", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}
    )
    permissions = [
        {"user": user(p), "vhost": "/", "configure": perms[0], "write": perms[1], "read": perms[2]}
        for p, perms in PROFILES.items()
        if perms is not None
    ]
    permissions.append({"user": user("nopass"), "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"})
    for name in VHOST_LIMITS:
        for who in (user("full"), "guest"):
            permissions.append({"user": who, "vhost": vhost(name), "configure": ".*", "write": ".*", "read": ".*"})
    return {
        "users": users,
        "vhosts": [{"name": vhost(name)} for name in VHOST_LIMITS],
        "permissions": permissions,
        "topic_permissions": [
            {
                "user": user("topic"),
                "vhost": "/",
                "exchange": "amq.topic",
                "write": "^{username}\\.",
                "read": "^public\\.",
            },
        ],
        "parameters": [
            {"vhost": vhost(name), "component": "vhost-limits", "name": "limits", "value": limits}
            for name, limits in VHOST_LIMITS.items()
        ],
    }


def write_definitions() -> str:
    fd, path = tempfile.mkstemp(prefix="amqpd-interop-definitions-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(definitions(), f)
    os.chmod(path, 0o644)  # rabbitmqctl hands the path to the broker, which runs as another user
    return path


def _ctl(*args: str, attempts: int = 3) -> None:
    """rabbitmqctl, retried: on a machine shared with other test runs a call can time out."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None or os.environ.get("AMQPD_REFERENCE_URL"):
        return  # a remote reference: its operator creates the users (see interop/README.md)
    for _ in range(attempts):
        try:
            done = subprocess.run([ctl, "-q", *args], capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0 or "not exist" in done.stderr or "does_not_exist" in done.stderr:
            return
    print(f"rabbitmqctl {' '.join(args)} failed {attempts} times", file=sys.stderr)


def install_on_reference(path: str) -> None:
    _ctl("import_definitions", path)


def remove_from_reference() -> None:
    for p in [*PROFILES, "nopass"]:
        _ctl("delete_user", user(p))
    for name in VHOST_LIMITS:
        _ctl("delete_vhost", vhost(name))
