"""Message bodies of every size and every basic property, as pika publishes and receives them."""

from __future__ import annotations

import decimal
from datetime import UTC, datetime

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

MiB = 1024 * 1024


def _roundtrip(ch: BlockingChannel, body: bytes, props: pika.BasicProperties | None = None):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, body, props)
    method, rprops, rbody = ch.basic_get(q, auto_ack=True)
    assert method is not None
    return rprops, rbody


@pytest.mark.parametrize(
    "size",
    [0, 1, 131072 - 8, 131072 - 7, 131072, 1 * MiB, 5 * MiB],
    ids=["empty", "1B", "frame-payload", "frame-payload+1", "128KiB", "1MiB", "5MiB"],
)
def test_body_of_any_size_arrives_intact(ch: BlockingChannel, size: int) -> None:
    body = bytes(i % 251 for i in range(size))  # not periodic in the frame size
    _, got = _roundtrip(ch, body)
    assert len(got) == size
    assert got == body


def test_large_bodies_to_a_consumer_arrive_intact_and_in_order(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    bodies = [bytes([n]) * (MiB + n) for n in range(4)]
    for body in bodies:
        ch.basic_publish("", q, body)
    got: list[bytes] = []
    ch.basic_consume(q, lambda _c, _m, _p, b: got.append(b), auto_ack=True)
    while len(got) < len(bodies):
        ch.connection.process_data_events(time_limit=1)
    assert got == bodies


def test_all_basic_properties_round_trip(ch: BlockingChannel) -> None:
    stamp = datetime(2024, 5, 17, 12, 30, 45, tzinfo=UTC)
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers={
            "str": "text é",
            "bytes": b"\x00\x01\xff",
            "int": 42,
            "negative": -7,
            "long": 2**40,
            "bool_true": True,
            "bool_false": False,
            "decimal": decimal.Decimal("3.14"),
            "timestamp": stamp,
            "void": None,
            "nested": {"level2": {"level3": [1, "two", {"four": 4}], "empty": {}}},
            "array": [1, "a", True, None, [2, 3], {"k": "v"}],
            "empty_array": [],
        },
        delivery_mode=2,
        priority=9,
        correlation_id="corr-1",
        reply_to="reply.queue",
        expiration="60000",
        message_id="msg-1",
        timestamp=1700000000,
        type="order.created",
        user_id="guest",
        app_id="amqpd-tests",
        cluster_id="",
    )
    got, body = _roundtrip(ch, b"{}", props)
    assert body == b"{}"
    for field in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(got, field) == getattr(props, field), field
    expected_headers = dict(props.headers)
    assert got.headers == expected_headers


def test_message_without_properties_has_none_set(ch: BlockingChannel) -> None:
    got, body = _roundtrip(ch, b"bare")
    assert body == b"bare"
    assert (got.headers, got.content_type, got.delivery_mode, got.message_id) == (None, None, None, None)


def test_user_id_other_than_the_connection_user_is_refused_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", q, b"x", pika.BasicProperties(user_id="someone-else"))
    assert info.value.reply_code == 406


def test_cc_header_routes_to_extra_keys_and_bcc_is_removed(ch: BlockingChannel) -> None:
    main, cc, bcc = (ch.queue_declare("", exclusive=True).method.queue for _ in range(3))
    ch.basic_publish("", main, b"m", pika.BasicProperties(headers={"CC": [cc], "BCC": [bcc]}))
    results = {}
    for label, q in (("main", main), ("cc", cc), ("bcc", bcc)):
        method, props, body = ch.basic_get(q, auto_ack=True)
        results[label] = (body, method.routing_key, props.headers)
    assert results == {
        "main": (b"m", main, {"CC": [cc]}),
        "cc": (b"m", main, {"CC": [cc]}),
        "bcc": (b"m", main, {"CC": [cc]}),
    }


def test_expired_message_is_not_delivered(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True, arguments={"x-message-ttl": 0}).method.queue
    ch.basic_publish("", q, b"gone")
    assert ch.basic_get(q, auto_ack=True) == (None, None, None)


def test_priority_queue_delivers_higher_priority_first(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-priority": 5}).method.queue
    ch.confirm_delivery()
    for body, prio in ((b"low", 1), (b"high", 5), (b"none", None), (b"mid", 3)):
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    got = [ch.basic_get(q, auto_ack=True)[2] for _ in range(4)]
    assert got == [b"high", b"mid", b"low", b"none"]


def test_timestamp_beyond_32_bits_survives_rewrites_of_the_properties(ch: BlockingChannel) -> None:
    # Some clients put milliseconds in the timestamp property (e.g. JavaScript's Date.now()). RabbitMQ keeps
    # the 64-bit value as sent, also when it rewrites the properties: dead-lettering (x-death) and BCC.
    millis = 1_700_000_000_123
    dlx_target = ch.queue_declare("", exclusive=True).method.queue
    q = ch.queue_declare(
        "", exclusive=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlx_target}
    ).method.queue
    bcc = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"m", pika.BasicProperties(timestamp=millis, headers={"BCC": [bcc]}))
    method, props, _ = ch.basic_get(bcc, auto_ack=True)
    assert props.timestamp == millis
    method, props, _ = ch.basic_get(q, auto_ack=False)
    assert props.timestamp == millis
    ch.basic_reject(method.delivery_tag, requeue=False)
    for _ in range(200):  # dead-lettering happens in the background
        method, props, _ = ch.basic_get(dlx_target, auto_ack=True)
        if method is not None:
            break
        ch.connection.sleep(0.05)
    assert method is not None, "dead-lettered message never arrived"
    assert props.timestamp == millis
    assert props.headers["x-death"][0]["reason"] == "rejected"
