"""What client libraries' own test suites rely on (issue 10): token refresh, unbinding what is gone, closes
that cross, property values pamqp cannot decode, the IPv6 loopback, and the small differences raw frames
showed (access.request, invalid UTF-8 routing keys, malformed property lists, delivery_mode, quorum
queues' x-delivery-count, declares of the direct reply-to pseudo-queue)."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any
from urllib.parse import urlparse, urlunparse

import aio_pika
import pika
from aio_pika.patterns import RPC
from pamqp import commands as C

from interop import pika_tools as pt
from interop.rawamqp import RawConnection, close_of, until_close
from interop.registry import scenario
from interop.scope import Scope, pika_session

QUORUM = {"x-queue-type": "quorum"}


def _raw(url: str) -> RawConnection:
    c = RawConnection(url)
    c.handshake()
    c.open_channel(1)
    return c


def _shortstr(raw: bytes) -> bytes:
    return bytes((len(raw),)) + raw


def _publish_raw(c: RawConnection, exchange: bytes, routing_key: bytes, body: bytes, props: bytes = b"\0\0") -> None:
    """basic.publish with byte-exact names (pamqp would refuse invalid UTF-8) and encoded properties."""
    method = struct.pack(">HHH", 60, 40, 0) + _shortstr(exchange) + _shortstr(routing_key) + b"\0"
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    c.send_raw(
        struct.pack(">BHI", 1, 1, len(method))
        + method
        + b"\xce"
        + struct.pack(">BHI", 2, 1, len(header))
        + header
        + b"\xce"
        + struct.pack(">BHI", 3, 1, len(body))
        + body
        + b"\xce"
    )


def _raw_get(c: RawConnection, queue: str) -> dict[str, Any]:
    """basic.get (no-ack) of one message, its frames undecoded (pamqp would refuse some property values)."""
    c.send(1, C.Basic.Get(queue=queue, no_ack=True))
    ftype, _ch, method = c.recv_raw_frame()  # type: ignore[misc]
    if method[:4] != b"\x00\x3c\x00\x47":
        return {"not_get_ok": method[:4].hex()}
    _t, _c, header = c.recv_raw_frame()  # type: ignore[misc]
    _t, _c, body = c.recv_raw_frame()  # type: ignore[misc]
    elen = method[13]
    exchange, rest = method[14 : 14 + elen], method[14 + elen :]
    routing_key = rest[1 : 1 + rest[0]]
    return {
        "redelivered": method[12],
        "exchange": exchange.decode(),
        "routing_key_bytes": list(routing_key[:2]),
        "header_hex": header.hex(),
        "body": body.decode(),
    }


# -- 1. connection.update-secret -------------------------------------------------------------------------


@scenario("compat")
def update_secret_raw(url: str) -> Any:
    """Any new secret is accepted for a password user (RabbitMQ asks only expiring backends to check it)."""
    with _raw(url) as c:
        same = close_of(c.rpc(0, C.Connection.UpdateSecret(new_secret="guest", reason="refresh")))
        other = close_of(c.rpc(0, C.Connection.UpdateSecret(new_secret="new secret", reason="no reason")))
        after = close_of(c.rpc(1, C.Queue.Declare(queue="", exclusive=True)))
        return {"same": same, "other": other, "after": after}


@scenario("compat")
def update_secret_pika(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        conn.update_secret("new secret", "token refresh")
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_publish("", q, b"after-refresh")
        return pt.bodies(ch, q)


# -- 2. unbinding what no longer exists -------------------------------------------------------------------


@scenario("compat")
def unbind_of_missing_queue_and_exchange(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q, x = s.queue("q"), s.exchange("x")
        out = {"neither": close_of(c.rpc(1, C.Queue.Unbind(queue=q, exchange=x, routing_key="k")))}
        c.rpc(1, C.Queue.Declare(queue=q))
        out["no_exchange"] = close_of(c.rpc(1, C.Queue.Unbind(queue=q, exchange=x, routing_key="k")))
        c.rpc(1, C.Exchange.Declare(exchange=x, exchange_type="direct"))
        out["no_binding"] = close_of(c.rpc(1, C.Queue.Unbind(queue=q, exchange=x, routing_key="k")))
        c.rpc(1, C.Queue.Delete(queue=q))
        out["no_queue"] = close_of(c.rpc(1, C.Queue.Unbind(queue=q, exchange=x, routing_key="k")))
        out["x_no_dest"] = close_of(c.rpc(1, C.Exchange.Unbind(destination=s.name("d"), source=x, routing_key="k")))
        out["x_no_source"] = close_of(c.rpc(1, C.Exchange.Unbind(destination=x, source=s.name("s"), routing_key="k")))
        return out


@scenario("compat")
def unbind_of_another_connections_exclusive_queue(url: str) -> Any:
    with Scope(url) as s, _raw(url) as owner, _raw(url) as other:
        q = s.name("excl")
        owner.rpc(1, C.Queue.Declare(queue=q, exclusive=True))
        owner.rpc(1, C.Queue.Bind(queue=q, exchange="amq.direct", routing_key="k"))
        unbound = close_of(other.rpc(1, C.Queue.Unbind(queue=q, exchange="amq.direct", routing_key="not-bound")))
        bound = close_of(other.rpc(1, C.Queue.Unbind(queue=q, exchange="amq.direct", routing_key="k")))
        return {"not_bound": unbound, "bound": bound}


@scenario("compat")
def aio_pika_rpc_close(url: str) -> Any:
    """aio-pika's RPC.close() cancels its consumer (the auto-delete queue goes), then unbinds the queue."""

    async def run() -> Any:
        async with await aio_pika.connect(url) as conn:
            rpc = await RPC.create(await conn.channel())

            async def double(*, x: int) -> int:
                return 2 * x

            method = f"interop.double.{time.monotonic_ns()}"
            await rpc.register(method, double, auto_delete=True)
            result = await rpc.proxy.__getattr__(method)(x=21)
            await rpc.close()
            return {"result": result, "closed": True}

    return asyncio.run(asyncio.wait_for(run(), 15))


# -- 4. property values pass through -------------------------------------------------------------------------


@scenario("compat")
def timestamp_past_year_9999_with_user_id(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        c.rpc(1, C.Confirm.Select())
        table = _shortstr(b"ts") + b"T" + b"\xff" * 8
        props = struct.pack(">HI", 0x2000 | 0x0040 | 0x0010, len(table)) + table + b"\xff" * 8 + _shortstr(b"guest")
        _publish_raw(c, b"", q.encode(), b"t", props)
        confirm = close_of(c.recv_method())
        return {"confirm": confirm, "got": _raw_get(c, q)}


# -- 5. closes that cross ----------------------------------------------------------------------------------


@scenario("compat")
def crossed_channel_closes(url: str) -> Any:
    """amqp091-go's TestChannelExceptionWithCloseIssue43: the client's close crosses the broker's 404."""
    with Scope(url) as s, _raw(url) as c:
        c.open_channel(2)
        _publish_raw(c, s.name("missing").encode(), b"k", b"x")
        c.send(1, C.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        seen = sorted(str(close_of(c.recv_method())) for _ in range(2))
        c.send(1, C.Channel.CloseOk())  # the answer it owes the broker's close
        other = close_of(c.rpc(2, C.Queue.Declare(queue="", exclusive=True)))
        reopened = close_of(c.open_channel(1))
        return {"seen": seen, "other_channel": other, "reopened": reopened}


# -- 6. the IPv6 loopback ---------------------------------------------------------------------------------


def _on_ipv6_loopback(url: str) -> str:
    u = urlparse(url)
    return urlunparse(u._replace(netloc=f"{u.username}:{u.password}@[::1]:{u.port or 5672}"))


@scenario("compat")
def connect_over_ipv6_loopback(url: str) -> Any:
    with pika_session(_on_ipv6_loopback(url)) as (s, _conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_publish("", q, b"over ::1")
        return pt.bodies(ch, q)


# -- 7. prefetch per consumer and per channel -------------------------------------------------------------


@scenario("compat")
def prefetch_per_consumer_and_per_channel(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        queues = [s.queue(f"q{i}") for i in range(3)]
        for q in queues:
            ch.queue_declare(q)
            for _ in range(5):
                ch.basic_publish("", q, b"m")
        ch.basic_qos(prefetch_count=2, global_qos=False)
        ch.basic_qos(prefetch_count=4, global_qos=True)
        got: list[str] = []
        for q in queues:
            ch.basic_consume(q, lambda _c, m, _p, _b: got.append(m.routing_key))
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            conn.process_data_events(0.1)
        first = len(got)
        ch.basic_ack(0, multiple=True)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            conn.process_data_events(0.1)
        return {"first": first, "per_consumer_max": max(got[:first].count(q) for q in queues), "after_ack": len(got)}


# -- 8. smaller differences ----------------------------------------------------------------------------------


@scenario("compat")
def access_request_ok(url: str) -> Any:
    with _raw(url) as c:
        payload = struct.pack(">HH", 30, 10) + _shortstr(b"/data") + b"\x1e"
        c.send_raw(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
        r = c.recv_raw_frame()
        return r if isinstance(r, str) else {"type": r[0], "channel": r[1], "payload_hex": r[2].hex()}


@scenario("compat")
def invalid_utf8_routing_key(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        c.rpc(1, C.Queue.Bind(queue=q, exchange="amq.topic", routing_key="#"))
        c.rpc(1, C.Confirm.Select())
        _publish_raw(c, b"amq.topic", b"\xff\xfe.k", b"routed")
        routed = close_of(c.recv_method())
        _publish_raw(c, b"", b"\xc3\x28", b"unroutable")
        unroutable = close_of(c.recv_method())
        return {"routed": routed, "unroutable": unroutable, "got": _raw_get(c, q)}


@scenario("compat")
def exchange_named_in_invalid_utf8_404(url: str) -> Any:
    with _raw(url) as c:
        _publish_raw(c, b"\xff\xfe", b"k", b"x")
        r = c.recv_raw_frame()  # RabbitMQ puts the name's raw bytes in the reply text: pamqp can't decode it
        if isinstance(r, str):
            return r
        ftype, channel, payload = r
        class_id, method_id, code = struct.unpack_from(">HHH", payload)
        text = payload[7 : 7 + payload[6]]
        ids = struct.unpack_from(">HH", payload, 7 + payload[6])
        return {
            "frame": [ftype, channel, class_id, method_id],
            "code": code,
            "ids": list(ids),
            "text": text.split(b" - ")[0].decode(),
        }


@scenario("compat")
def heartbeat_with_payload_501(url: str) -> Any:
    with _raw(url) as c:
        c.send_raw(struct.pack(">BHI", 8, 0, 3) + b"abc" + b"\xce")
        return until_close(c)


def _malformed_properties(props: bytes) -> Any:
    def run(url: str) -> Any:
        with Scope(url) as s, _raw(url) as c:
            q = s.queue("q")
            c.rpc(1, C.Queue.Declare(queue=q))
            _publish_raw(c, b"", q.encode(), b"x", props)
            return until_close(c)

    return run


for _name, _props in [
    ("truncated_shortstr", b"\x80\x00\x05ab"),
    ("truncated_timestamp", b"\x00\x40\x00\x00"),
    ("bytes_after_last_property", b"\x00\x00zz"),
    ("continuation_flag", b"\x00\x01\x00\x00"),
    ("bad_header_table_type", b"\x20\x00\x00\x00\x00\x03\x01aX"),
]:
    scenario("compat", f"malformed_properties_{_name}_541")(_malformed_properties(_props))


@scenario("compat")
def delivery_mode_other_than_1_or_2_406(url: str) -> Any:
    out = {}
    with Scope(url) as s:
        q = s.queue("q")
        for mode in (0, 1, 2, 3, 255):
            with _raw(url) as c:
                c.rpc(1, C.Queue.Declare(queue=q))
                c.rpc(1, C.Confirm.Select())
                _publish_raw(c, b"", q.encode(), b"x", b"\x10\x00" + bytes((mode,)))
                out[str(mode)] = close_of(c.recv_method())
        with _raw(url) as c:
            out["message_count"] = getattr(c.rpc(1, C.Queue.Declare(queue=q, passive=True)), "message_count", None)
    return out


@scenario("compat")
def quorum_queue_x_delivery_count(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q = s.queue("qq")
        c.rpc(1, C.Queue.Declare(queue=q, durable=True, arguments=QUORUM))
        c.rpc(1, C.Confirm.Select())
        table = _shortstr(b"b") + b"I\x00\x00\x00\x01" + _shortstr(b"a") + b"I\x00\x00\x00\x02"
        props = struct.pack(">HI", 0x2000 | 0x0040, len(table)) + table + struct.pack(">Q", 12345)
        _publish_raw(c, b"", q.encode(), b"hello", props)
        c.recv_method()
        gets = []
        for _ in range(3):
            c.send(1, C.Basic.Get(queue=q))
            _t, _c, method = c.recv_raw_frame()  # type: ignore[misc]
            _t, _c, header = c.recv_raw_frame()  # type: ignore[misc]
            c.recv_raw_frame()
            gets.append({"redelivered": method[12], "header_hex": header.hex()})
            c.send(1, C.Basic.Nack(delivery_tag=struct.unpack_from(">Q", method, 4)[0], requeue=True))
        return gets


@scenario("compat")
def quorum_queue_consumer_sees_x_delivery_count(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("qq")
        ch.queue_declare(q, durable=True, arguments=QUORUM)
        ch.confirm_delivery()
        ch.basic_publish("", q, b"x", pika.BasicProperties(headers={"app": "v"}))
        seen: list[Any] = []

        def on_message(c: Any, m: Any, p: Any, _b: bytes) -> None:
            seen.append({"headers": p.headers, "redelivered": m.redelivered})
            c.basic_nack(m.delivery_tag, requeue=len(seen) < 3)

        ch.basic_consume(q, on_message)
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            conn.process_data_events(0.1)
        return seen


@scenario("compat")
def reply_to_pseudo_queue_declare(url: str) -> Any:
    with _raw(url) as c:
        out = {}
        for passive in (True, False):
            r = c.rpc(1, C.Queue.Declare(queue="amq.rabbitmq.reply-to", passive=passive))
            out[f"passive={passive}"] = [
                getattr(r, "name", r),
                getattr(r, "message_count", None),
                getattr(r, "consumer_count", None),
            ]
        return out


@scenario("compat")
def reply_to_address_declare(url: str) -> Any:
    with pika_session(url) as (_s, _conn, ch), pika_session(url) as (_s2, _conn2, other):
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *_: None, auto_ack=True)
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"x", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
        _m, props, _b = ch.basic_get(q, auto_ack=True)
        ok = other.queue_declare(props.reply_to, passive=True).method
        live = {"same_name": ok.queue == props.reply_to, "messages": ok.message_count, "consumers": ok.consumer_count}
        bogus = pt.expect_close(lambda: other.queue_declare("amq.rabbitmq.reply-to.bogus", passive=True))
        return {"live": live, "bogus": bogus}
