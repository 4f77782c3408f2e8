"""What the broker answers to bytes no well-behaved client sends. Built frame by frame on a raw socket.

Tests marked amqpd_only assert amqpd's deliberately better answer where RabbitMQ 3.10 only drops the
socket, waits, or accepts without limit; each says which. They are skipped when the suite targets
another broker (AMQPD_TEST_TARGET_URL).
After every test a fresh pika client must still work: bad input on one connection never hurts the broker.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pamqp.frame
import pika
import pytest
from pamqp import body, commands, header
from raw_amqp import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    PROTOCOL_HEADER,
    Closed,
    RawConnection,
    frame,
    method_payload,
    shortstr,
)

MAX_MESSAGE_SIZE = 128 * 1024 * 1024


@pytest.fixture(autouse=True)
def broker_still_serves_clients(amqpd_url: str) -> Iterator[None]:
    yield
    conn = pika.BlockingConnection(pika.URLParameters(amqpd_url))
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"still alive")
        assert ch.basic_get(q, auto_ack=True)[2] == b"still alive"
    finally:
        conn.close()


@pytest.fixture
def raw(amqpd_url: str) -> Iterator[RawConnection]:
    with RawConnection(amqpd_url) as conn:
        yield conn


@pytest.fixture
def opened(raw: RawConnection) -> RawConnection:
    """A raw connection after the handshake, with channel 1 open."""
    raw.handshake()
    raw.open_channel(1)
    return raw


def _publish_frames(queue: str, body_size: int, channel: int = 1) -> bytes:
    return b"".join(
        (
            pamqp.frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), channel),
            pamqp.frame.marshal(header.ContentHeader(0, body_size, commands.Basic.Properties()), channel),
        )
    )


# --- protocol header ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "greeting",
    [
        b"AMQP\x00\x00\x09\x02",  # another 0-9 revision
        b"AMQP\x01\x01\x00\x0a",  # AMQP 0-10
        b"AMQP\x00\x01\x00\x00",  # AMQP 1.0
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        bytes.fromhex("160301002e0100002a0303") + bytes(32),  # start of a TLS ClientHello
        b"\x00" * 8,
    ],
    ids=["amqp-0-9-2", "amqp-0-10", "amqp-1-0", "http", "tls", "zeros"],
)
def test_bad_protocol_header_gets_the_supported_header_and_close(raw: RawConnection, greeting: bytes) -> None:
    raw.send(greeting)
    assert raw.read_until_eof() == PROTOCOL_HEADER


# --- frame level -------------------------------------------------------------------------------------------


def test_frame_larger_than_frame_max_closes_connection_with_501(opened: RawConnection) -> None:
    frame_max = opened.tune.frame_max
    # Only the header of the frame: the size alone is enough to refuse it.
    opened.send(struct.pack(">BHI", FRAME_METHOD, 1, frame_max + 1024))
    close = opened.expect_connection_close()
    assert close.reply_code == 501


def test_frame_larger_than_a_smaller_negotiated_frame_max_closes_connection_with_501(raw: RawConnection) -> None:
    raw.handshake(frame_max=4096)
    raw.open_channel(1)
    big = frame(FRAME_METHOD, 1, method_payload(50, 10, b"\x00\x00" + shortstr(b"q" * 200) + b"\x00" + b"\x00" * 8000))
    raw.send(big[:7])
    assert raw.expect_connection_close().reply_code == 501


def test_bad_frame_end_byte_closes_connection_with_501(opened: RawConnection) -> None:
    payload = method_payload(60, 10, struct.pack(">IHB", 0, 10, 0))  # basic.qos prefetch_count=10
    opened.send(frame(FRAME_METHOD, 1, payload, end=b"\x00"))
    assert opened.expect_connection_close().reply_code == 501


def test_unknown_frame_type_closes_connection_with_501(opened: RawConnection) -> None:
    opened.send(frame(9, 1, b"\x00\x00\x00\x00"))
    assert opened.expect_connection_close().reply_code == 501


def test_body_frame_without_header_closes_connection_with_505(opened: RawConnection) -> None:
    opened.send(frame(FRAME_BODY, 1, b"orphan body"))
    assert opened.expect_connection_close().reply_code == 505


def test_header_frame_without_publish_closes_connection_with_505(opened: RawConnection) -> None:
    opened.send(frame(FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, 5, 0)))
    assert opened.expect_connection_close().reply_code == 505


def test_method_while_body_incomplete_closes_connection_with_505(opened: RawConnection) -> None:
    q = opened.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk).queue
    opened.send(_publish_frames(q, 10))
    opened.send(frame(FRAME_BODY, 1, b"12345"))  # 5 of 10 bytes
    opened.send_frame(commands.Basic.Publish(exchange="", routing_key=q), 1)
    assert opened.expect_connection_close().reply_code == 505


def test_frames_split_into_single_bytes_are_reassembled(opened: RawConnection) -> None:
    q = opened.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk).queue
    data = _publish_frames(q, 5) + frame(FRAME_BODY, 1, b"hello")
    for i in range(len(data)):
        opened.send(data[i : i + 1])
    opened.send_frame(commands.Basic.Get(queue=q, no_ack=True), 1)
    opened.expect(commands.Basic.GetOk, 1)
    opened.expect(header.ContentHeader, 1)
    assert opened.expect(body.ContentBody, 1).value == b"hello"


def test_pipelined_frames_in_one_write_are_all_processed(opened: RawConnection) -> None:
    q = opened.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk).queue
    data = b"".join(_publish_frames(q, 1) + frame(FRAME_BODY, 1, bytes([65 + i])) for i in range(50))
    opened.send(data)
    # basic.get, not a passive declare: RabbitMQ may answer a declare before earlier publishes land.
    got = []
    for _ in range(50):
        opened.send_frame(commands.Basic.Get(queue=q, no_ack=True), 1)
        opened.expect(commands.Basic.GetOk, 1)
        opened.expect(header.ContentHeader, 1)
        got.append(opened.expect(body.ContentBody, 1).value)
    assert got == [bytes([65 + i]) for i in range(50)]


def test_heartbeat_frame_on_a_channel_closes_connection_with_505(opened: RawConnection) -> None:
    # The spec says 501 for this; RabbitMQ answers 505 UNEXPECTED_FRAME, and clients see RabbitMQ's answer.
    opened.send(frame(8, 1, b""))
    assert opened.expect_connection_close().reply_code == 505


@pytest.mark.amqpd_only
def test_body_declared_over_max_message_size_is_refused_at_once(opened: RawConnection) -> None:
    # RabbitMQ 3.10 waits for the whole body (forever for 2^62 bytes) and refuses it with 406 only after
    # reading it; amqpd refuses with the same 406 channel error as soon as the content header arrives.
    q = opened.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk).queue
    opened.send(_publish_frames(q, 2**62))
    assert opened.expect_channel_close(1).reply_code == 406
    opened.open_channel(2)  # the connection lives on
    assert opened.call(commands.Queue.Declare(queue=q, passive=True), commands.Queue.DeclareOk, 2).message_count == 0


@pytest.mark.amqpd_only
def test_body_just_over_max_message_size_is_refused_at_once(opened: RawConnection) -> None:
    # As above, at the limit itself: max_message_size + 1 bytes declared, none sent.
    q = opened.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk).queue
    opened.send(_publish_frames(q, MAX_MESSAGE_SIZE + 1))
    assert opened.expect_channel_close(1).reply_code == 406


# --- method level ------------------------------------------------------------------------------------------


@pytest.mark.amqpd_only
@pytest.mark.parametrize("class_id,method_id", [(60, 999), (999, 10), (50, 77)])
def test_unknown_class_or_method_closes_connection_with_540_naming_them(
    opened: RawConnection, class_id: int, method_id: int
) -> None:
    # RabbitMQ 3.10 drops the socket without a reply.
    opened.send(frame(FRAME_METHOD, 1, method_payload(class_id, method_id, b"\x00" * 8)))
    close = opened.expect_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (540, class_id, method_id)


@pytest.mark.amqpd_only
def test_bad_field_table_type_tag_closes_connection_with_502(opened: RawConnection) -> None:
    # RabbitMQ 3.10 drops the socket without a reply.
    table = shortstr(b"x-bad") + b"Q" + b"\x00" * 4  # 'Q' is no field type
    args = b"\x00\x00" + shortstr(b"it-bad-table") + b"\x00" + struct.pack(">I", len(table)) + table
    opened.send(frame(FRAME_METHOD, 1, method_payload(50, 10, args)))  # queue.declare
    close = opened.expect_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (502, 50, 10)


def test_string_longer_than_its_frame_closes_connection_with_501(opened: RawConnection) -> None:
    # RabbitMQ 3.10 answers 501 FRAME_ERROR "cannot decode" with the method's ids.
    args = b"\x00\x00" + b"\xc8" + b"short"  # queue.declare whose queue name claims 200 bytes
    opened.send(frame(FRAME_METHOD, 1, method_payload(50, 10, args)))
    close = opened.expect_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (501, 50, 10)


def test_table_longer_than_its_frame_closes_connection_with_501(opened: RawConnection) -> None:
    # As above for a field table whose length runs past the frame.
    args = b"\x00\x00" + shortstr(b"it-q") + b"\x00" + struct.pack(">I", 100000) + b"abc"
    opened.send(frame(FRAME_METHOD, 1, method_payload(50, 10, args)))
    close = opened.expect_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (501, 50, 10)


@pytest.mark.amqpd_only
def test_field_table_nested_too_deep_closes_connection_with_502(opened: RawConnection) -> None:
    # A deliberate difference: RabbitMQ 3.10 accepts (and stores) this 200-deep table; amqpd refuses tables
    # nested deeper than max_table_depth (64) rather than recurse without bound.
    table = b""
    for _ in range(200):
        table = shortstr(b"n") + b"F" + struct.pack(">I", len(table)) + table
    args = b"\x00\x00" + shortstr(b"it-deep") + b"\x00" + struct.pack(">I", len(table)) + table
    opened.send(frame(FRAME_METHOD, 1, method_payload(50, 10, args)))
    close = opened.expect_connection_close()
    assert close.reply_code == 502


def test_method_on_unopened_channel_closes_connection_with_504(opened: RawConnection) -> None:
    opened.send_frame(commands.Queue.Declare(queue="", exclusive=True), 7)
    assert opened.expect_connection_close().reply_code == 504


def test_opening_an_open_channel_closes_connection_with_504(opened: RawConnection) -> None:
    opened.send_frame(commands.Channel.Open(), 1)
    assert opened.expect_connection_close().reply_code == 504


def test_channel_flow_off_closes_connection_with_540(opened: RawConnection) -> None:
    opened.send_frame(commands.Channel.Flow(active=False), 1)
    assert opened.expect_connection_close().reply_code == 540


def test_more_channels_than_channel_max_closes_connection_with_530(raw: RawConnection) -> None:
    raw.handshake()
    channel_max = raw.tune.channel_max
    assert channel_max == 2047
    opens = b"".join(pamqp.frame.marshal(commands.Channel.Open(), ch) for ch in range(1, channel_max + 2))
    raw.send(opens)
    opened: set[int] = set()
    while True:  # open-oks may come in any order (RabbitMQ opens channels concurrently)
        ch, value = raw.read_frame()
        if isinstance(value, commands.Connection.Close):
            raw.send_frame(commands.Connection.CloseOk())
            break
        assert isinstance(value, commands.Channel.OpenOk), value
        opened.add(ch)
    assert value.reply_code == 530
    assert opened == set(range(1, channel_max + 1))


# --- timeouts ----------------------------------------------------------------------------------------------


def test_silent_client_after_missed_heartbeats_is_disconnected(raw: RawConnection) -> None:
    raw.handshake(heartbeat=1)
    raw.open_channel(1)
    # Say nothing (not even heartbeats): the broker must give up within a few intervals.
    with pytest.raises(Closed):
        while True:
            raw.read_frame(timeout=20)


def test_client_that_never_finishes_the_handshake_is_disconnected(raw: RawConnection) -> None:
    raw.send(PROTOCOL_HEADER)
    raw.expect(commands.Connection.Start, 0)
    # handshake_timeout is 10 s on both brokers; RabbitMQ just closes the socket.
    raw.read_until_eof(timeout=30)
