"""Node's amqplib, through interop/node/scenarios.js (one JSON observation per run on stdout)."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from interop.registry import add
from interop.scope import Scope

NODE_DIR = Path(__file__).resolve().parent.parent / "node"


def ensure_node_modules() -> None:
    """`npm install` once when node_modules is missing (a file lock keeps parallel runs from racing)."""
    if (NODE_DIR / "node_modules" / "amqplib").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found: Node 20 + npm are needed for the amqplib scenarios")
    with open(NODE_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE_DIR / "node_modules" / "amqplib").is_dir():
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--no-package-lock"],
                cwd=NODE_DIR,
                check=True,
                capture_output=True,
                timeout=300,
            )


def run_node(name: str, url: str, names: dict[str, str], timeout: float = 15) -> Any:
    ensure_node_modules()
    p = subprocess.run(
        ["node", str(NODE_DIR / "scenarios.js"), name, url, json.dumps(names)],
        capture_output=True,
        timeout=timeout,
        cwd=NODE_DIR,
    )
    lines = p.stdout.decode().strip().splitlines()
    if not lines:
        return {"node_failed": p.returncode, "stderr": p.stderr.decode()[-300:]}
    return json.loads(lines[-1])


def _node_case(name: str, queues: tuple[str, ...] = ("q",), exchanges: tuple[str, ...] = ()) -> Any:
    def run(url: str) -> Any:
        with Scope(url) as s:
            names = {q: s.queue(q) for q in queues}
            names.update({x: s.exchange(x) for x in exchanges})
            names["missing"] = s.name("missing")
            names["nowhere"] = s.name("nowhere")
            return run_node(name, url, names)

    return run


for _name, _q, _x in [
    ("roundtrip", ("q",), ()),
    ("confirms", ("q",), ()),
    ("checkQueueMissing", (), ()),
    ("redeclareMismatch", (), ("x",)),
    ("topicRouting", ("q",), ("x",)),
    ("prefetch", ("q",), ()),
    ("nackRequeue", ("q",), ()),
    ("mandatoryReturn", (), ()),
    ("serverNamedExclusive", (), ()),
    ("badVhost", (), ()),
    ("badPassword", (), ()),
    ("connectionError530", ("q",), ()),
    ("cancelNotification", ("q",), ()),
    ("exchangeToExchange", ("q",), ("x", "x2")),
    ("largeBody", ("q",), ()),
    ("updateSecret", ("q",), ()),
    ("ipv6Loopback", ("q",), ()),
    ("closeAfterPublishes", ("q",), ()),
]:
    add("client-node", _name, _node_case(_name, _q, _x), timeout=25)
