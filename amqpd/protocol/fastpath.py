"""Struct codecs for the methods on the per-message path, so no pamqp object is made per message.

Each function here is proven byte-for-byte equal to pamqp in tests/unit/test_fastpath.py.
Payloads are method-frame payloads including the class and method ids.
"""

from __future__ import annotations

import struct

from amqpd import errors

_DELIVER_PREFIX = b"\x00\x3c\x00\x3c"
_GET_OK_PREFIX = b"\x00\x3c\x00\x47"
_ACK_PREFIX = b"\x00\x3c\x00\x50"
_NACK_PREFIX = b"\x00\x3c\x00\x78"
_RETURN_PREFIX = b"\x00\x3c\x00\x32"

_tag_bits = struct.Struct(">QB")
_u64 = struct.Struct(">Q")
_header_fields = struct.Struct(">HHQH")
_frame_head = struct.Struct(">BHI")
_u32 = struct.Struct(">I")
_u16 = struct.Struct(">H")


def shortstr(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogateescape")  # a name read with surrogateescape goes back as sent
    if len(raw) > 255:
        raise errors.syntax_error(f"short string too long: {len(raw)} bytes")
    return bytes((len(raw),)) + raw


_ROUTES: dict[bytes, tuple[str, str, bytes]] = {}
_ROUTES_MAX = 4096


def parse_publish_route(payload: bytes) -> tuple[str, str, bytes, int]:
    """basic.publish → (exchange, routing_key, route, bits): route is the two shortstrs as sent,
    reused verbatim in every basic.deliver of the message.

    Publishers repeat a few destinations: the decoded strings and the route bytes come from a small cache,
    so a million queued messages share them instead of holding a copy each (and skip two decodes)."""
    try:
        elen = payload[6]
        o = 7 + elen
        rend = o + 1 + payload[o]
        route = payload[6:rend]
        known = _ROUTES.get(route)
        if known is None:
            # Names are bytes to RabbitMQ: invalid UTF-8 is kept (as surrogates), never refused.
            known = (
                payload[7:o].decode("utf-8", "surrogateescape"),
                payload[o + 1 : rend].decode("utf-8", "surrogateescape"),
                route,
            )
            if len(_ROUTES) >= _ROUTES_MAX:
                _ROUTES.clear()
            _ROUTES[route] = known
        return known[0], known[1], known[2], payload[rend]
    except (IndexError, UnicodeDecodeError) as exc:
        raise errors.syntax_error(f"malformed basic.publish: {exc}").with_method(60, 40) from None


def parse_publish(payload: bytes) -> tuple[str, str, bool, bool]:
    """basic.publish → (exchange, routing_key, mandatory, immediate)."""
    exchange, routing_key, _route, bits = parse_publish_route(payload)
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def parse_content_header(payload: bytes) -> tuple[int, int, int]:
    """content header → (class_id, body_size, property_flags)."""
    try:
        class_id, _weight, body_size, flags = _header_fields.unpack_from(payload)
    except struct.error:
        raise errors.frame_error("malformed content header") from None
    return class_id, body_size, flags


def encode_deliver(channel: int, ctag: bytes, delivery_tag: int, redelivered: bool, route: bytes) -> bytes:
    """basic.deliver method frame. ctag is an encoded shortstr; route the encoded exchange + routing key."""
    payload = b"".join((_DELIVER_PREFIX, ctag, _tag_bits.pack(delivery_tag, redelivered), route))
    return _frame_head.pack(1, channel, len(payload)) + payload + b"\xce"


def encode_delivery(
    channel: int,
    ctag: bytes,
    delivery_tag: int,
    redelivered: bool,
    route: bytes,
    header: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """basic.deliver with its header and body frames, in one join: the whole per-delivery encoding."""
    if len(body) > frame_max - 8:
        from amqpd.protocol.frames import content_frames

        method = encode_deliver(channel, ctag, delivery_tag, redelivered, route)
        return content_frames(channel, header, body, frame_max, method)
    pack = _frame_head.pack
    parts = [
        pack(1, channel, 13 + len(ctag) + len(route)),
        _DELIVER_PREFIX,
        ctag,
        _tag_bits.pack(delivery_tag, redelivered),
        route,
        b"\xce",
        pack(2, channel, len(header)),
        header,
        b"\xce",
    ]
    if body:
        parts += (pack(3, channel, len(body)), body, b"\xce")
    return b"".join(parts)


def encode_deliveries(
    channel: int, ctag: bytes, first_tag: int, route: bytes, header: bytes, bodies: list[bytes]
) -> bytes:
    """encode_delivery of each body in turn, tags from first_tag on, not redelivered, joined: the deliveries of
    a run of messages that differ only by body (all of one size, at most frame_max - 8)."""
    pack = _frame_head.pack
    head = pack(1, channel, 13 + len(ctag) + len(route)) + _DELIVER_PREFIX + ctag
    # redelivered=0, the route, then the header frame and the body frame's own header: the same for all
    mid = b"".join(
        (b"\x00", route, b"\xce", pack(2, channel, len(header)), header, b"\xce", pack(3, channel, len(bodies[0])))
    )
    tag = _u64.pack
    parts: list[bytes] = []
    for t, body in enumerate(bodies, first_tag):
        parts += (head, tag(t), mid, body, b"\xce")
    return b"".join(parts)


def encode_deliveries_each(
    channel: int, ctag: bytes, first_tag: int, route: bytes, headers: list[bytes], bodies: list[bytes]
) -> bytes:
    """encode_delivery of each (header, body) in turn, tags from first_tag on, not redelivered, joined: the
    deliveries of a group of messages with one route and each its own properties (bodies not empty, each at
    most frame_max - 8)."""
    pack = _frame_head.pack
    head = pack(1, channel, 13 + len(ctag) + len(route)) + _DELIVER_PREFIX + ctag
    after_tag = b"\x00" + route + b"\xce"
    tag = _u64.pack
    parts: list[bytes] = []
    for t, header, body in zip(range(first_tag, first_tag + len(bodies)), headers, bodies, strict=True):
        parts += (head, tag(t), after_tag, pack(2, channel, len(header)), header, b"\xce")
        parts += (pack(3, channel, len(body)), body, b"\xce")
    return b"".join(parts)


def encode_delivery_batch(
    channel: int,
    ctag: bytes,
    first_tag: int,
    items: list[tuple[bool, bytes, bytes, bytes]],
    frame_max: int,
) -> bytes:
    """encode_delivery of each (redelivered, route, header, body) in turn, tags from first_tag on, joined: the
    deliveries a queue hands one consumer at once (Channel.deliver_batch). Bodies above frame_max - 8 are split
    as encode_delivery splits them."""
    # Each fixed stretch in one pack: the method frame up to its route, and each frame end with the next
    # frame's head (the end byte, type, channel, size).
    method = _deliver_head(len(ctag)).pack
    end_then_head = _end_then_head.pack
    method_size = 13 + len(ctag)
    limit = frame_max - 8
    parts: list[bytes] = []
    for tag, (redelivered, route, header, body) in enumerate(items, first_tag):
        if len(body) > limit:
            parts.append(encode_delivery(channel, ctag, tag, redelivered, route, header, body, frame_max))
            continue
        size = len(body)
        parts += (method(1, channel, method_size + len(route), _DELIVER_IDS, ctag, tag, redelivered), route)
        parts += (end_then_head(206, 2, channel, len(header)), header)
        parts += (end_then_head(206, 3, channel, size), body, b"\xce") if size else (b"\xce",)
    return b"".join(parts)


_DELIVER_IDS = 0x003C003C  # class 60, method 60 as one u32 (_DELIVER_PREFIX)
_end_then_head = struct.Struct(">BBHI")  # a frame's end, the next frame's type, channel and size
_DELIVER_HEADS: dict[int, struct.Struct] = {}


def _deliver_head(ctag_size: int) -> struct.Struct:
    """A basic.deliver frame up to its route: frame head, class and method, consumer tag (with its length byte:
    ctag_size counts it), delivery tag and redelivered."""
    head = _DELIVER_HEADS.get(ctag_size)
    if head is None:
        head = _DELIVER_HEADS[ctag_size] = struct.Struct(f">BHII{ctag_size}sQB")
    return head


def encode_get_ok(channel: int, delivery_tag: int, redelivered: bool, route: bytes, message_count: int) -> bytes:
    payload = b"".join((_GET_OK_PREFIX, _tag_bits.pack(delivery_tag, redelivered), route, _u32.pack(message_count)))
    return _frame_head.pack(1, channel, len(payload)) + payload + b"\xce"


def encode_return(channel: int, reply_code: int, reply_text: str, route: bytes) -> bytes:
    payload = b"".join((_RETURN_PREFIX, _u16.pack(reply_code), shortstr(reply_text), route))
    return _frame_head.pack(1, channel, len(payload)) + payload + b"\xce"


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """basic.ack as the server sends it for publisher confirms."""
    return _frame_head.pack(1, channel, 13) + _ACK_PREFIX + _tag_bits.pack(delivery_tag, multiple) + b"\xce"


def encode_nack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    # requeue is set, as in RabbitMQ's nacks (the method's default; publishers ignore it).
    bits = 3 if multiple else 2
    return _frame_head.pack(1, channel, 13) + _NACK_PREFIX + _tag_bits.pack(delivery_tag, bits) + b"\xce"


def parse_tag_bits(payload: bytes, name: str) -> tuple[int, int]:
    """basic.ack / basic.nack / basic.reject → (delivery_tag, bits)."""
    try:
        return _tag_bits.unpack_from(payload, 4)  # type: ignore[return-value]
    except struct.error:
        raise errors.syntax_error(f"malformed {name}") from None
