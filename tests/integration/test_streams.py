"""Stream queues on a broker with its store: what survives a restart and a kill -9 (the log, its dense
offsets, tracked consumers' offsets), retention deleting while a consumer reads, and replay by time.
Real pika clients against `python -m amqpd` processes on ephemeral ports; every wait is bounded."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pika
import pytest

from amqpd.testing import BrokerProcess
from store import QueueLogReader

STREAM = {"x-queue-type": "stream"}
DEADLINE = 10.0


def channel(url: str, prefetch: int = 1000) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    return conn, ch


def publish(url: str, name: str, bodies: list[bytes], persistent: bool = False) -> None:
    conn, ch = channel(url)
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    for body in bodies:
        ch.basic_publish("", name, body, props)
    conn.close()


def consume(ch: Any, name: str, count: int, ack: bool = True, **arguments: Any) -> list[tuple[int, bytes]]:
    """Subscribe, take the first `count` deliveries (acking each if asked; any after them stay unacked),
    cancel; their (offset header, body) pairs."""
    got: list[tuple[int, bytes]] = []

    def on_message(c: Any, method: Any, props: Any, body: bytes) -> None:
        if len(got) == count:
            return
        got.append((props.headers["x-stream-offset"], body))
        if ack:
            c.basic_ack(method.delivery_tag)

    tag = ch.basic_consume(name, on_message, consumer_tag=arguments.pop("tag", None), arguments=arguments)
    deadline = time.monotonic() + DEADLINE
    while len(got) < count and time.monotonic() < deadline:
        ch.connection.process_data_events(0.05)
    ch.basic_cancel(tag)
    return got


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def test_a_stream_and_its_offsets_survive_a_restart_transient_messages_too(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("s", durable=True, arguments=STREAM)
        conn.close()
        publish(broker.url, "s", [b"m%d" % i for i in range(50)])
        assert broker.stop() == 0
        broker = BrokerProcess(data_dir=data_dir).start()
        publish(broker.url, "s", [b"after"])
        conn, ch = channel(broker.url)
        got = consume(ch, "s", 51, **{"x-stream-offset": 45})
        assert got == [(i, b"m%d" % i) for i in range(45, 50)] + [(50, b"after")]
        conn.close()
    finally:
        broker.close()


def test_a_tracking_consumer_resumes_with_no_gap_and_no_repeat_after_kill_9(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    track = {"x-stream-automatic-offset-tracking": True, "tag": "billing"}
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("s", durable=True, arguments=STREAM)
        publish(broker.url, "s", [b"%d" % i for i in range(100)])
        first = consume(ch, "s", 40, **{"x-stream-offset": "first"}, **track)
        assert [o for o, _ in first] == list(range(40))
        conn.close()
        # A consumer restart: on from where it left off.
        conn, ch = channel(broker.url)
        second = consume(ch, "s", 30, **track)
        assert [o for o, _ in second] == list(range(40, 70))
        conn.close()
        publish(broker.url, "s", [b"fence"])  # its confirm means the acks' commit is on disk too
        broker.kill()
        broker = BrokerProcess(data_dir=data_dir).start()
        conn, ch = channel(broker.url)
        rest = consume(ch, "s", 31, **track)
        assert [o for o, _ in rest] == list(range(70, 101))
        conn.close()
    finally:
        broker.close()


def test_retention_deletes_old_segments_while_a_consumer_reads(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url, prefetch=10)
        args = {**STREAM, "x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000}
        ch.queue_declare("s", durable=True, arguments=args)
        publish(broker.url, "s", [b"%05d" % i + b"." * 995 for i in range(10)])
        early = consume(ch, "s", 10, ack=False, **{"x-stream-offset": "first"})  # holds 10 unacked
        assert [o for o, _ in early] == list(range(10))
        publish(broker.url, "s", [b"%05d" % i + b"." * 995 for i in range(10, 200)])
        conn.close()
        conn, ch = channel(broker.url)
        got = consume(ch, "s", 200, **{"x-stream-offset": "first"})
        offsets = [o for o, _ in got]
        assert offsets[0] > 100 and offsets == list(range(offsets[0], 200))
        assert [int(b[:5]) for _, b in got] == offsets  # an offset names the same message as before
        conn.close()
    finally:
        broker.close()


def test_replay_from_a_timestamp_starts_at_the_first_message_published_then(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("s", durable=True, arguments=STREAM)
        publish(broker.url, "s", [b"before"] * 3)
        since = int(time.time()) + 1  # AMQP timestamps are whole seconds: start at the next one
        time.sleep(since - time.time())
        publish(broker.url, "s", [b"after"] * 2)
        moment = datetime.datetime.fromtimestamp(since, tz=datetime.UTC)  # pika sends it as a timestamp
        got = consume(ch, "s", 5, **{"x-stream-offset": moment})
        assert got == [(3, b"after"), (4, b"after")]
        conn.close()
    finally:
        broker.close()


def test_deduplication_remembers_ids_across_a_kill_9(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("d", durable=True, arguments={"x-message-deduplication": True})
        ch.confirm_delivery()
        for message_id in ("a", "b"):
            ch.basic_publish("", "d", message_id.encode(), pika.BasicProperties(message_id=message_id, delivery_mode=2))
        conn.close()
        broker.kill()  # the ids were saved before the confirms went out
        broker = BrokerProcess(data_dir=data_dir).start()
        conn, ch = channel(broker.url)
        ch.confirm_delivery()
        for message_id in ("a", "c", "b"):  # each publish returns only once confirmed (acked)
            ch.basic_publish("", "d", message_id.encode(), pika.BasicProperties(message_id=message_id, delivery_mode=2))
        bodies = []
        while (got := ch.basic_get("d", auto_ack=True))[0] is not None:
            bodies.append(got[2])
        assert bodies == [b"a", b"b", b"c"]
        conn.close()
    finally:
        broker.close()


def test_a_reader_outside_the_broker_numbers_records_as_the_broker_does(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        args = {**STREAM, "x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000}
        ch.queue_declare("s", durable=True, arguments=args)
        ch.queue_declare("other", durable=True)
        ch.confirm_delivery()
        for i in range(100):  # another queue's records in between: the stream's numbers stay dense
            ch.basic_publish("", "s", b"%05d" % i + b"." * 995)
            ch.basic_publish("", "other", b"x", pika.BasicProperties(delivery_mode=2))
        served = consume(ch, "s", 100, **{"x-stream-offset": "first"})
        conn.close()
        reader = QueueLogReader(data_dir, "/", "s")  # while the broker runs
        read = reader.read(0, 1000)
        assert served[0][0] > 0  # retention dropped a prefix: numbering starts past it
        assert [(n, r.body) for n, r in read] == served
        assert reader.read(served[-3][0], 2) == read[-3:-1]
    finally:
        broker.close()


def test_messages_dead_lettered_into_a_stream_are_kept(data_dir: str) -> None:
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("s", durable=True, arguments=STREAM)
        ch.queue_declare(
            "work", arguments={"x-message-ttl": 0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "s"}
        )
        ch.confirm_delivery()
        for body in (b"late-1", b"late-2"):
            ch.basic_publish("", "work", body)
        got = consume(ch, "s", 2, **{"x-stream-offset": "first"})
        assert got == [(0, b"late-1"), (1, b"late-2")]
        conn.close()
    finally:
        broker.close()


def test_offsets_and_retention_go_on_after_kill_9(data_dir: str) -> None:
    args = {**STREAM, "x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000}
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("s", durable=True, arguments=args)
        conn.close()
        publish(broker.url, "s", [b"%05d" % i + b"." * 995 for i in range(60)])  # retention drops some
        broker.kill()
        broker = BrokerProcess(data_dir=data_dir).start()
        publish(broker.url, "s", [b"%05d" % i + b"." * 995 for i in range(60, 120)])
        conn, ch = channel(broker.url)
        got = consume(ch, "s", 120, **{"x-stream-offset": "first"})
        offsets = [o for o, _ in got]
        assert 60 < offsets[0] and offsets == list(range(offsets[0], 120))
        assert [int(b[:5]) for _, b in got] == offsets  # numbering continued across the crash
        assert len(got) <= 30  # retention kept bounding the stream after the restart
        conn.close()
    finally:
        broker.close()


def test_messages_with_a_ttl_keep_their_offsets_after_kill_9(data_dir: str) -> None:
    """A stream ignores message TTL (RabbitMQ's do too). Recovery used to drop expired records from the
    unsaved tail after a crash, renumbering every offset after them."""
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        conn, ch = channel(broker.url)
        ch.queue_declare("s", durable=True, arguments=STREAM)
        ch.confirm_delivery()
        for i in range(10):
            ch.basic_publish("", "s", b"m%d" % i, pika.BasicProperties(expiration="1" if i in (3, 4) else None))
        conn.close()
        time.sleep(0.05)  # their TTL has passed before the restart
        broker.kill()
        broker = BrokerProcess(data_dir=data_dir).start()
        conn, ch = channel(broker.url)
        assert consume(ch, "s", 10, **{"x-stream-offset": "first"}) == [(i, b"m%d" % i) for i in range(10)]
        conn.close()
    finally:
        broker.close()


def test_a_clean_restart_leaves_retention_where_it_would_have_been(tmp_path: Path) -> None:
    """The open segment's size is saved only now and then while publishing (StreamQueue._on_commit) and
    exactly at a clean stop: with a restart in the middle, retention drops the first segment at the same
    offset as without one."""
    args = {**STREAM, "x-max-length-bytes": 64_000, "x-stream-max-segment-size-bytes": 64_000}
    bodies = [b"%05d" % i + b"." * 95 for i in range(700)]
    firsts = []
    for restart in (False, True):
        data_dir = str(tmp_path / f"data-{restart}")
        broker = BrokerProcess(data_dir=data_dir).start()
        try:
            conn, ch = channel(broker.url)
            ch.queue_declare("s", durable=True, arguments=args)
            conn.close()
            publish(broker.url, "s", bodies[:30])  # well under 1/16 of a segment
            if restart:
                assert broker.stop() == 0
                broker = BrokerProcess(data_dir=data_dir).start()
            publish(broker.url, "s", bodies[30:])
            conn, ch = channel(broker.url)
            ((first, body),) = consume(ch, "s", 1, **{"x-stream-offset": "first"})
            assert body == bodies[first]
            firsts.append(first)
            conn.close()
        finally:
            broker.close()
    assert 0 < firsts[0] == firsts[1]
