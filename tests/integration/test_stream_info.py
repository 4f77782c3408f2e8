"""A stream's facts over AMQP (x-amqpd-stream-info, amqpd/broker/streams/info.py): what a reader that has only
the AMQP address learns with a plain client. amqpd only (RabbitMQ ignores the argument)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from amqpd.testing import BrokerProcess

INFO_TYPE = "application/vnd.amqpd.stream-info+json"


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess() as b:
        yield b


def _declare(url: str, name: str, **arguments: Any) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **arguments})
    conn.close()


def _publish(url: str, name: str, bodies: list[bytes]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body)
    conn.close()


def _info(url: str, name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """The info delivery's content type and facts, acked; then checks that nothing else comes."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got = []
    for event in ch.consume(name, arguments={"x-amqpd-stream-info": True, **arguments}, inactivity_timeout=0.5):
        if event == (None, None, None):
            break
        method, properties, body = event
        ch.basic_ack(method.delivery_tag)  # an ack of it is accepted: the channel stays open
        got.append((method.routing_key, properties.content_type, json.loads(body)))
    ch.cancel()
    conn.close()
    assert len(got) == 1, got  # one delivery, then nothing: the consumer never reads the stream
    key, content_type, facts = got[0]
    assert key == name
    return content_type, facts


def test_a_stream_tells_its_first_and_next_offsets_and_retention(broker: BrokerProcess) -> None:
    _declare(broker.url, "info-offsets", **{"x-max-age": "7D", "x-max-length-bytes": 10_000_000})
    _publish(broker.url, "info-offsets", [b"a", b"b", b"c"])
    content_type, facts = _info(broker.url, "info-offsets")
    assert content_type == INFO_TYPE
    assert (facts["first_offset"], facts["end_offset"]) == (0, 3)
    assert facts["max_age_ms"] == 7 * 86_400_000
    assert facts["max_length_bytes"] == 10_000_000
    assert isinstance(facts["first_timestamp"], int)
    assert "offset_at" not in facts


def test_an_empty_stream_has_equal_first_and_next_offsets(broker: BrokerProcess) -> None:
    _declare(broker.url, "info-empty")
    _, facts = _info(broker.url, "info-empty")
    assert (facts["first_offset"], facts["end_offset"], facts["first_timestamp"]) == (0, 0, None)


def test_a_time_maps_to_the_first_offset_appended_at_or_after_it(broker: BrokerProcess) -> None:
    _declare(broker.url, "info-time")
    _publish(broker.url, "info-time", [b"old1", b"old2"])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    _publish(broker.url, "info-time", [b"new"])
    assert _info(broker.url, "info-time", **{"x-amqpd-offset-at": cut})[1]["offset_at"] == 2
    assert _info(broker.url, "info-time", **{"x-amqpd-offset-at": cut + 3_600_000})[1]["offset_at"] == 3
    assert _info(broker.url, "info-time", **{"x-amqpd-offset-at": 0})[1]["offset_at"] == 0


@pytest.mark.parametrize(
    ("declare", "arguments", "text"),
    [
        ({}, {"x-amqpd-stream-info": True}, "is not a stream"),
        ({"x-queue-type": "stream"}, {"x-amqpd-stream-info": "yes"}, "x-amqpd-stream-info"),
        ({"x-queue-type": "stream"}, {"x-amqpd-stream-info": True, "x-amqpd-offset-at": "soon"}, "x-amqpd-offset-at"),
    ],
)
def test_a_request_it_cannot_answer_is_refused_with_406(
    broker: BrokerProcess, declare: dict[str, Any], arguments: dict[str, Any], text: str
) -> None:
    name = f"info-bad-{len(text)}-{len(declare)}"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments=declare)
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        ch.basic_consume(name, lambda *a: None, arguments=arguments)
        conn.process_data_events(time_limit=2)
    assert closed.value.reply_code == 406
    assert text in closed.value.reply_text
    conn.close()
