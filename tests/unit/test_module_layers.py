"""Leaf modules of the broker stay leaves: importing one loads none of the objects that use it, so that queues,
channels and the broker can all depend on them without an import circle."""

from __future__ import annotations

import subprocess
import sys

import pytest

USERS = ("amqpd.broker.queue", "amqpd.broker.channel", "amqpd.broker.broker", "amqpd.broker.vhost")


@pytest.mark.parametrize("module", ["amqpd.broker.entry", "amqpd.broker.queue_hooks"])
def test_a_leaf_module_loads_none_of_its_users(module: str) -> None:
    # This interpreter's path, so that the child imports the same tree.
    code = (
        f"import sys; sys.path[:0] = {sys.path!r}; import {module}; "
        f"print(' '.join(m for m in {USERS!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
