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


def test_starting_imports_neither_the_disk_store_nor_the_http_server_nor_toml_nor_anyio() -> None:
    # anyio (for the disk store's worker threads) is not needed to serve: asyncio's task group and runner do
    loaded = _imported_by(START)
    unexpected = [m for m in (*DISK_STORE, *HTTP, "tomllib", "amqpd.mgmt.definitions", "anyio") if m in loaded]
    assert unexpected == []


EMBEDDED = """
import base64, json, sys, urllib.request
import pika
from amqpd.testing import EmbeddedBroker

broker = EmbeddedBroker().start()
broker.add_isolated_vhost("isolated", "tester", "secret")
pika.BlockingConnection(pika.URLParameters(f"amqp://tester:secret@127.0.0.1:{broker.port}/isolated")).close()
loaded, ports = sorted(sys.modules), broker.listening_ports()
request = urllib.request.Request(broker.management_url + "/api/vhosts")
request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
vhosts = [v["name"] for v in json.load(urllib.request.urlopen(request, timeout=30))]
after = broker.listening_ports()
broker.stop()
print(json.dumps({"loaded": loaded, "ports": ports, "vhosts": vhosts, "after": after}))
"""


def test_a_broker_in_the_test_process_serves_a_test_vhost_before_loading_its_management_side() -> None:
    # the pytest plugin's thread mode: each test's vhost is made by calling the broker, so the HTTP server, the
    # management API and ctypes (the memory alarm's malloc_trim) are loaded only when first needed; anyio not at all
    out = subprocess.run([sys.executable, "-c", EMBEDDED], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    not_yet = (*HTTP, "amqpd.mgmt.service", "amqpd.mgmt.objects", "ctypes", "anyio")
    early = [m for m in not_yet if m in seen["loaded"]]
    assert early == []
    assert len(seen["ports"]) == 1  # AMQP alone until the management URL is asked for
    assert "isolated" in seen["vhosts"]  # then the API starts, and sees the vhost made without it
    assert len(seen["after"]) == 3


def test_the_store_front_door_still_hands_out_the_store_on_demand() -> None:
    import store
    from store.message_store import MessageStore
    from store.recovery import MissingCatalogue

    assert (store.MessageStore, store.MissingCatalogue) == (MessageStore, MissingCatalogue)
    assert {"MessageStore", "MissingCatalogue"} <= set(store.__all__)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        store.NoSuchThing  # noqa: B018
