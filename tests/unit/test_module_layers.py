"""Leaf modules of the broker stay leaves: importing one loads none of the objects that use it, so that queues,
channels and the broker can all depend on them without an import circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

USERS = (
    "amqpd.broker.queues.queue",
    "amqpd.session.channel",
    "amqpd.broker.broker",
    "amqpd.broker.routing.vhost",
    "amqpd.broker.recovery",
    "amqpd.broker.streams.stream",
)
BROKER = Path(__file__).resolve().parents[2] / "amqpd" / "broker"


@pytest.mark.parametrize(
    "module",
    [
        "amqpd.broker.entry",
        "amqpd.broker.stored_message",
        "amqpd.broker.queues.subscriber",
    ],
)
def test_a_leaf_module_loads_none_of_its_users(module: str) -> None:
    # This interpreter's path, so that the child imports the same tree.
    code = (
        f"import sys; sys.path[:0] = {sys.path!r}; import {module}; "
        f"print(' '.join(m for m in {USERS!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []


def test_no_broker_module_imports_another_inside_a_function() -> None:
    """An import inside a function is how an import circle is dodged; the broker's modules have none."""
    dodges = []
    for path in sorted(BROKER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("amqpd.broker"):
                        dodges.append(f"{path.name}:{inner.lineno} {inner.module}")
    assert dodges == []
