"""Time-ordered message ids switched on for a whole vhost (`amqpd_message_ids` on the vhost, amqpd's own
field beside RabbitMQ's description/tags/default_queue_type/tracing): through the management API, amqpctl
and definitions, seen by a real client in every queue of that vhost, and kept across a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from amqpd.testing import BrokerProcess

HEADER = "x-amqpd-message-id"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.amqpd_only


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def broker(data_dir: str) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=data_dir, management=True).start()
    yield b
    b.close()


def _api(broker: BrokerProcess) -> httpx.Client:
    return httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"), timeout=10)


def _channel(broker: BrokerProcess, vhost: str) -> Any:
    return pika.BlockingConnection(pika.URLParameters(broker.url.replace("%2F", vhost))).channel()


def _get(ch: Any, queue: str) -> Any:
    _, props, _ = ch.basic_get(queue, auto_ack=True)
    return props


def test_a_vhost_created_with_message_ids_stamps_every_queue_and_keeps_it_across_restart(
    broker: BrokerProcess, data_dir: str
) -> None:
    with _api(broker) as api:
        assert api.put("/api/vhosts/stamped", json={"amqpd_message_ids": True}).status_code == 201
        assert api.put("/api/vhosts/plain", json={}).status_code == 201
        shown = {v["name"]: v["amqpd_message_ids"] for v in api.get("/api/vhosts").json()}
        assert shown == {"/": False, "stamped": True, "plain": False}
        assert api.put("/api/vhosts/stamped", json={"description": "ids"}).status_code == 204  # kept when absent
        assert api.put("/api/vhosts/plain", json={"amqpd_message_ids": "yes"}).status_code == 400  # as `tracing`
        assert api.put("/api/vhosts/plain", json={"amqpd_message_ids": "false"}).status_code == 204
    for vhost in ("stamped", "plain"):
        ch = _channel(broker, vhost)
        ch.queue_declare("q", durable=True)
        ch.basic_publish("", "q", b"before", pika.BasicProperties(delivery_mode=2))
        ch.connection.close()
    broker.stop()
    broker = BrokerProcess(data_dir=data_dir, management=True).start()
    try:
        stamped, plain = _channel(broker, "stamped"), _channel(broker, "plain")
        for ch in (stamped, plain):
            ch.queue_declare("declared-after-restart")
            ch.basic_publish("", "declared-after-restart", b"after")
        before, after = _get(stamped, "q"), _get(stamped, "declared-after-restart")
        assert before.headers[HEADER] < after.headers[HEADER]  # sortable by publish time, across the restart
        assert after.message_id == f"{after.headers[HEADER]:020d}"
        assert _get(plain, "q").headers is None and _get(plain, "declared-after-restart").headers is None
        with _api(broker) as api:
            assert api.get("/api/vhosts/stamped").json()["amqpd_message_ids"] is True
            exported = {v["name"]: v for v in api.get("/api/definitions").json()["vhosts"]}
            assert exported["stamped"]["amqpd_message_ids"] is True and "amqpd_message_ids" not in exported["plain"]
            api.delete("/api/vhosts/stamped")
            doc = {"vhosts": [exported["stamped"]], "permissions": [{"user": "guest", "vhost": "stamped",
                   "configure": ".*", "write": ".*", "read": ".*"}]}  # fmt: skip
            assert api.post("/api/definitions", json=doc).status_code == 204
            bad = {"vhosts": [{"name": "bad-ids", "amqpd_message_ids": "yes"}]}
            assert api.post("/api/definitions", json=bad).status_code == 400
            assert api.get("/api/vhosts/bad-ids").status_code == 404  # a bad entry changes nothing
            assert api.get("/api/vhosts/stamped").json()["amqpd_message_ids"] is True
    finally:
        broker.close()


def test_amqpctl_add_vhost_with_message_ids(broker: BrokerProcess) -> None:
    code = "import sys; from amqpd.mgmt.amqpctl import main; sys.exit(main())"
    env = dict(os.environ, AMQPCTL_URL=broker.mgmt_url)
    done = subprocess.run(
        [sys.executable, "-c", code, "add_vhost", "ctl-ids", "--amqpd-message-ids", "--description", "stamped"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    shown = httpx.get(f"{broker.mgmt_url}/api/vhosts/ctl-ids", auth=("guest", "guest")).json()
    assert (shown["amqpd_message_ids"], shown["description"]) == (True, "stamped")
    ch = _channel(broker, "ctl-ids")
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"m")
    assert isinstance(_get(ch, "q").headers[HEADER], int)
