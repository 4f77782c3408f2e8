"""Error codes of RABBITMQ-FACTS.md that the other areas don't already provoke: connection errors
(503/530/540/504/501/505/502), the channel errors of acks, and the frame-level faults.

Where RabbitMQ 3.10 just drops the socket (unknown class/method, bad table type, oversized string) or
waits forever (a 2^62-byte body), amqpd intentionally answers with a proper close: those scenarios use
`compare=` to assert the documented difference instead of equality."""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands as C
from pamqp import frame as F

from interop import pika_tools as pt
from interop.rawamqp import RawConnection, close_of, until_close
from interop.registry import scenario
from interop.scope import Scope, pika_session


def _raw(url: str, **hs: Any) -> RawConnection:
    c = RawConnection(url)
    c.handshake(**hs)
    c.open_channel(1)
    return c


def _shortstr(v: str) -> bytes:
    b = v.encode()
    return bytes([len(b)]) + b


def _method_frame(ch: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, ch, len(payload)) + payload + b"\xce"


# --- channel errors -------------------------------------------------------------------------------


@scenario("errors")
def publish_to_missing_exchange_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):

        def op() -> Any:
            ch.basic_publish(s.name("missing"), "k", b"x")
            return ch.queue_declare("", exclusive=True)

        return pt.expect_close(op)


@scenario("errors")
def channel_usable_after_other_channel_error(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        bad = conn.channel()
        err = pt.expect_close(lambda: bad.queue_declare(s.name("missing"), passive=True))
        ch.basic_publish("", q, b"still fine")
        return {"error": err, "other_channel": pt.bodies(ch, q), "conn_open": conn.is_open}


@scenario("errors")
def nack_unknown_tag_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):

        def op() -> Any:
            ch.basic_nack(7)
            return ch.queue_declare("", exclusive=True)

        return pt.expect_close(op)


@scenario("errors")
def reject_unknown_tag_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):

        def op() -> Any:
            ch.basic_reject(7)
            return ch.queue_declare("", exclusive=True)

        return pt.expect_close(op)


@scenario("errors")
def ack_tag_zero_single_406(url: str) -> Any:
    with _raw(url) as c:
        c.send(1, C.Basic.Ack(delivery_tag=0, multiple=False))
        return until_close(c)


@scenario("errors")
def declare_default_exchange_name(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare("", "direct", passive=True))


@scenario("errors")
def queue_bind_empty_name_uses_last_declared(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q, x = s.queue("q"), s.exchange("x")
        c.rpc(1, C.Exchange.Declare(exchange=x, exchange_type="fanout"))
        c.rpc(1, C.Queue.Declare(queue=q))
        bind = c.rpc(1, C.Queue.Bind(queue="", exchange=x))
        c.rpc(1, C.Confirm.Select())
        c.publish(1, x, "", b"via-last-declared")
        c.recv_method()  # the confirm: declare-ok's count is settled only for confirmed publishes
        ok = c.rpc(1, C.Queue.Declare(queue=q, passive=True))
        return {"bind": getattr(bind, "name", bind), "message_count": getattr(ok, "message_count", ok)}


@scenario("errors")
def queue_bind_empty_name_without_declare(url: str) -> Any:
    with _raw(url) as c:
        c.send(1, C.Queue.Bind(queue="", exchange="amq.fanout"))
        return until_close(c)


# --- connection errors (hard errors) -------------------------------------------------------------


@scenario("errors")
def qos_prefetch_size_540(url: str) -> Any:
    with _raw(url) as c:
        c.send(1, C.Basic.Qos(prefetch_size=1000, prefetch_count=0))
        return until_close(c)


@scenario("errors")
def recover_requeue_false_540(url: str) -> Any:
    with _raw(url) as c:
        c.send(1, C.Basic.Recover(requeue=False))
        return until_close(c)


@scenario("errors")
def recover_async_ignored(url: str) -> Any:
    """The deprecated basic.recover-async gets no reply and no error from RabbitMQ."""
    with _raw(url) as c:
        c.send(1, C.Basic.RecoverAsync(requeue=True))
        return until_close(c, timeout=1.0)


@scenario("errors")
def channel_flow_inactive_540(url: str) -> Any:
    with _raw(url) as c:
        c.send(1, C.Channel.Flow(active=False))
        return until_close(c)


@scenario("errors")
def channel_flow_active_ok(url: str) -> Any:
    with _raw(url) as c:
        r = c.rpc(1, C.Channel.Flow(active=True))
        return {"reply": getattr(r, "name", r), "active": getattr(r, "active", None)}


@scenario("errors")
def open_2048th_channel_530(url: str) -> Any:
    with RawConnection(url, timeout=10) as c:
        c.handshake()
        wire = b"".join(F.marshal(C.Channel.Open(), n) for n in range(1, 2048))
        c.send_raw(wire)
        opened = 0
        while opened < 2047:
            r = c.recv_method()
            if isinstance(r, str) or r[1].name != "Channel.OpenOk":
                return {"after": opened, "got": r if isinstance(r, str) else r[1].name}
            opened += 1
        c.send(2048, C.Channel.Open())
        return {"opened": opened, "next": until_close(c)}


@scenario("errors")
def channel_id_above_channel_max(url: str) -> Any:
    """channel_max limits the count of open channels, not their ids (aiormq opens channel 65535 on purpose)."""
    with RawConnection(url) as c:
        c.handshake(channel_max=3)
        opened = [close_of(c.open_channel(n)) for n in (65535, 4, 1000)]
        c.send(1000, C.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
        closed = c.recv_method()
        reopened = c.open_channel(7)
        c.send(8, C.Channel.Open())
        return {"opened": opened, "closed": close_of(closed), "reopened": close_of(reopened), "fourth": until_close(c)}


@scenario("errors")
def frame_over_frame_max_501(url: str) -> Any:
    with Scope(url) as s, _raw(url, frame_max=4096) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        body = b"x" * 9000
        c.send(1, C.Basic.Publish(exchange="", routing_key=q))
        hdr = struct.pack(">HHQ", 60, 0, len(body)) + b"\0\0"
        c.send_raw(struct.pack(">BHI", 2, 1, len(hdr)) + hdr + b"\xce")
        c.send_raw(struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce")
        return until_close(c)


@scenario("errors")
def frame_at_frame_max_ok(url: str) -> Any:
    with Scope(url) as s, _raw(url, frame_max=4096) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        c.rpc(1, C.Confirm.Select())
        body = b"x" * (4096 - 8)
        c.publish(1, "", q, body, frame_max=4096)
        confirm = c.recv_method()
        r = c.rpc(1, C.Queue.Declare(queue=q, passive=True))
        return {
            "confirm": getattr(confirm[1], "name", None) if isinstance(confirm, tuple) else confirm,
            "message_count": getattr(r, "message_count", r),
        }


@scenario("errors")
def bad_frame_end_501(url: str) -> Any:
    with _raw(url) as c:
        frame = bytearray(F.marshal(C.Queue.Declare(queue="", exclusive=True), 1))
        frame[-1] = 0x00
        c.send_raw(bytes(frame))
        return until_close(c)


@scenario("errors")
def unknown_frame_type_501(url: str) -> Any:
    with _raw(url) as c:
        c.send_raw(struct.pack(">BHI", 9, 1, 4) + b"abcd" + b"\xce")
        return until_close(c)


@scenario("errors")
def body_before_header_505(url: str) -> Any:
    with _raw(url) as c:
        c.send_raw(struct.pack(">BHI", 3, 1, 3) + b"abc" + b"\xce")
        return until_close(c)


@scenario("errors")
def header_without_publish_505(url: str) -> Any:
    with _raw(url) as c:
        hdr = struct.pack(">HHQ", 60, 0, 3) + b"\0\0"
        c.send_raw(struct.pack(">BHI", 2, 1, len(hdr)) + hdr + b"\xce")
        return until_close(c)


@scenario("errors")
def method_while_body_incomplete_505(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        c.send(1, C.Basic.Publish(exchange="", routing_key=q))
        hdr = struct.pack(">HHQ", 60, 0, 10) + b"\0\0"
        c.send_raw(struct.pack(">BHI", 2, 1, len(hdr)) + hdr + b"\xce")
        c.send_raw(struct.pack(">BHI", 3, 1, 3) + b"abc" + b"\xce")
        c.send(1, C.Queue.Declare(queue=q, passive=True))
        return until_close(c)


@scenario("errors")
def publish_then_method_instead_of_header_505(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        c.send(1, C.Basic.Publish(exchange="", routing_key=q))
        c.send(1, C.Queue.Declare(queue=q, passive=True))
        return until_close(c)


@scenario("errors")
def heartbeat_on_nonzero_channel_505(url: str) -> Any:
    with _raw(url) as c:
        c.send_raw(struct.pack(">BHI", 8, 1, 0) + b"\xce")
        return until_close(c)


@scenario("errors")
def client_connection_close_gets_close_ok(url: str) -> Any:
    with _raw(url) as c:
        r = c.rpc(0, C.Connection.Close(reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0))
        return {"reply": getattr(r, "name", r)}


@scenario("errors")
def channel_close_then_reopen_same_id(url: str) -> Any:
    with _raw(url) as c:
        r1 = c.rpc(1, C.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        r2 = c.open_channel(1)
        return [getattr(r1, "name", r1), r2 if isinstance(r2, str) else r2[1].name]


# --- documented improvements over RabbitMQ 3.10 --------------------------------------------------

_CODE_NAMES = {501: "FRAME_ERROR", 502: "SYNTAX_ERROR", 540: "NOT_IMPLEMENTED"}


def _expect_close_instead_of_drop(code: int | tuple[int, ...], text: str, ids: tuple[int, int] | None) -> Any:
    """RabbitMQ drops the socket ("EOF"); the documented better answer is connection.close `code` (one of)."""
    codes = (code,) if isinstance(code, int) else code

    def compare(ref: Any, tgt: Any) -> str | None:
        if ref not in ("EOF", "TIMEOUT"):
            return f"RabbitMQ no longer drops the socket here (saw {ref!r}): update RABBITMQ-FACTS.md"
        if not isinstance(tgt, dict) or tgt.get("code") not in codes or tgt.get("method") != "Connection.Close":
            return f"expected connection.close {text} (RabbitMQ just drops the socket), got {tgt!r}"
        if tgt.get("text") != _CODE_NAMES.get(tgt["code"], text):
            return f"expected reply text to start with {_CODE_NAMES.get(tgt['code'])}, got {tgt.get('text')!r}"
        if ids is not None and (tgt.get("class_id"), tgt.get("method_id")) != ids:
            return f"expected class/method ids {ids}, got {(tgt.get('class_id'), tgt.get('method_id'))}"
        return None

    return compare


@scenario("errors", compare=_expect_close_instead_of_drop(540, "NOT_IMPLEMENTED", (99, 10)))
def unknown_class_id(url: str) -> Any:
    # RabbitMQ 3.10 drops the socket silently; a client then can't tell a bug from a network fault.
    with _raw(url) as c:
        c.send_raw(_method_frame(1, 99, 10))
        return until_close(c)


@scenario("errors", compare=_expect_close_instead_of_drop(540, "NOT_IMPLEMENTED", (50, 99)))
def unknown_method_id(url: str) -> Any:
    # Same as above for a known class (queue) with an unknown method id.
    with _raw(url) as c:
        c.send_raw(_method_frame(1, 50, 99))
        return until_close(c)


@scenario("errors", compare=_expect_close_instead_of_drop(502, "SYNTAX_ERROR", (50, 10)))
def bad_field_table_type_tag(url: str) -> Any:
    # queue.declare whose arguments table holds type tag 'Z': RabbitMQ drops the socket, 502 is better.
    with Scope(url) as s, _raw(url) as c:
        table = b"\x01kZ\x00"
        args = struct.pack(">H", 0) + _shortstr(s.queue("q")) + b"\x00" + struct.pack(">I", len(table)) + table
        c.send_raw(_method_frame(1, 50, 10, args))
        return until_close(c)


@scenario("errors")
def string_longer_than_frame_501(url: str) -> Any:
    """A shortstr claiming 200 bytes in a 7-byte method payload: RabbitMQ 3.10 answers 501 FRAME_ERROR
    with the method's ids (RABBITMQ-FACTS.md says it drops the socket: observed otherwise)."""
    with _raw(url) as c:
        args = struct.pack(">H", 0) + b"\xc8" + b"abc"
        c.send_raw(_method_frame(1, 50, 10, args))
        return until_close(c)


def _refuses_huge_body(ref: Any, tgt: Any) -> str | None:
    # RabbitMQ waits forever for a declared 2^62-byte body; better: refuse when the header arrives.
    if ref != "TIMEOUT":
        return f"RabbitMQ no longer waits for the body here (saw {ref!r}): update RABBITMQ-FACTS.md"
    if not isinstance(tgt, dict) or "code" not in tgt:
        return f"expected an immediate close refusing a 2^62-byte body (RabbitMQ waits forever), got {tgt!r}"
    return None


@scenario("errors", compare=_refuses_huge_body)
def declared_body_of_2_pow_62(url: str) -> Any:
    with Scope(url) as s, _raw(url) as c:
        q = s.queue("q")
        c.rpc(1, C.Queue.Declare(queue=q))
        c.send(1, C.Basic.Publish(exchange="", routing_key=q))
        hdr = struct.pack(">HHQ", 60, 0, 2**62) + b"\0\0"
        c.send_raw(struct.pack(">BHI", 2, 1, len(hdr)) + hdr + b"\xce")
        return until_close(c, timeout=2.0)


@scenario("errors")
def table_length_over_frame_501(url: str) -> Any:
    """queue.declare whose arguments table claims 100000 bytes in a short frame: 501 with the ids."""
    with Scope(url) as s, _raw(url) as c:
        args = struct.pack(">H", 0) + _shortstr(s.queue("q")) + b"\x00" + struct.pack(">I", 100000) + b"abc"
        c.send_raw(_method_frame(1, 50, 10, args))
        return until_close(c)


@scenario("errors", compare=_expect_close_instead_of_drop((502, 501), "SYNTAX_ERROR", (50, 10)))
def longstr_in_table_over_frame(url: str) -> Any:
    # A well-formed arguments table whose longstr claims 99999 bytes: RabbitMQ 3.10 decodes the table
    # lazily and drops the socket; better is a close with the method's ids: 502 (or 501, as RabbitMQ
    # itself answers for a string running past the frame at the method level).
    with Scope(url) as s, _raw(url) as c:
        table = b"\x01kS" + struct.pack(">I", 99999) + b"ab"
        args = struct.pack(">H", 0) + _shortstr(s.queue("q")) + b"\x00" + struct.pack(">I", len(table)) + table
        c.send_raw(_method_frame(1, 50, 10, args))
        return until_close(c)
