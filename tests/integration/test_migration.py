"""docs/migration.md's guides run as written: the scripts the page shows, taken from it, with its producer and
consumer publishing and consuming throughout a move between amqpd and the reference RabbitMQ, both ways, and
an amqpd edge forwarding an exchange to RabbitMQ. Each run uses a vhost of its own on RabbitMQ, removed after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pika
import pytest
from waiting import wait_for

from amqpd.testing import BrokerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "docs"))
from doc_snippets import REPO, parse_page  # noqa: E402 - tests/docs' page reader, as test_docs.py imports it

RABBIT = ("127.0.0.1", 5672, 15672)


@dataclass
class Side:
    amqp: str  # amqp://guest:guest@host:port, without the vhost
    api: str  # http://guest:guest@host:port


def side(host: str, port: int, mgmt_port: int) -> Side:
    return Side(f"amqp://guest:guest@{host}:{port}", f"http://guest:guest@{host}:{mgmt_port}")


@pytest.fixture
def guide(tmp_path: Path) -> Path:
    """The page's files (`<!-- doc-test: file NAME -->`) in a directory of their own."""
    for snippet in parse_page(REPO / "docs" / "migration.md"):
        if "file" in snippet.markers:
            (tmp_path / snippet.markers["file"]).write_text(snippet.code)
    return tmp_path


@pytest.fixture
def vhost() -> Iterator[str]:
    name = f"mig28-{uuid.uuid4().hex[:8]}"
    yield name
    with httpx.Client(base_url=side(*RABBIT).api, timeout=20) as api:
        api.delete(f"/api/vhosts/{name}")


@pytest.fixture
def amqpd(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(data_dir=str(tmp_path / "amqpd"), management=True) as broker:
        yield broker


def amqpd_side(broker: BrokerProcess) -> Side:
    return side("127.0.0.1", broker.port, int(broker.mgmt_url.rsplit(":", 1)[1]))


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class App:
    """One of the page's applications, run as a reader would run it."""

    def __init__(self, guide: Path, script: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(guide / script), *args], cwd=guide)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0


def run(guide: Path, script: str, **env: str) -> None:
    subprocess.run(["bash", str(guide / script)], cwd=guide, env={**os.environ, **env}, check=True, timeout=120)


def move(guide: Path, vhost: str, old: Side, new: Side) -> None:
    """The page's steps, with its producer and consumer running before, during and after."""
    with httpx.Client(base_url=old.api, timeout=20) as api:
        assert api.put(f"/api/vhosts/{vhost}").status_code in (201, 204)
        api.put(f"/api/permissions/{vhost}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    with pika.BlockingConnection(pika.URLParameters(f"{old.amqp}/{vhost}")) as conn:
        ch = conn.channel()
        ch.queue_declare("orders", durable=True)
        ch.exchange_declare("shop", "topic", durable=True)
        ch.queue_bind("orders", "shop", "order.#")
    published, consumed = guide / "published.txt", guide / "consumed.txt"
    consumer = App(guide, "consumer.py", f"{old.amqp}/{vhost}", "orders", str(consumed))
    producer = App(guide, "producer.py", f"{old.amqp}/{vhost}", "orders", "old", str(published))
    wait_for(lambda: len(lines(consumed)) >= 100, "the old consumer at work", timeout=90.0)
    env = {"VHOST": vhost, "APP_USER": "guest", "OLD_AMQP": old.amqp, "OLD_API": old.api, "NEW_API": new.api}
    run(guide, "move-topology.sh", **env)
    consumer.stop()
    consumer = App(guide, "consumer.py", f"{new.amqp}/{vhost}", "orders", str(consumed))
    at_move = len(lines(consumed))
    wait_for(lambda: len(lines(consumed)) >= at_move + 100, "the new consumer taking shovelled messages", timeout=90.0)
    producer.stop()
    producer = App(guide, "producer.py", f"{new.amqp}/{vhost}", "orders", "new", str(published))
    wait_for(
        lambda: sum(m.startswith("new-") for m in lines(published)) >= 100, "the new producer at work", timeout=90.0
    )
    producer.stop()
    run(guide, "drain.sh", **env)
    wait_for(lambda: len(lines(consumed)) >= len(lines(published)), "everything published consumed", timeout=90.0)
    consumer.stop()
    assert Counter(lines(consumed)) == Counter(lines(published))  # each message exactly once
    with httpx.Client(base_url=new.api, timeout=20) as api:
        bindings = api.get(f"/api/bindings/{vhost}").json()
        assert {(b["source"], b["destination"], b["routing_key"]) for b in bindings if b["source"]} == {
            ("shop", "orders", "order.#")
        }
        assert api.get(f"/api/parameters/shovel/{vhost}").json() == []


def test_moving_from_rabbitmq_to_amqpd_with_applications_running(guide: Path, vhost: str, amqpd: BrokerProcess) -> None:
    move(guide, vhost, side(*RABBIT), amqpd_side(amqpd))


def test_moving_from_amqpd_to_rabbitmq_with_applications_running(guide: Path, vhost: str, amqpd: BrokerProcess) -> None:
    move(guide, vhost, amqpd_side(amqpd), side(*RABBIT))


def test_an_amqpd_edge_forwards_an_exchange_to_rabbitmq(guide: Path, vhost: str, amqpd: BrokerProcess) -> None:
    core = side(*RABBIT)
    with httpx.Client(base_url=core.api, timeout=20) as api:
        assert api.put(f"/api/vhosts/{vhost}").status_code in (201, 204)
        api.put(f"/api/permissions/{vhost}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    with pika.BlockingConnection(pika.URLParameters(f"{core.amqp}/{vhost}")) as conn:
        ch = conn.channel()
        ch.exchange_declare("events", "topic", durable=True)
        ch.queue_declare("all-sites", durable=True)
        ch.queue_bind("all-sites", "events", "#")
    with pika.BlockingConnection(pika.URLParameters(amqpd.url)) as conn:
        ch = conn.channel()
        ch.exchange_declare("events", "topic", durable=True)
        run(guide, "edge-to-core.sh", EDGE_API=amqpd_side(amqpd).api, CORE_AMQP=f"{core.amqp}/{vhost}")
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish("events", f"site.{i % 3}", f"e{i}".encode())
    got: list[tuple[str, str]] = []
    with pika.BlockingConnection(pika.URLParameters(f"{core.amqp}/{vhost}")) as conn:
        ch = conn.channel()
        for method, props, body in ch.consume("all-sites", inactivity_timeout=30):
            if method is None:
                break
            got.append((method.routing_key, body.decode()))
            assert props.headers["x-shovelled"][0]["shovel-name"] == "to-core"
            ch.basic_ack(method.delivery_tag)
            if len(got) == 200:
                break
    assert sorted(got) == sorted((f"site.{i % 3}", f"e{i}") for i in range(200))
