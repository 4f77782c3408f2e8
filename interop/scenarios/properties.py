"""Message content: every basic property and every field-table type round-trips; empty and multi-MiB
bodies (larger than frame_max, so split over body frames)."""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

import pika
from pamqp import commands as C

from interop import pika_tools as pt
from interop.rawamqp import RawConnection
from interop.registry import add, scenario
from interop.scope import Scope, pika_session

PROPERTIES: dict[str, Any] = {
    "content_type": "application/json",
    "content_encoding": "gzip",
    "headers": {"a": 1, "b": "two"},
    "delivery_mode": 2,
    "priority": 7,
    "correlation_id": "corr-1",
    "reply_to": "reply.queue",
    "expiration": "60000",
    "message_id": "msg-1",
    "timestamp": 1700000000,
    "type": "order.created",
    "user_id": "guest",
    "app_id": "interop",
    "cluster_id": "cluster-x",
}


def _roundtrip(props: dict[str, Any], body: bytes = b"payload") -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            q = s.queue("q")
            ch.queue_declare(q)
            ch.basic_publish("", q, body, pika.BasicProperties(**props))
            via_get = pt.get_all(ch, q, with_props=True)
            ch.basic_publish("", q, body, pika.BasicProperties(**props))
            via_consume = [pt.msg_obs(m, p, b, with_props=True) for m, p, b in pt.consume_n(ch, q, 1)]
            return {"get": via_get, "consume": via_consume}

    return run


for _k, _v in PROPERTIES.items():
    add("properties", f"property_{_k}", _roundtrip({_k: _v}))
add("properties", "all_properties_together", _roundtrip(PROPERTIES))
add("properties", "no_properties", _roundtrip({}))
add("properties", "empty_strings", _roundtrip({"content_type": "", "message_id": "", "headers": {}}))


@scenario("properties")
def user_id_mismatch_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)

        def op() -> Any:
            ch.basic_publish("", q, b"x", pika.BasicProperties(user_id="someone-else"))
            return ch.queue_declare(q, passive=True)

        return pt.expect_close(op)


# The table types pika chooses for Python values, as pika reads them back.
PIKA_HEADERS = {
    "str": "text",
    "unicode": "žluťoučký 🐇",
    "int": 42,
    "negative": -7,
    "big": 2**40,
    "bool": True,
    "false": False,
    "none": None,
    "decimal": decimal.Decimal("3.14"),
    "timestamp": datetime.datetime(2024, 1, 2, 3, 4, 5),
    "bytes": b"\x00\x01\xff",
    "list": [1, "two", [3]],
    "nested": {"inner": {"deep": 1}},
    "empty_list": [],
    "empty_table": {},
}
add("properties", "pika_header_value_types", _roundtrip({"headers": PIKA_HEADERS}))


# --- raw field-table types ------------------------------------------------------------------------


def _shortstr(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b)]) + b


def _longstr(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def _table(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(_shortstr(k) + v for k, v in entries)
    return struct.pack(">I", len(body)) + body


def _array(values: list[bytes]) -> bytes:
    body = b"".join(values)
    return struct.pack(">I", len(body)) + body


FIELD_VALUES: dict[str, bytes] = {
    "t_bool": b"t\x01",
    "b_int8": b"b" + struct.pack(">b", -5),
    "B_uint8": b"B" + struct.pack(">B", 250),
    "s_int16": b"s" + struct.pack(">h", -30000),
    "u_uint16": b"u" + struct.pack(">H", 60000),
    "I_int32": b"I" + struct.pack(">i", -2_000_000_000),
    "i_uint32": b"i" + struct.pack(">I", 4_000_000_000),
    "l_int64": b"l" + struct.pack(">q", -(2**62)),
    "f_float": b"f" + struct.pack(">f", 1.25),
    "d_double": b"d" + struct.pack(">d", -2.5e300),
    "D_decimal": b"D" + struct.pack(">Bi", 2, 31415),
    "S_longstr": b"S" + _longstr("long ✓".encode()),
    "T_timestamp": b"T" + struct.pack(">Q", 1_700_000_000),
    "F_table": b"F" + _table([("k", b"S" + _longstr(b"v")), ("n", b"I" + struct.pack(">i", 1))]),
    "A_array": b"A" + _array([b"I" + struct.pack(">i", 1), b"S" + _longstr(b"x"), b"t\x00"]),
    "V_void": b"V",
    "x_bytes": b"x" + _longstr(b"\x00\xff\x10"),
    "F_empty_table": b"F" + _table([]),
    "A_empty_array": b"A" + _array([]),
    "F_nested_3_deep": b"F" + _table([("a", b"F" + _table([("b", b"F" + _table([("c", b"V")]))]))]),
}


def _payload(c: RawConnection) -> bytes:
    r = c.recv_raw_frame()
    if isinstance(r, str):
        raise ConnectionError(f"{r} while reading a basic.get reply")
    return r[2]


def raw_get(c: RawConnection, ch: int, q: str) -> dict[str, Any]:
    """basic.get on a raw connection: the content header's property bytes and the body, undecoded."""
    c.send(ch, C.Basic.Get(queue=q, no_ack=True))
    payload = _payload(c)
    method = struct.unpack(">HH", payload[:4])
    if method != (60, 71):
        return {"method": list(method)}
    hdr = _payload(c)
    size = struct.unpack(">Q", hdr[4:12])[0]
    body = b""
    while len(body) < size:
        body += _payload(c)
    return {"props_hex": hdr[12:].hex(), "body_size": size, "body": pt.body_obs(body)}


def _raw_table_case(value: bytes) -> Any:
    def run(url: str) -> Any:
        with Scope(url) as s, RawConnection(url) as c:
            q = s.queue("q")
            c.handshake()
            c.open_channel(1)
            c.rpc(1, C.Queue.Declare(queue=q))
            props = struct.pack(">H", 0x2000) + _table([("v", value)])
            c.publish(1, "", q, b"t", props_raw=props)
            got = raw_get(c, 1, q)
            got["sent_props_hex"] = props.hex()
            got["unchanged"] = got.get("props_hex") == props.hex()
            return got

    return run


for _n, _v in FIELD_VALUES.items():
    add("fieldtables", _n, _raw_table_case(_v))


@scenario("fieldtables")
def all_types_in_one_table_via_headers_exchange(url: str) -> Any:
    """Through a headers exchange the broker must read the table to route, yet forward it unchanged."""
    with Scope(url) as s, RawConnection(url) as c:
        q, x = s.queue("q"), s.exchange("h")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Exchange.Declare(exchange=x, exchange_type="headers"))
        c.rpc(1, C.Queue.Declare(queue=q))
        c.rpc(1, C.Queue.Bind(queue=q, exchange=x, arguments={"x-match": "any", "S_longstr": "long ✓"}))
        props = struct.pack(">H", 0x2000) + _table(list(FIELD_VALUES.items()))
        c.publish(1, x, "", b"t", props_raw=props)
        got = raw_get(c, 1, q)
        got["unchanged"] = got.get("props_hex") == props.hex()
        return got


# --- bodies ---------------------------------------------------------------------------------------


def _body_case(size: int, frame_max: int | None = None) -> Any:
    def run(url: str) -> Any:
        body = bytes((i * 7 + 3) % 256 for i in range(min(size, 4096))) * (size // 4096 + 1)
        body = body[:size]
        kw = {"frame_max": frame_max} if frame_max else {}
        with pika_session(url, **kw) as (s, conn, ch):
            q = s.queue("q")
            ch.queue_declare(q)
            ch.basic_publish("", q, body)
            got = pt.get_all(ch, q)
            ch.basic_publish("", q, body)
            consumed = [pt.body_obs(b) for _, _, b in pt.consume_n(ch, q, 1, timeout=10)]
            return {"get": got, "consume": consumed, "equal": bool(got) and got[0]["body"] == pt.body_obs(body)}

    return run


add("bodies", "empty_body", _body_case(0))
add("bodies", "one_byte", _body_case(1))
add("bodies", "exactly_frame_payload", _body_case(131072 - 8))
add("bodies", "one_over_frame_payload", _body_case(131072 - 7))
add("bodies", "three_mib", _body_case(3 * 1024 * 1024), timeout=40)
add("bodies", "one_mib_small_frames", _body_case(1024 * 1024, frame_max=4096), timeout=40)
add("bodies", "body_of_min_frame_max", _body_case(10000, frame_max=4096))


@scenario("bodies", timeout=40)
def raw_publish_16mib_in_max_frames(url: str) -> Any:
    with Scope(url) as s, RawConnection(url, timeout=20) as c:
        q = s.queue("q")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Queue.Declare(queue=q))
        body = b"0123456789abcdef" * (1024 * 1024)
        c.publish(1, "", q, body)
        got = raw_get(c, 1, q)
        return {"body_size": got.get("body_size"), "body": got.get("body"), "expect": pt.body_obs(body)}


@scenario("bodies")
def binary_body_all_byte_values(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        body = bytes(range(256)) * 4
        ch.basic_publish("", q, body)
        m, p, b = ch.basic_get(q, auto_ack=True)
        return {"same": b == body, "len": len(b)}


@scenario("bodies")
def body_frames_interleaved_between_channels(url: str) -> Any:
    """Two channels publish split bodies whose frames interleave on the wire."""
    with Scope(url) as s, RawConnection(url) as c:
        q = s.queue("q")
        c.handshake(frame_max=4096)
        c.open_channel(1)
        c.open_channel(2)
        c.rpc(1, C.Queue.Declare(queue=q))
        frames: dict[int, list[bytes]] = {}
        for ch, fill in ((1, b"a"), (2, b"b")):
            body = fill * 10000
            out = pika_free_frames(ch, q, body, 4096)
            frames[ch] = out
        wire = b""
        for pair in zip(frames[1], frames[2], strict=False):
            wire += b"".join(pair)
        c.send_raw(wire)
        a = raw_get(c, 1, q)
        b = raw_get(c, 1, q)
        # Which channel's message lands first is not defined across channels: RabbitMQ runs each channel in
        # its own process and was seen to enqueue either first. Both must arrive whole; order is not compared.
        return sorted([a, b], key=repr)


def pika_free_frames(ch: int, q: str, body: bytes, frame_max: int) -> list[bytes]:
    from pamqp import frame as F

    frames = [F.marshal(C.Basic.Publish(exchange="", routing_key=q), ch)]
    hdr = struct.pack(">HHQ", 60, 0, len(body)) + b"\0\0"
    frames.append(struct.pack(">BHI", 2, ch, len(hdr)) + hdr + b"\xce")
    step = frame_max - 8
    for i in range(0, len(body), step):
        part = body[i : i + step]
        frames.append(struct.pack(">BHI", 3, ch, len(part)) + part + b"\xce")
    return frames
