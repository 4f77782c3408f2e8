"""What a stream reader outside the broker (the PySpark connector) learns about a stream's positions: the
queue's JSON in the HTTP API carries its offsets, time -> offset has an endpoint, and a consumer that asks
with x-stream-timestamp gets each message's append time. amqpd only (RabbitMQ has none of these)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from amqpd.testing import BrokerProcess

DEADLINE = 10.0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(management=True) as b:
        yield b


def _publish(url: str, name: str, bodies: list[bytes]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body)
    conn.close()


def _declare(url: str, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()


def test_a_streams_json_shows_its_type_and_offsets(broker: BrokerProcess) -> None:
    _declare(broker.url, "positions")
    _publish(broker.url, "positions", [b"a", b"b", b"c"])
    q = httpx.get(f"{broker.mgmt_url}/api/queues/%2F/positions", auth=("guest", "guest")).json()
    assert q["type"] == "stream"
    assert q["stream"]["first_offset"] == 0
    assert q["stream"]["committed_offset"] == 2
    assert q["stream"]["messages"] == 3
    assert isinstance(q["stream"]["first_timestamp"], int)


def test_time_to_offset_finds_the_first_message_appended_at_or_after(broker: BrokerProcess) -> None:
    _declare(broker.url, "by-time")
    _publish(broker.url, "by-time", [b"old1", b"old2"])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    _publish(broker.url, "by-time", [b"new"])
    url = f"{broker.mgmt_url}/api/queues/%2F/by-time/offset"
    assert httpx.get(url, params={"timestamp": cut}, auth=("guest", "guest")).json()["offset"] == 2
    assert httpx.get(url, params={"timestamp": 0}, auth=("guest", "guest")).json()["offset"] == 0
    future = int(time.time() * 1000) + 3_600_000
    assert httpx.get(url, params={"timestamp": future}, auth=("guest", "guest")).json()["offset"] == 3
    bad = httpx.get(url, params={"timestamp": "soon"}, auth=("guest", "guest"))
    assert bad.status_code == 400


def test_time_to_offset_on_a_classic_queue_is_refused(broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().queue_declare("classic-q")
    conn.close()
    r = httpx.get(
        f"{broker.mgmt_url}/api/queues/%2F/classic-q/offset", params={"timestamp": 0}, auth=("guest", "guest")
    )
    assert r.status_code == 400
    assert "not a stream" in r.json()["reason"]


def test_a_consumer_asking_for_timestamps_gets_each_append_time(broker: BrokerProcess) -> None:
    _declare(broker.url, "stamped")
    before = int(time.time() * 1000)
    _publish(broker.url, "stamped", [b"x", b"y"])
    after = int(time.time() * 1000)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    ch.basic_consume(
        "stamped",
        lambda c, m, p, b: got.append(p.headers),
        arguments={"x-stream-offset": "first", "x-stream-timestamp": True},
    )
    ch.basic_consume("stamped", lambda c, m, p, b: plain.append(p.headers), arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + DEADLINE
    while (len(got) < 2 or len(plain) < 2) and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    assert [h["x-stream-offset"] for h in got] == [0, 1]
    assert all(before <= h["x-stream-timestamp"] <= after for h in got)
    assert all("x-stream-timestamp" not in h for h in plain)
