"""What starting amqpd imports: a broker loads the code of what it serves and nothing more, because importing is
most of its start-up (the pytest plugin's session broker, every test's subprocess broker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What `python -m amqpd` imports before it reads its settings and starts serving.
START = "import amqpd.cli, amqpd.mgmt.service, amqpd.server.listener"

DISK_STORE = ("store.message_store", "store.group_commit", "store.recovery", "store.catalog", "aiosqlite")
HTTP = ("uvicorn", "starlette", "prometheus_client", "amqpd.mgmt.api", "amqpd.mgmt.metrics", "amqpd.mgmt.webui")


def _imported_by(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_starting_imports_neither_the_disk_store_nor_the_http_server_nor_toml() -> None:
    loaded = _imported_by(START)
    unexpected = [m for m in (*DISK_STORE, *HTTP, "tomllib", "amqpd.mgmt.definitions") if m in loaded]
    assert unexpected == []


def test_the_store_front_door_still_hands_out_the_store_on_demand() -> None:
    import store
    from store.message_store import MessageStore
    from store.recovery import MissingCatalogue

    assert (store.MessageStore, store.MissingCatalogue) == (MessageStore, MissingCatalogue)
    assert {"MessageStore", "MissingCatalogue"} <= set(store.__all__)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        store.NoSuchThing  # noqa: B018
