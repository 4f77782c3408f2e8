"""The connector's writer on bad input, without a Spark session: the calls Spark makes on the driver
(AmqpdDataSource.writer) and in a task (publish_dicts), against a real amqpd and the reference RabbitMQ. Each
error is one line naming the option or the stream, and none waits without a bound."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from amqpd.spark.source import AmqpdDataSource
from amqpd.spark.wire import BrokerError
from amqpd.spark.writer import WriteOptions, publish_dicts
from amqpd.testing import BrokerProcess

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"
SCHEMA = StructType([StructField("body", BinaryType())])


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess() as b:
        yield b


def _declare(url: str, name: str, **arguments: Any) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(name, durable=True, arguments=arguments)
    conn.close()


def _writer(url: str, streaming: bool, **options: str) -> object:
    source = AmqpdDataSource({"uri": url, **options})
    return source.streamWriter(SCHEMA, False) if streaming else source.writer(SCHEMA, False)


@pytest.mark.parametrize("streaming", [False, True])
def test_an_unknown_option_is_one_line_naming_it(broker: BrokerProcess, streaming: bool) -> None:
    with pytest.raises(ValueError, match=r"^option routingKeys is not known to the amqpd source for writing"):
        _writer(broker.url, streaming, routingKeys="x")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_target_that_is_not_a_stream_or_missing_is_refused_on_the_driver_naming_it(
    broker: BrokerProcess, streaming: bool
) -> None:
    _declare(broker.url, "w-classic")
    with pytest.raises(ValueError, match=r"stream 'w-classic'.*406.*not a stream") as refused:
        _writer(broker.url, streaming, routing_key="w-classic")
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=r"stream 'w-nowhere'.*404"):
        _writer(broker.url, streaming, queue="w-nowhere")
    _declare(broker.url, "w-stream", **{"x-queue-type": "stream"})
    assert _writer(broker.url, streaming, routing_key="w-stream") is not None
    assert _writer(broker.url, streaming, exchange="amq.direct", routing_key="anything") is not None  # routed


def test_a_stream_on_a_broker_that_is_not_amqpd_is_written_without_the_check() -> None:
    name = f"spark-w-{uuid.uuid4().hex[:8]}"
    _declare(RABBITMQ, name, **{"x-queue-type": "stream"})
    try:
        opts = WriteOptions.parse({"uri": RABBITMQ, "routing_key": name})
        opts.check_target()
        assert publish_dicts(iter([{"body": b"to rabbitmq"}]), opts).messages == 1
    finally:
        conn = pika.BlockingConnection(pika.URLParameters(RABBITMQ))
        conn.channel().queue_delete(name)
        conn.close()


def test_a_broker_gone_mid_write_is_one_line_naming_the_stream_and_what_was_confirmed() -> None:
    with BrokerProcess() as doomed:
        _declare(doomed.url, "w-doomed", **{"x-queue-type": "stream"})
        opts = WriteOptions.parse({"uri": doomed.url, "routing_key": "w-doomed"})

        def rows() -> Iterator[dict[str, Any]]:
            for i in range(20_000):
                if i == 10_000:  # the publisher has sent (and had confirmed) thousands by now
                    assert doomed.proc is not None
                    doomed.proc.kill()
                    doomed.proc.wait(timeout=30)
                yield {"body": b"x" * 200}

        gone_line = r"^amqpd writer to stream 'w-doomed' at 127\.0\.0\.1:\d+: .*confirmed\)$"
        with pytest.raises(BrokerError, match=gone_line) as gone:
            publish_dicts(rows(), opts)
        assert "\n" not in str(gone.value)
        with pytest.raises(BrokerError, match=r"^amqpd writer to stream 'w-doomed' at .*nothing published"):
            publish_dicts(iter([{"body": b"x"}]), opts)  # no broker at all: refused at once
