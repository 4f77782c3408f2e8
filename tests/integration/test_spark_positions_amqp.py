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
from amqpd.spark.wire import BrokerError, Endpoint
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
        pytest.skip("the reference RabbitMQ is not running (scripts/ensure-rabbitmq.sh)")
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    try:
        with pytest.raises(BrokerError, match=r"is RabbitMQ .*not amqpd") as wrong:
            AmqpPositions(Endpoint.parse(RABBITMQ)).bounds(name)
        assert "\n" not in str(wrong.value)
    finally:
        ch.queue_delete(name)
        conn.close()
