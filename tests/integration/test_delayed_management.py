"""Delayed exchanges seen from outside (issue 15): how many messages wait per exchange and when the next is due,
in the HTTP API's exchange objects (`messages_delayed`, as the delayed-message plugin adds it to its exchanges'
info, and amqpd's `next_delivery_due`), in `amqpctl list_exchanges` and in Prometheus's /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # the reference RabbitMQ has no delayed-message plugin

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(management=True) as b:
        yield b


@pytest.fixture(scope="module")
def waiting(broker: BrokerProcess) -> dict[str, Any]:
    """ "later" (x-delayed-type direct) holds two messages due in one and two hours; "idle" holds none."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for name in ("later", "idle"):
        ch.exchange_declare(name, "x-delayed-message", arguments={"x-delayed-type": "direct"})
    ch.queue_declare("later.q")
    ch.queue_bind("later.q", "later", "k")
    before = int(time.time() * 1000)
    for hours in (2, 1):
        ch.basic_publish("later", "k", b"x", pika.BasicProperties(headers={"x-delay": hours * HOUR_MS}))
    after = int(time.time() * 1000)
    conn.close()
    return {"earliest": before + HOUR_MS, "latest": after + HOUR_MS}


def get(broker: BrokerProcess, path: str) -> Any:
    r = httpx.get(broker.mgmt_url + path, auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return r.json()


def test_the_api_shows_how_many_wait_and_when_the_next_is_due(broker: BrokerProcess, waiting: dict[str, Any]) -> None:
    later = get(broker, "/api/exchanges/%2F/later")
    assert later["type"] == "x-delayed-message"
    assert later["messages_delayed"] == 2
    assert waiting["earliest"] <= later["next_delivery_due"] <= waiting["latest"]  # the one-hour message
    idle = get(broker, "/api/exchanges/%2F/idle")
    assert idle["messages_delayed"] == 0
    assert idle["next_delivery_due"] is None
    assert "messages_delayed" not in get(broker, "/api/exchanges/%2F/amq.direct")  # only delayed exchanges


def test_exchange_listings_sort_and_select_the_new_fields(broker: BrokerProcess, waiting: dict[str, Any]) -> None:
    rows = get(broker, "/api/exchanges/%2F?columns=name,messages_delayed&sort=messages_delayed")
    assert rows[:2] == [{"name": "idle", "messages_delayed": 0}, {"name": "later", "messages_delayed": 2}]
    assert rows[2] == {"name": ""}  # exchanges without the field sort after those with it


def amqpctl(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqpd.mgmt.amqpctl", "--url", broker.mgmt_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_amqpctl_lists_delayed_counts_and_due_times(broker: BrokerProcess, waiting: dict[str, Any]) -> None:
    done = amqpctl(broker, "--formatter", "json", "list_exchanges", "name", "messages_delayed", "next_delivery_due")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["later"]["messages_delayed"] == 2
    assert waiting["earliest"] <= rows["later"]["next_delivery_due"] <= waiting["latest"]
    assert rows["amq.topic"]["messages_delayed"] is None  # not a delayed exchange: an empty cell in a table
    table = amqpctl(broker, "-q", "list_exchanges", "name", "messages_delayed", "--filter", "^(later|idle)$")
    assert table.returncode == 0, table.stderr
    assert table.stdout.split("\n")[0].split() == ["name", "messages_delayed"]
    assert sorted(line.split() for line in table.stdout.strip().split("\n")[1:]) == [["idle", "0"], ["later", "2"]]


def test_prometheus_gauges_count_waiting_messages(broker: BrokerProcess, waiting: dict[str, Any]) -> None:
    def samples(path: str) -> dict[str, float]:
        text = httpx.get(broker.metrics_url + path, timeout=10).text
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("amqpd_exchange_messages_delayed")
        }

    aggregated = samples("/metrics")
    assert aggregated["amqpd_exchange_messages_delayed"] == 2
    due = aggregated["amqpd_exchange_messages_delayed_next_due_timestamp_seconds"]
    assert waiting["earliest"] / 1000 <= due <= waiting["latest"] / 1000
    per_object = samples("/metrics/per-object")
    assert per_object['amqpd_exchange_messages_delayed{exchange="later",vhost="/"}'] == 2
    assert per_object['amqpd_exchange_messages_delayed{exchange="idle",vhost="/"}'] == 0
