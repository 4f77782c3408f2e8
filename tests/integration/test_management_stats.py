"""The statistics dashboards and tools read (Grafana's RabbitMQ dashboards, KEDA's MessageRate mode,
rabbitmqadmin's columns): per-exchange publish_in / publish_out, byte counts of queues and connections, queue
length rates, the Prometheus series of the same, and every listener in /api/overview.

Like test_management_api.py these run against RabbitMQ's management plugin too (AMQPD_TEST_TARGET_URL);
RabbitMQ's statistics lag up to 5 s, so every read polls (bounded) until it settles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from management_target import Target, eventually, target_fixture  # noqa: F401 - the broker fixture
from tls_certs import CA, write_pair

from amqpd.testing import BrokerProcess

Q = urllib.parse.quote


@pytest.fixture
def api(target: Target) -> httpx.Client:
    return target.http


@pytest.fixture
def names(api: httpx.Client) -> Iterator[dict[str, str]]:
    token = uuid.uuid4().hex[:10]
    made = {"x": f"stats-x-{token}", "q1": f"stats-q1-{token}", "q2": f"stats-q2-{token}", "conn": f"stats-{token}"}
    yield made
    for key in ("q1", "q2"):
        api.delete(f"/api/queues/%2F/{Q(made[key], safe='')}")
    api.delete(f"/api/exchanges/%2F/{Q(made['x'], safe='')}")


def _connect(target: Target, name: str) -> pika.BlockingConnection:
    params = pika.URLParameters(target.amqp)
    params.client_properties = {"connection_name": name}
    return pika.BlockingConnection(params)


def _fanout_to_two_queues(ch: Any, names: dict[str, str]) -> None:
    ch.exchange_declare(names["x"], "fanout")
    for key in ("q1", "q2"):
        ch.queue_declare(names[key])
        ch.queue_bind(names[key], names["x"])


def test_an_exchange_counts_publishes_in_and_copies_routed_out_with_rates(
    api: httpx.Client, target: Target, names: dict[str, str]
) -> None:
    conn = _connect(target, names["conn"])
    try:
        ch = conn.channel()
        _fanout_to_two_queues(ch, names)
        ch.confirm_delivery()
        for _ in range(10):
            ch.basic_publish(names["x"], "", b"x" * 100)
        path = f"/api/exchanges/%2F/{Q(names['x'], safe='')}"

        def counted() -> Any:
            stats = api.get(path).json().get("message_stats", {})
            return stats if stats.get("publish_in") == 10 else None

        stats = eventually(counted, timeout=30)
        assert stats and stats["publish_out"] == 20  # one copy per bound queue

        def rising() -> Any:
            for _ in range(50):
                ch.basic_publish(names["x"], "", b"r")
            stats = api.get(path).json().get("message_stats", {})
            ok = stats.get("publish_in_details", {}).get("rate", 0) > 0
            return stats if ok and stats.get("publish_out_details", {}).get("rate", 0) > 0 else None

        assert eventually(rising, timeout=30), "no publish_in / publish_out rate appeared"
    finally:
        conn.close()


def test_queue_bytes_split_into_ready_and_unacknowledged(
    api: httpx.Client, target: Target, names: dict[str, str]
) -> None:
    conn = _connect(target, names["conn"])
    try:
        ch = conn.channel()
        ch.queue_declare(names["q1"])
        ch.confirm_delivery()
        for _ in range(10):
            ch.basic_publish("", names["q1"], b"x" * 100)
        ch.basic_qos(prefetch_count=3)
        got: list[Any] = []
        ch.basic_consume(names["q1"], lambda c, m, p, b: got.append(m))
        path = f"/api/queues/%2F/{Q(names['q1'], safe='')}"

        def settled() -> Any:
            conn.process_data_events(0.1)
            q = api.get(path).json()
            return q if q.get("messages_unacknowledged") == 3 and q.get("message_bytes_unacknowledged") else None

        q = eventually(settled, timeout=30)
        assert q, "the unacked deliveries never showed"
        assert (q["message_bytes"], q["message_bytes_ready"], q["message_bytes_unacknowledged"]) == (1000, 700, 300)
    finally:
        conn.close()


def test_a_growing_queue_shows_its_length_rates(api: httpx.Client, target: Target, names: dict[str, str]) -> None:
    conn = _connect(target, names["conn"])
    try:
        ch = conn.channel()
        ch.queue_declare(names["q1"])
        path = f"/api/queues/%2F/{Q(names['q1'], safe='')}"

        def growing() -> Any:
            for _ in range(100):
                ch.basic_publish("", names["q1"], b"g")
            q = api.get(path).json()
            ok = q.get("messages_details", {}).get("rate", 0) > 0
            return q if ok and q.get("messages_ready_details", {}).get("rate", 0) > 0 else None

        assert eventually(growing, timeout=30), "messages_details.rate stayed 0 while the queue grew"

        def totals() -> Any:
            for _ in range(100):
                ch.basic_publish("", names["q1"], b"g")
            t = api.get("/api/overview").json()["queue_totals"]
            return t if t.get("messages_ready_details", {}).get("rate", 0) > 0 else None

        assert eventually(totals, timeout=30), "queue_totals' rates stayed 0 while a queue grew"
    finally:
        conn.close()


def test_a_connection_counts_its_octets_with_rates(api: httpx.Client, target: Target, names: dict[str, str]) -> None:
    conn = _connect(target, names["conn"])
    try:
        ch = conn.channel()
        ch.queue_declare(names["q1"])

        def mine() -> Any:
            listed = api.get("/api/connections").json()
            return next((c for c in listed if c.get("user_provided_name") == names["conn"]), None)

        def busy() -> Any:
            for _ in range(100):
                ch.basic_publish("", names["q1"], b"o" * 200)
            ch.queue_declare(names["q1"], passive=True)  # something back from the broker too
            c = mine()
            if c is None or not c.get("recv_oct") or not c.get("send_oct"):
                return None
            return c if c["recv_oct_details"]["rate"] > 0 and c["send_oct_details"]["rate"] > 0 else None

        c = eventually(busy, timeout=30)
        assert c, "no recv_oct / send_oct rates appeared"
        assert c["recv_oct"] > 100 * 200  # the bodies alone
        assert c["recv_cnt"] > 0 and c["send_cnt"] > 0
    finally:
        conn.close()


def _samples(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")}


@pytest.mark.amqpd_only
def test_prometheus_has_the_byte_series_of_queues_and_connections() -> None:
    with BrokerProcess(management=True) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare("bytes")
        ch.confirm_delivery()
        for _ in range(10):
            ch.basic_publish("", "bytes", b"x" * 100)
        ch.basic_qos(prefetch_count=3)
        got: list[Any] = []
        ch.basic_consume("bytes", lambda c, m, p, b: got.append(m))
        while len(got) < 3:
            conn.process_data_events(0.1)
        total = _samples(httpx.get(broker.metrics_url + "/metrics").text)
        per_object = _samples(httpx.get(broker.metrics_url + "/metrics/per-object").text)
        conn.close()
    assert total["rabbitmq_queue_messages_bytes"] == 1000
    assert total["rabbitmq_queue_messages_ready_bytes"] == 700
    assert total["rabbitmq_queue_messages_unacked_bytes"] == 300
    assert per_object['rabbitmq_queue_messages_unacked_bytes{queue="bytes",vhost="/"}'] == 300
    assert total["rabbitmq_connection_incoming_bytes_total"] > 1000
    assert total["rabbitmq_connection_outgoing_bytes_total"] > 300
    assert total["rabbitmq_connection_incoming_packets_total"] > 0
    assert any(k.startswith("rabbitmq_connection_outgoing_bytes_total{channel=") for k in per_object)


@pytest.mark.amqpd_only
def test_every_listener_address_and_the_amqps_one_are_listed(tmp_path: Path) -> None:
    ca = CA("stats-ca")
    cert, key = write_pair(*ca.issue("localhost", server=True), tmp_path, "server")
    config = tmp_path / "amqpd.toml"
    settings = {"tls_port": 0, "tls_cert_file": str(cert), "tls_key_file": str(key)}
    config.write_text("[amqpd]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    with BrokerProcess(hosts=("127.0.0.1", "::1"), management=True, extra_args=["--config", str(config)]) as broker:
        listeners = httpx.get(broker.mgmt_url + "/api/overview", auth=("guest", "guest")).json()["listeners"]
        status = subprocess.run(
            [sys.executable, "-m", "amqpd.mgmt.amqpctl", "status"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "AMQPCTL_URL": broker.mgmt_url},
        )
    amqp = {(x["protocol"], x["ip_address"]) for x in listeners if x["protocol"].startswith("amqp")}
    assert amqp == {("amqp", "127.0.0.1"), ("amqp", "::1"), ("amqp/ssl", "127.0.0.1"), ("amqp/ssl", "::1")}
    ssl_port = next(x["port"] for x in listeners if x["protocol"] == "amqp/ssl")
    assert ssl_port == broker.tls_port
    assert "Interface: ::1, port:" in status.stdout
    assert "protocol: amqp/ssl" in status.stdout


@pytest.mark.parametrize(
    ("confirm", "durable", "consumer"),
    [(False, False, True), (False, False, False), (True, True, False), (True, False, False)],
    ids=["to-a-consumer", "into-a-queue", "stored-confirmed", "confirmed"],
)
def test_every_publish_path_is_counted_on_its_exchange(
    api: httpx.Client, target: Target, names: dict[str, str], confirm: bool, durable: bool, consumer: bool
) -> None:
    """Back-to-back publishes take amqpd's batched paths (a run straight to a consumer, a group into a queue,
    a stored group in confirm mode): each counts them as the one-at-a-time path does."""
    conn = _connect(target, names["conn"])
    try:
        ch = conn.channel()
        ch.exchange_declare(names["x"], "direct")
        ch.queue_declare(names["q1"], durable=durable)
        ch.queue_bind(names["q1"], names["x"], "k")
        got: list[Any] = []
        if consumer:
            ch.basic_consume(names["q1"], lambda c, m, p, b: got.append(b), auto_ack=True)
        if confirm:
            ch.confirm_delivery()
        props = [pika.BasicProperties(message_id=str(i), delivery_mode=2 if durable else 1) for i in range(500)]
        for p in props:
            ch.basic_publish(names["x"], "k", b"b", p)
        ch.queue_declare(names["q1"], durable=durable, passive=True)  # a round trip: every publish was read
        path = f"/api/exchanges/%2F/{Q(names['x'], safe='')}"

        def counted() -> Any:
            conn.process_data_events(0.05)
            stats = api.get(path).json().get("message_stats", {})
            return stats if stats.get("publish_in") == 500 else None

        stats = eventually(counted, timeout=30)
        assert stats, f"publish_in never reached 500: {api.get(path).json().get('message_stats')}"
        assert stats["publish_out"] == 500
    finally:
        conn.close()
