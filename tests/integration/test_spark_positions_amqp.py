"""The connector's driver asks a stream's offsets over AMQP only (amqpd/spark/positions.py's AmqpPositions):
no HTTP API needed, and a broker that is not amqpd is named in one line. No Spark session: the planning
calls themselves, against a real amqpd and the reference RabbitMQ."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pika
import pytest

from amqpd.spark.options import ReadOptions
from amqpd.spark.positions import AmqpPositions, Bounds
from amqpd.spark.reader import BatchReader, OffsetRange, read_range
from amqpd.spark.wire import BrokerError, Endpoint, Outgoing, Publisher
from amqpd.testing import BrokerProcess

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess() as b:  # no management API at all
        yield b


def _stream(url: str, name: str, bodies: list[bytes]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    for body in bodies:
        ch.basic_publish("", name, body)
    conn.close()


def test_the_amqp_uri_alone_gives_offsets_and_time_to_offset(broker: BrokerProcess) -> None:
    _stream(broker.url, "pos-a", [b"1", b"2"])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    _stream(broker.url, "pos-a", [b"3"])
    opts = ReadOptions.parse({"uri": broker.url, "queue": "pos-a"}, streaming=False)
    positions = opts.positions()
    assert isinstance(positions, AmqpPositions)
    assert positions.bounds("pos-a") == Bounds(0, 3)
    assert positions.offset_at("pos-a", cut) == 2
    assert positions.bounds("pos-a") == Bounds(0, 3)  # the same connection answers again
    assert positions._link is not None
    positions._link.sock.close()  # the kept connection is gone (a broker restart, a proxy's idle timeout)
    assert positions.bounds("pos-a") == Bounds(0, 3)  # asked again on a new one
    positions.close()


def test_a_missing_queue_or_one_that_is_not_a_stream_is_one_line_naming_it(broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().queue_declare("pos-classic", durable=True)
    conn.close()
    positions = AmqpPositions(Endpoint.parse(broker.url))
    with pytest.raises(ValueError, match=r"stream 'pos-classic'.*406.*not a stream") as refused:
        positions.bounds("pos-classic")
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=r"stream 'pos-nowhere'.*404") as missing:
        positions.bounds("pos-nowhere")
    assert "\n" not in str(missing.value)


def test_a_broker_that_is_not_amqpd_is_named_in_one_line() -> None:
    name = f"spark-pos-{uuid.uuid4().hex[:8]}"
    try:
        conn = pika.BlockingConnection(pika.URLParameters(RABBITMQ))
    except pika.exceptions.AMQPConnectionError:
        pytest.fail("the reference RabbitMQ is not running (scripts/ensure-rabbitmq.sh)")
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    try:
        with pytest.raises(BrokerError, match=r"is RabbitMQ .*not amqpd") as wrong:
            AmqpPositions(Endpoint.parse(RABBITMQ)).bounds(name)
        assert "\n" not in str(wrong.value)
    finally:
        ch.queue_delete(name)
        conn.close()


def test_a_batch_range_that_does_not_exist_is_one_line_naming_the_stream(broker: BrokerProcess) -> None:
    _stream(broker.url, "pos-range", [b"1", b"2", b"3"])
    past = {"uri": broker.url, "queue": "pos-range", "startingOffsets": '{"pos-range": 10}'}
    with pytest.raises(ValueError, match=r"stream 'pos-range': starting offset 10 is past its end .*0\.\.2"):
        BatchReader(ReadOptions.parse(past, streaming=False)).partitions()
    backwards = {**past, "startingOffsets": '{"pos-range": 2}', "endingOffsets": '{"pos-range": 1}'}
    with pytest.raises(ValueError, match=r"stream 'pos-range': ending offset 1 is before the starting offset 2"):
        BatchReader(ReadOptions.parse(backwards, streaming=False)).partitions()
    whole = {**past, "startingOffsets": "earliest"}
    assert [(p.start, p.end) for p in BatchReader(ReadOptions.parse(whole, streaming=False)).partitions()] == [(0, 3)]


def test_a_broker_gone_mid_read_is_one_line_naming_the_stream_and_range() -> None:
    with BrokerProcess() as doomed:
        _stream(doomed.url, "pos-doomed", [])
        publisher = Publisher(Endpoint.parse(doomed.url))  # windowed confirms: pika waits for each
        for _ in range(60_000):
            publisher.publish(Outgoing(body=b"x" * 200, routing_key="pos-doomed"))
        publisher.flush()
        publisher.close()
        part = OffsetRange(Endpoint.parse(doomed.url), "pos-doomed", 0, 60_000, False, True)
        batches = read_range(part)
        assert next(batches).num_rows > 0  # the read is under way: more chunks are on their way
        assert doomed.proc is not None
        doomed.proc.kill()
        doomed.proc.wait(timeout=30)
        with pytest.raises(BrokerError, match=r"^amqpd stream 'pos-doomed', offsets 0\.\.59999: ") as gone:
            for _ in batches:
                pass
        assert "\n" not in str(gone.value)
