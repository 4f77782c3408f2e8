"""Issue 10 with real clients over a socket: what pika, aio-pika and aiormq's own test suites rely on.

Every test here passes against RabbitMQ 3.10 too (AMQPD_TEST_TARGET_URL), except the listen-address ones,
which start an amqpd of their own.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from collections.abc import Callable

import aio_pika
import aiormq
import pika
import pytest
from aio_pika.patterns import RPC
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel
from raw_amqp import RawConnection

from amqpd.protocol.methods import build, encode_method
from amqpd.testing import BrokerProcess

WAIT = 20.0
Name = Callable[[str], str]


def shortstr(raw: bytes) -> bytes:
    return bytes((len(raw),)) + raw


def raw_publish(channel: int, exchange: bytes, routing_key: bytes, body: bytes, props: bytes = b"\0\0") -> bytes:
    method = struct.pack(">HHH", 60, 40, 0) + shortstr(exchange) + shortstr(routing_key) + b"\0"
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    out = struct.pack(">BHI", 1, channel, len(method)) + method + b"\xce"
    out += struct.pack(">BHI", 2, channel, len(header)) + header + b"\xce"
    return out + struct.pack(">BHI", 3, channel, len(body)) + body + b"\xce"


def read_raw_frame(raw: RawConnection) -> tuple[int, int, bytes]:
    head = raw.read_raw(7)
    ftype, channel, size = struct.unpack(">BHI", head)
    payload = raw.read_raw(size + 1)[:-1]
    return ftype, channel, payload


@pytest.fixture
def raw(amqpd_url: str) -> RawConnection:
    conn = RawConnection(amqpd_url)
    conn.handshake()
    conn.open_channel(1)
    return conn


# -- 1. update-secret ----------------------------------------------------------------------------------------


def test_pika_update_secret_keeps_the_connection(conn: pika.BlockingConnection) -> None:
    conn.update_secret("new secret", "token refresh")  # pika raises if the broker closes instead
    ch = conn.channel()
    assert ch.queue_declare("", exclusive=True).method.queue


def test_aiormq_update_secret_is_answered_ok(amqpd_url: str) -> None:
    async def scenario() -> object:
        conn = await aiormq.connect(amqpd_url)
        try:
            ok = await conn.update_secret("guest", reason="refresh", timeout=5)
            ch = await conn.channel()
            await ch.queue_declare("", exclusive=True)
            return ok
        finally:
            await conn.close()

    assert isinstance(asyncio.run(asyncio.wait_for(scenario(), WAIT)), commands.Connection.UpdateSecretOk)


# -- 2. aio-pika's RPC pattern shuts down cleanly ---------------------------------------------------------------


def test_aio_pika_rpc_call_and_close(amqpd_url: str) -> None:
    async def scenario() -> int:
        async with await aio_pika.connect(amqpd_url) as conn:
            channel = await conn.channel()
            rpc = await RPC.create(channel)

            async def double(*, x: int) -> int:
                return 2 * x

            method = f"it.double.{uuid.uuid4().hex[:8]}"
            await rpc.register(method, double, auto_delete=True)
            result = await rpc.proxy.__getattr__(method)(x=21)
            await rpc.close()  # cancels its consumer (the auto-delete queue goes), then unbinds it
            return int(result)

    assert asyncio.run(asyncio.wait_for(scenario(), WAIT)) == 42


def test_queue_unbind_after_the_queue_is_gone_is_ok(ch: BlockingChannel, name: Name) -> None:
    q, x = name("q"), name("x")
    ch.exchange_declare(x, "direct", auto_delete=True)
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    ch.queue_delete(q)
    ch.queue_unbind(q, x, "k")  # pika raises ChannelClosedByBroker on a 404
    ch.exchange_delete(x)
    ch.queue_unbind(q, x, "k")


# -- 3. channel ids --------------------------------------------------------------------------------------------


def test_aiormq_opens_channel_65535(amqpd_url: str) -> None:
    async def scenario() -> int:
        conn = await aiormq.connect(amqpd_url)
        try:
            ch = await conn.channel(channel_number=65535)
            ok = await ch.queue_declare("", exclusive=True)
            return ch.number if ok.queue else -1
        finally:
            await conn.close()

    assert asyncio.run(asyncio.wait_for(scenario(), WAIT)) == 65535


def test_channel_ids_above_a_small_channel_max_open_while_few_are_open(amqpd_url: str) -> None:
    with RawConnection(amqpd_url) as raw:
        raw.handshake(channel_max=3)
        for channel in (65535, 4, 1000):
            raw.open_channel(channel)
        raw.send_frame(commands.Channel.Open(), 5)
        close = raw.expect_connection_close()
        assert (close.reply_code, close.class_id, close.method_id) == (530, 0, 0)


# -- 4. properties pass through --------------------------------------------------------------------------------


def test_a_timestamp_past_year_9999_with_user_id_reaches_the_consumer(ch: BlockingChannel, name: Name) -> None:
    q = name("q")
    ch.queue_declare(q, exclusive=True)
    ch.confirm_delivery()
    props = pika.BasicProperties(timestamp=2**64 - 1, user_id="guest", message_id="m", headers={"h": 1})
    ch.basic_publish("", q, b"t", props)
    _method, got, body = ch.basic_get(q, auto_ack=True)
    assert body == b"t"
    assert (got.timestamp, got.user_id, got.message_id, got.headers) == (2**64 - 1, "guest", "m", {"h": 1})


# -- 5. closes that cross ---------------------------------------------------------------------------------------


def test_crossed_channel_closes_leave_the_connection_working(raw: RawConnection, name: Name) -> None:
    raw.open_channel(2)
    # The client closes channel 1 right after a publish the broker refuses: the two closes cross.
    raw.send(
        raw_publish(1, name("missing").encode(), b"k", b"x")
        + encode_method(1, commands.Channel.Close(200, "bye", 0, 0))
    )
    seen = [raw.expect(commands.Channel.Close, 1), raw.expect(commands.Channel.CloseOk, 1)]
    assert seen[0].reply_code == 404
    raw.send_frame(commands.Channel.CloseOk(), 1)  # the answer to the broker's close, late
    ok = raw.call(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk, channel=2)
    assert ok.queue
    raw.open_channel(1)


# -- 6. IPv6 loopback ---------------------------------------------------------------------------------------------


def _connects(host: str, port: int) -> bool:
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port, socket_timeout=5))
    ok = conn.is_open
    conn.close()
    return ok


def test_by_default_both_loopbacks_are_served_on_one_port() -> None:
    with BrokerProcess(hosts=()) as broker:
        assert broker.host == "127.0.0.1"
        assert _connects("127.0.0.1", broker.port)
        assert _connects("::1", broker.port)
        assert _connects("localhost", broker.port)


def test_every_interface_with_0_0_0_0_and_double_colon() -> None:
    with BrokerProcess(hosts=("0.0.0.0", "::")) as broker:
        assert _connects("127.0.0.1", broker.port)
        assert _connects("::1", broker.port)


def test_an_address_that_is_not_ours_is_one_line_and_exit_1() -> None:
    broker = BrokerProcess(hosts=("127.0.0.1", "192.0.2.1"))
    with pytest.raises(RuntimeError, match="cannot listen on 192.0.2.1"):
        broker.start(timeout=15)
    assert broker.proc is not None and broker.proc.wait(10) == 1
    broker.close()


# -- 7. prefetch per consumer and per channel ---------------------------------------------------------------


def test_per_consumer_and_per_channel_prefetch_together(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    queues = [name(f"q{i}") for i in range(3)]
    for q in queues:
        ch.queue_declare(q, exclusive=True)
        for _ in range(5):
            ch.basic_publish("", q, b"m")
    ch.basic_qos(prefetch_count=2, global_qos=False)
    ch.basic_qos(prefetch_count=4, global_qos=True)
    got: list[str] = []
    for q in queues:
        ch.basic_consume(q, lambda _c, m, _p, _b: got.append(m.consumer_tag))
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        conn.process_data_events(0.1)
    assert len(got) == 4
    assert max(got.count(tag) for tag in set(got)) == 2


# -- 8. smaller differences --------------------------------------------------------------------------------------


def test_access_request_gets_request_ok(raw: RawConnection) -> None:
    payload = struct.pack(">HH", 30, 10) + shortstr(b"/data") + b"\x1e"
    raw.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    assert read_raw_frame(raw) == (1, 1, b"\x00\x1e\x00\x0b\x00\x01")


def test_invalid_utf8_routing_key_is_routed_and_confirmed(raw: RawConnection, name: Name) -> None:
    q = name("q")
    raw.call(commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    raw.call(commands.Queue.Bind(queue=q, exchange="amq.topic", routing_key="#"), commands.Queue.BindOk)
    raw.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.send(raw_publish(1, b"amq.topic", b"\xff\xfe", b"body"))
    raw.expect(commands.Basic.Ack, 1)
    raw.send_frame(commands.Basic.Get(queue=q, no_ack=True), 1)
    ftype, _ch, payload = read_raw_frame(raw)
    assert ftype == 1 and payload[4:].find(shortstr(b"amq.topic") + shortstr(b"\xff\xfe")) > 0


def test_heartbeat_with_a_payload_is_a_501_connection_error(raw: RawConnection) -> None:
    raw.send(struct.pack(">BHI", 8, 0, 3) + b"abc" + b"\xce")
    assert raw.expect_connection_close().reply_code == 501


def test_a_truncated_property_list_is_a_541_connection_error(raw: RawConnection, name: Name) -> None:
    q = name("q")
    raw.call(commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    raw.send(raw_publish(1, b"", q.encode(), b"x", b"\x80\x00\x05ab"))
    close = raw.expect_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (541, 0, 0)


@pytest.mark.parametrize("mode", [0, 3])
def test_delivery_mode_other_than_1_or_2_is_406(raw: RawConnection, name: Name, mode: int) -> None:
    raw.send(raw_publish(1, b"", name("q").encode(), b"x", b"\x10\x00" + bytes((mode,))))
    close = raw.expect_channel_close(1)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 40)
    assert close.reply_text == f"PRECONDITION_FAILED - invalid message: {{delivery_mode_unknown,{mode}}}"


def test_quorum_queue_deliveries_count_returns_in_x_delivery_count(ch: BlockingChannel, name: Name) -> None:
    q = name("qq")
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    try:
        ch.confirm_delivery()
        ch.basic_publish("", q, b"x", pika.BasicProperties(headers={"b": 1, "a": 2}))
        counts = []
        for _ in range(3):
            method, props, _body = ch.basic_get(q)
            counts.append(props.headers["x-delivery-count"])
            assert list(props.headers) == ["a", "b", "x-delivery-count"]
            ch.basic_nack(method.delivery_tag, requeue=True)
        assert counts == [0, 1, 2]
    finally:
        ch.queue_delete(q)


def test_declaring_the_reply_to_pseudo_queue_reports_one_consumer(raw: RawConnection) -> None:
    for passive in (True, False):
        raw.send(
            encode_method(
                1, build(commands.Queue.Declare, 0, "amq.rabbitmq.reply-to", passive, False, False, False, False, {})
            )
        )
        ok = raw.expect(commands.Queue.DeclareOk, 1)
        assert (ok.queue, ok.message_count, ok.consumer_count) == ("amq.rabbitmq.reply-to", 0, 1)


def test_a_live_reply_to_address_exists_with_one_consumer(
    ch: BlockingChannel, connect: Callable[[], pika.BlockingConnection]
) -> None:
    ch.basic_consume("amq.rabbitmq.reply-to", lambda *_: None, auto_ack=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"x", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    _m, props, _b = ch.basic_get(q, auto_ack=True)
    # Asked from another connection: RabbitMQ 3.10's requesting channel crashes (541) asking itself.
    ok = connect().channel().queue_declare(props.reply_to, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (props.reply_to, 0, 1)


def test_ipv6_socket_family_is_available_here() -> None:
    # The listen-address tests above need an IPv6 loopback; say so plainly if the machine has none.
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
