"""The source's and the sink's connections in a Python worker: the tasks a worker runs one after another read
over one connection and publish over one connection (no handshake per task of each micro-batch), and a kept
connection the broker closed meanwhile is replaced: the next task reads its whole range, or has every message
confirmed. The tasks here are the connector's own functions (read_range and publish_dicts, what each read and
write task runs) called in this process, as a reused Python worker calls them."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator

import pika
import pytest
from broker_streams import declare_stream, publish

from amqpd.spark.reader import OffsetRange, read_range
from amqpd.spark.wire import Endpoint, close_parked
from amqpd.spark.writer import WriteOptions, close_kept, publish_dicts
from amqpd.testing import BrokerProcess, ManagementClient

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30.0


@pytest.fixture(autouse=True)
def new_worker() -> Iterator[None]:
    """Each test starts as a new Python worker: no connection kept from an earlier test."""
    close_kept()
    close_parked()
    yield
    close_kept()
    close_parked()


def _rows(first: int, count: int) -> Iterator[dict[str, object]]:
    return ({"body": f"m{i}".encode(), "message_id": f"id-{i}"} for i in range(first, first + count))


def _connections(api: ManagementClient) -> set[str]:
    return {c["name"] for c in api.request("GET", "/connections")}


def _bodies(broker: BrokerProcess, stream: str, count: int) -> list[bytes]:
    """The first `count` messages of the stream, in order (bounded: WAIT_S)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got: list[bytes] = []
    ch.basic_consume(stream, lambda _c, _m, _p, body: got.append(body), arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    conn.close()
    return got


def test_tasks_in_one_worker_publish_over_one_connection(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    target = stream_name("sink-kept")
    declare_stream(broker, target)
    opts = WriteOptions.parse({"uri": broker.url, "routing_key": target})
    api = ManagementClient(broker.mgmt_url)
    try:
        before = _connections(api)
        assert publish_dicts(_rows(0, 50), opts).messages == 50
        first = _connections(api) - before
        assert publish_dicts(_rows(50, 70), opts).messages == 70  # this task's count, not the connection's
        assert _connections(api) - before == first and len(first) == 1  # the same one connection
    finally:
        api.close()
    assert _bodies(broker, target, 120) == [f"m{i}".encode() for i in range(120)]


def test_a_kept_connection_the_broker_closed_is_replaced_and_the_next_task_is_confirmed(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    target = stream_name("sink-closed")
    declare_stream(broker, target)
    opts = WriteOptions.parse({"uri": broker.url, "routing_key": target})
    api = ManagementClient(broker.mgmt_url)
    try:
        before = _connections(api)
        assert publish_dicts(_rows(0, 30), opts).messages == 30
        (kept,) = _connections(api) - before
        api.request("DELETE", f"/connections/{urllib.parse.quote(kept, safe='')}")
        deadline = time.monotonic() + WAIT_S
        while kept in _connections(api):  # closed on the broker's side (its close sent to the worker)
            assert time.monotonic() < deadline, "the broker did not close the connection"
            time.sleep(0.05)
        assert publish_dicts(_rows(30, 40), opts).messages == 40
        assert len(_connections(api) - before) == 1  # a new one in its place
    finally:
        api.close()
    assert _bodies(broker, target, 70) == [f"m{i}".encode() for i in range(70)]


def _read(broker: BrokerProcess, stream: str, start: int, end: int) -> list[bytes]:
    """A read task's rows: the range's bodies."""
    part = OffsetRange(Endpoint.parse(broker.url), stream, start, end, include_headers=False, fail_on_data_loss=True)
    return [body for batch in read_range(part) for body in batch.column("body").to_pylist()]


def test_reads_in_one_worker_share_one_connection_and_a_closed_one_is_replaced(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    source = stream_name("read-kept")
    declare_stream(broker, source)
    publish(broker, source, [f"m{i}".encode() for i in range(300)])
    api = ManagementClient(broker.mgmt_url)
    try:
        before = _connections(api)
        assert _read(broker, source, 0, 100) == [f"m{i}".encode() for i in range(100)]
        first = _connections(api) - before
        assert _read(broker, source, 100, 250) == [f"m{i}".encode() for i in range(100, 250)]
        assert _read(broker, source, 10, 20) == [f"m{i}".encode() for i in range(10, 20)]  # back, as a replay does
        assert _connections(api) - before == first and len(first) == 1  # the same one connection
        (kept,) = first
        api.request("DELETE", f"/connections/{urllib.parse.quote(kept, safe='')}")
        deadline = time.monotonic() + WAIT_S
        while kept in _connections(api):
            assert time.monotonic() < deadline, "the broker did not close the connection"
            time.sleep(0.05)
        assert _read(broker, source, 250, 300) == [f"m{i}".encode() for i in range(250, 300)]
        assert len(_connections(api) - before) == 1  # a new one in its place
    finally:
        api.close()
