"""RabbitMQ's federation plugin, on the reference RabbitMQ, federating an exchange and a queue from an amqpd
upstream, unchanged: the link runs (as /api/federation-links reports it), and what is published on amqpd is
consumed on RabbitMQ. Marked amqpd_only: with the suite pointed at RabbitMQ there is no amqpd upstream.

The reference RabbitMQ needs rabbitmq_federation and rabbitmq_federation_management; the fixture enables them
(allowed on the reference broker) when rabbitmq-plugins is at hand. Every object it creates there has a unique
name and is removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest
from waiting import wait_for

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only

REFERENCE_AMQP = os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REFERENCE_HTTP = os.environ.get("AMQPD_REFERENCE_MGMT_URL", "http://127.0.0.1:15672")
MESSAGES = 200
WAIT = 60.0  # the plugin retries a failed link every 5 s; a cold start may need a few tries


def connect(url: str) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    params.socket_timeout = params.stack_timeout = 60  # the machine is shared: handshakes may be slow
    return pika.BlockingConnection(params)


@pytest.fixture(scope="module")
def rabbit() -> Iterator[httpx.Client]:
    with httpx.Client(base_url=REFERENCE_HTTP + "/api", auth=("guest", "guest"), timeout=20) as client:
        try:
            answer = client.get("/federation-links")
        except httpx.TransportError as exc:
            pytest.fail(f"no reference RabbitMQ management API at {REFERENCE_HTTP}: {exc}")
        if answer.status_code == 404 and shutil.which("rabbitmq-plugins"):
            plugins = ["rabbitmq_federation", "rabbitmq_federation_management"]
            subprocess.run(["rabbitmq-plugins", "enable", *plugins], check=True, capture_output=True, timeout=120)
            answer = wait_for(lambda: (r := client.get("/federation-links")).status_code == 200 and r, "plugin")
        assert answer.status_code == 200, f"the reference RabbitMQ has no federation plugin: {answer.status_code}"
        yield client


@pytest.fixture
def amqpd() -> Iterator[BrokerProcess]:
    with BrokerProcess(management=True, env={"AMQPD_STATS_INTERVAL": "0.2"}) as broker:
        yield broker


@pytest.fixture
def federation(rabbit: httpx.Client, amqpd: BrokerProcess) -> Iterator[str]:
    """A unique prefix: an upstream pointing at amqpd and a policy federating what starts with the prefix."""
    prefix = f"fed28-{uuid.uuid4().hex[:8]}"
    upstream = {"uri": f"amqp://guest:guest@127.0.0.1:{amqpd.port}", "max-hops": 1}
    policy = {"pattern": f"^{prefix}\\.", "apply-to": "all", "definition": {"federation-upstream": prefix}}
    assert rabbit.put(f"/parameters/federation-upstream/%2F/{prefix}", json={"value": upstream}).is_success
    try:
        assert rabbit.put(f"/policies/%2F/{prefix}", json=policy).is_success
        yield prefix
    finally:
        rabbit.delete(f"/policies/%2F/{prefix}")
        rabbit.delete(f"/parameters/federation-upstream/%2F/{prefix}")
        for kind in ("exchanges", "queues"):
            for name in (f"{prefix}.x", f"{prefix}.q", f"{prefix}.in"):
                rabbit.delete(f"/{kind}/%2F/{quote(name, safe='')}")


def running_link(rabbit: httpx.Client, upstream: str, kind: str) -> dict[str, Any] | None:
    answer = rabbit.get("/federation-links")
    if answer.status_code != 200:  # RabbitMQ 3.10 answers 500 while a link's error cannot be shown as JSON
        return None
    links = [link for link in answer.json() if link["upstream"] == upstream]
    return next((link for link in links if link["type"] == kind and link["status"] == "running"), None)


def publish_confirmed(url: str, exchange: str, keys: list[str], headers: dict[str, Any] | None = None) -> None:
    with connect(url) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i, key in enumerate(keys):
            ch.basic_publish(exchange, key, f"{key}:{i}".encode(), pika.BasicProperties(headers=headers))


def drain(ch: Any, queue: str, count: int) -> list[tuple[bytes, dict[str, Any]]]:
    """Exactly `count` messages from queue, or as many as arrived before the deadline."""
    got: list[tuple[bytes, dict[str, Any]]] = []
    deadline = time.monotonic() + WAIT
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=1):
        if method is not None:
            got.append((body, props.headers or {}))
        if len(got) == count or time.monotonic() > deadline:
            break
    ch.cancel()
    return got


def test_rabbitmq_federates_an_exchange_from_amqpd(rabbit: httpx.Client, amqpd: BrokerProcess, federation: str) -> None:
    x = f"{federation}.x"
    with connect(REFERENCE_AMQP) as conn:
        ch = conn.channel()
        ch.exchange_declare(x, "topic")
        ch.queue_declare(f"{federation}.in", arguments={"x-queue-type": "classic"})
        ch.queue_bind(f"{federation}.in", x, "orders.#")
        link = wait_for(lambda: running_link(rabbit, federation, "exchange"), "the exchange link to run")
        assert link["uri"] == f"amqp://127.0.0.1:{amqpd.port}"

        # On amqpd the link declared its upstream exchange as on RabbitMQ, with its own helper type, bound to
        # it with the downstream binding's key.
        with httpx.Client(base_url=amqpd.mgmt_url + "/api", auth=("guest", "guest"), timeout=20) as api:
            bindings = wait_for(
                lambda: [b for b in api.get(f"/exchanges/%2F/{x}/bindings/source").json() if b["routing_key"]],
                "the downstream binding to reach amqpd",
            )
            internal = api.get(f"/exchanges/%2F/{quote(bindings[0]['destination'], safe='')}").json()
        assert [b["routing_key"] for b in bindings] == ["orders.#"]
        assert (internal["type"], internal["internal"], internal["arguments"].get("x-max-hops")) == (
            "x-federation-upstream",
            True,
            1,
        )

        keys = [f"orders.{i % 3}" if i % 2 else "other" for i in range(MESSAGES)]
        publish_confirmed(amqpd.url, x, keys)
        got = drain(ch, f"{federation}.in", MESSAGES // 2)
    assert sorted(body for body, _ in got) == sorted(f"{k}:{i}".encode() for i, k in enumerate(keys) if k != "other")
    assert {hop["cluster-name"] for _, headers in got for hop in headers["x-received-from"]} == {"amqpd"}


def test_a_message_that_crossed_max_hops_stays_on_amqpd(
    rabbit: httpx.Client, amqpd: BrokerProcess, federation: str
) -> None:
    x = f"{federation}.x"
    with connect(REFERENCE_AMQP) as conn:
        ch = conn.channel()
        ch.exchange_declare(x, "fanout")
        ch.queue_declare(f"{federation}.in")
        ch.queue_bind(f"{federation}.in", x)
        wait_for(lambda: running_link(rabbit, federation, "exchange"), "the exchange link to run")
        with httpx.Client(base_url=amqpd.mgmt_url + "/api", auth=("guest", "guest"), timeout=20) as api:
            queue = wait_for(
                lambda: [q for q in api.get("/queues/%2F").json() if q["name"].startswith(f"federation: {x}")],
                "the link's queue on amqpd",
            )[0]["name"]
            # one hop already (max-hops is 1): the helper exchange routes it nowhere, so it never leaves amqpd
            publish_confirmed(amqpd.url, x, ["k"], {"x-received-from": [{"cluster-name": "edge", "vhost": "/"}]})
            publish_confirmed(amqpd.url, x, ["k"])
            got = drain(ch, f"{federation}.in", 1)
            stats = wait_for(
                lambda: api.get(f"/queues/%2F/{quote(queue, safe='')}").json().get("message_stats", {}).get("publish"),
                "the link queue's statistics",
            )
    assert [body for body, _ in got] == [b"k:0"]
    assert stats == 1  # only the message without hops entered the link's queue


def test_rabbitmq_federates_a_queue_from_amqpd(rabbit: httpx.Client, amqpd: BrokerProcess, federation: str) -> None:
    q = f"{federation}.q"
    with connect(amqpd.url) as conn:
        conn.channel().queue_declare(q, durable=True)
    with connect(REFERENCE_AMQP) as conn:
        ch = conn.channel()
        ch.queue_declare(q, durable=True)
        wait_for(lambda: running_link(rabbit, federation, "queue"), "the queue link to run")
        publish_confirmed(amqpd.url, "", [q] * MESSAGES)
        got = drain(ch, q, MESSAGES)
    assert sorted(body for body, _ in got) == sorted(f"{q}:{i}".encode() for i in range(MESSAGES))
    assert {hop["queue"] for _, headers in got for hop in headers["x-received-from"]} == {q}
