"""The runtime file: what a running amqpd tells the tools on this machine about itself (its pid and the URLs
of its listeners), in its data dir, as rabbitmq-diagnostics finds its node. Written once every listener is
up, removed at a clean stop; a file whose pid is gone is left over from a crash and means nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

NAME = "amqpd.runtime.json"


def path(data_dir: str) -> Path:
    return Path(data_dir) / NAME


def write(data_dir: str, info: dict[str, Any]) -> None:
    """Atomically: a reader sees the old file or the whole new one."""
    target = path(data_dir)
    temporary = target.with_name(NAME + ".tmp")
    temporary.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(temporary, target)


def remove(data_dir: str) -> None:
    path(data_dir).unlink(missing_ok=True)


def read(data_dir: str) -> dict[str, Any] | None:
    """The running broker's runtime information, or None: no file, an unreadable one, or its process gone."""
    try:
        info = json.loads(path(data_dir).read_text())
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if isinstance(info, dict) and _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def url(scheme: str, host: str, port: int) -> str:
    """A URL a local client can use for a listener on (host, port): a wildcard address becomes a loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
