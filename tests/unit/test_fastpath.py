"""The struct codecs on the per-message path produce and read exactly the bytes pamqp does.

Names are drawn from pamqp's accepted alphabet where pamqp's marshal validates them (it is stricter than
RabbitMQ). tests/unit/test_codec_properties.py covers more of the same ground; this file adds the whole
delivery encoding and the lazily decoded message.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from amqpd import errors
from amqpd.broker.message import Message
from amqpd.protocol import fastpath
from amqpd.protocol.constants import FLAG_EXPIRATION
from amqpd.protocol.fastpath import (
    encode_ack,
    encode_deliver,
    encode_get_ok,
    encode_nack,
    encode_return,
    parse_content_header,
    parse_publish,
    parse_tag_bits,
    shortstr,
)
from amqpd.protocol.properties import _HEADERS, _SHAPES, PropertyScan, checked_header, scan_published

NAME = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@#,/+ ", max_size=40)
TAG = st.integers(0, 2**63 - 1)  # pamqp encodes longlong as signed
CHANNEL = st.integers(0, 65535)
FEW = settings(max_examples=80, deadline=None)


def route(exchange: str, routing_key: str) -> bytes:
    return shortstr(exchange) + shortstr(routing_key)


def payload_of(method: object) -> bytes:
    return frame.marshal(method, 1)[7:-1]


@FEW
@given(CHANNEL, NAME, TAG, st.booleans(), NAME, NAME)
def test_deliver_frame_is_what_pamqp_writes(ch: int, ctag: str, tag: int, redelivered: bool, ex: str, rk: str) -> None:
    expected = frame.marshal(commands.Basic.Deliver(ctag, tag, redelivered, ex, rk), ch)
    assert encode_deliver(ch, shortstr(ctag), tag, redelivered, route(ex, rk)) == expected


@FEW
@given(CHANNEL, TAG, st.booleans(), NAME, NAME, st.integers(0, 2**32 - 1))
def test_get_ok_frame_is_what_pamqp_writes(ch: int, tag: int, redelivered: bool, ex: str, rk: str, count: int) -> None:
    expected = frame.marshal(commands.Basic.GetOk(tag, redelivered, ex, rk, count), ch)
    assert encode_get_ok(ch, tag, redelivered, route(ex, rk), count) == expected


@FEW
@given(CHANNEL, st.sampled_from([312, 313]), NAME, NAME, NAME)
def test_return_frame_is_what_pamqp_writes(ch: int, code: int, text: str, ex: str, rk: str) -> None:
    expected = frame.marshal(commands.Basic.Return(code, text, ex, rk), ch)
    assert encode_return(ch, code, text, route(ex, rk)) == expected


@FEW
@given(CHANNEL, TAG, st.booleans())
def test_confirm_ack_frame_is_what_pamqp_writes(ch: int, tag: int, multiple: bool) -> None:
    assert encode_ack(ch, tag, multiple) == frame.marshal(commands.Basic.Ack(tag, multiple), ch)


@FEW
@given(CHANNEL, TAG, st.booleans())
def test_confirm_nack_frame_is_what_rabbitmq_writes(ch: int, tag: int, multiple: bool) -> None:
    # RabbitMQ sends the basic.nack record's default, requeue=true (bits 0x02 / 0x03).
    assert encode_nack(ch, tag, multiple) == frame.marshal(commands.Basic.Nack(tag, multiple, True), ch)


@FEW
@given(NAME, NAME, st.booleans(), st.booleans())
def test_publish_is_read_as_pamqp_wrote_it(ex: str, rk: str, mandatory: bool, immediate: bool) -> None:
    assert parse_publish(payload_of(commands.Basic.Publish(0, ex, rk, mandatory, immediate))) == (
        ex,
        rk,
        mandatory,
        immediate,
    )


def test_utf8_names_in_a_publish_are_read() -> None:
    raw = b"\x00\x3c\x00\x28\x00\x00" + shortstr("échange") + shortstr("clé-ü") + b"\x01"
    assert parse_publish(raw) == ("échange", "clé-ü", True, False)


@pytest.mark.parametrize("cut", range(6, 13))
def test_truncated_publish_is_a_syntax_error(cut: int) -> None:
    raw = payload_of(commands.Basic.Publish(0, "ex", "rk"))
    with pytest.raises(errors.ConnectionError) as info:
        parse_publish(raw[:cut])
    assert (info.value.code, info.value.class_id, info.value.method_id) == (502, 60, 40)


@FEW
@given(TAG, st.booleans(), st.booleans())
def test_ack_nack_reject_tags_and_bits_are_read_as_pamqp_wrote_them(tag: int, multiple: bool, requeue: bool) -> None:
    assert parse_tag_bits(payload_of(commands.Basic.Ack(tag, multiple)), "basic.ack") == (tag, int(multiple))
    nack = parse_tag_bits(payload_of(commands.Basic.Nack(tag, multiple, requeue)), "basic.nack")
    assert nack == (tag, int(multiple) | (2 if requeue else 0))
    assert parse_tag_bits(payload_of(commands.Basic.Reject(tag, requeue)), "basic.reject") == (tag, int(requeue))


def test_truncated_ack_is_a_syntax_error() -> None:
    with pytest.raises(errors.ConnectionError) as info:
        parse_tag_bits(payload_of(commands.Basic.Ack(1))[:8], "basic.ack")
    assert info.value.code == 502


# -- content headers and properties -----------------------------------------------------------------

header_values = st.one_of(st.text(max_size=20), st.integers(-(2**31), 2**31 - 1), st.booleans())
properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | NAME,
    content_encoding=st.none() | NAME,
    headers=st.none() | st.dictionaries(st.text("abcxyz-", min_size=1, max_size=8), header_values, max_size=4),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | NAME,
    reply_to=st.none() | NAME,
    expiration=st.none() | st.integers(0, 10**9).map(str),
    message_id=st.none() | NAME,
    app_id=st.none() | NAME,
)


def header_payload(body_size: int, props: commands.Basic.Properties) -> bytes:
    return frame.marshal(header.ContentHeader(0, body_size, props), 1)[7:-1]


@FEW
@given(st.integers(0, 2**62), properties)
def test_content_header_fields_are_read_as_pamqp_wrote_them(body_size: int, props: commands.Basic.Properties) -> None:
    raw = header_payload(body_size, props)
    class_id, size, flags = parse_content_header(raw)
    assert (class_id, size) == (60, body_size)
    assert flags == int.from_bytes(raw[12:14], "big")


@FEW
@given(properties)
def test_property_scan_finds_what_pamqp_decodes(props: commands.Basic.Properties) -> None:
    raw = header_payload(3, props)
    _, _, decoded = frame.unmarshal(frame.marshal(header.ContentHeader(0, 3, props), 1))
    scan = PropertyScan(raw, parse_content_header(raw)[2])
    p = decoded.properties
    assert scan.delivery_mode == p.delivery_mode
    assert scan.priority == p.priority
    assert scan.expiration == p.expiration
    assert (scan.headers_raw is None) == (p.headers is None)


@FEW
@given(properties)
def test_message_sees_the_published_properties(props: commands.Basic.Properties) -> None:
    raw = header_payload(2, props)
    msg = Message("ex", "rk", route("ex", "rk"), raw, b"hi", parse_content_header(raw)[2])
    assert msg.persistent == (props.delivery_mode == 2)
    assert msg.priority == props.priority
    assert msg.ttl_ms == (int(props.expiration) if props.expiration is not None else None)
    assert msg.headers == props.headers
    assert msg.header == raw  # forwarded to consumers verbatim


def test_truncated_headers_table_is_a_syntax_error() -> None:
    raw = header_payload(0, commands.Basic.Properties(headers={"a": "bcd"}))
    with pytest.raises(errors.ConnectionError) as info:
        PropertyScan(raw[:-2], parse_content_header(raw)[2])
    assert info.value.code == 502


def test_truncated_expiration_is_a_syntax_error() -> None:
    raw = header_payload(0, commands.Basic.Properties(content_type="text/plain", expiration="100"))
    with pytest.raises(errors.ConnectionError) as info:
        PropertyScan(raw[:-2], parse_content_header(raw)[2])
    assert info.value.code == 502


@pytest.mark.parametrize("expiration", ["-1", "abc", "1.5", " 10"])
def test_invalid_expiration_is_refused_with_406(expiration: str) -> None:
    raw = header_payload(0, commands.Basic.Properties(expiration=expiration))
    with pytest.raises(errors.ChannelError) as info:
        Message("", "q", route("", "q"), raw, b"", parse_content_header(raw)[2])
    assert info.value.code == 406


# -- the whole delivery ------------------------------------------------------------------------------

encode_delivery = fastpath.encode_delivery


@FEW
@given(
    CHANNEL,
    NAME,
    TAG,
    st.booleans(),
    NAME,
    NAME,
    properties,
    st.binary(max_size=9000),
    st.sampled_from([4096, 8192, 131072]),
)
def test_whole_delivery_is_what_pamqp_writes(
    ch: int,
    ctag: str,
    tag: int,
    redelivered: bool,
    ex: str,
    rk: str,
    props: commands.Basic.Properties,
    data: bytes,
    frame_max: int,
) -> None:
    hdr = header_payload(len(data), props)
    expected = [
        frame.marshal(commands.Basic.Deliver(ctag, tag, redelivered, ex, rk), ch),
        frame.marshal(header.ContentHeader(0, len(data), props), ch),
    ]
    step = frame_max - 8
    expected += [frame.marshal(body.ContentBody(data[i : i + step]), ch) for i in range(0, len(data), step)]
    got = encode_delivery(ch, shortstr(ctag), tag, redelivered, route(ex, rk), hdr, data, frame_max)
    assert got == b"".join(expected)


@FEW
@given(
    CHANNEL,
    NAME,
    st.integers(1, 2**63 - 100),
    NAME,
    NAME,
    properties,
    st.integers(1, 4000),
    st.lists(st.integers(0, 255), min_size=1, max_size=6),
)
def test_deliveries_of_a_run_are_each_delivery_in_turn(
    ch: int,
    ctag: str,
    first: int,
    ex: str,
    rk: str,
    props: commands.Basic.Properties,
    size: int,
    fills: list[int],
) -> None:
    bodies = [bytes([f]) * size for f in fills]
    hdr = header_payload(size, props)
    expected = b"".join(
        fastpath.encode_delivery(ch, shortstr(ctag), first + i, False, route(ex, rk), hdr, b, 131072)
        for i, b in enumerate(bodies)
    )
    assert fastpath.encode_deliveries(ch, shortstr(ctag), first, route(ex, rk), hdr, bodies) == expected


@given(
    CHANNEL,
    NAME,
    st.integers(1, 2**63 - 100),
    st.lists(
        st.tuples(st.booleans(), NAME, NAME, properties, st.integers(0, 5000), st.integers(0, 255)),
        min_size=1,
        max_size=5,
    ),
)
def test_a_batch_of_deliveries_is_each_delivery_in_turn(
    ch: int, ctag: str, first: int, items: list[tuple[bool, str, str, commands.Basic.Properties, int, int]]
) -> None:
    """Each its own route, header, body (empty, or beyond one frame at frame_max 4096) and redelivered flag."""
    encoded = [
        (again, route(ex, rk), header_payload(size, props), bytes([f]) * size)
        for again, ex, rk, props, size, f in items
    ]
    expected = b"".join(
        fastpath.encode_delivery(ch, shortstr(ctag), first + i, again, r, hdr, body, 4096)
        for i, (again, r, hdr, body) in enumerate(encoded)
    )
    assert fastpath.encode_delivery_batch(ch, shortstr(ctag), first, encoded, 4096) == expected


def _read_one_by_one(hdr: bytes) -> tuple[int, int, int, bytes, tuple] | None:
    """What the single path reads of a published header (parse_content_header, checked_header, PropertyScan)."""
    try:
        class_id, body_size, flags = fastpath.parse_content_header(hdr)
        checked = checked_header(hdr)
        scan = PropertyScan(hdr, flags)
    except errors.AMQPError:
        return None
    return class_id, body_size, flags, checked, (scan.delivery_mode, scan.priority, scan.headers_raw)


def _read_in_one_walk(hdr: bytes) -> tuple[int, int, int, bytes, tuple] | None:
    got = scan_published(hdr, FLAG_EXPIRATION)
    if got is None:
        return None
    class_id, body_size, flags, checked, scan = got
    return class_id, body_size, flags, checked, (scan.delivery_mode, scan.priority, scan.headers_raw)


@settings(max_examples=400, deadline=None)
@given(
    properties,
    st.dictionaries(st.text("abcxyz-", min_size=1, max_size=8), header_values, min_size=1, max_size=4),
    st.integers(0, 2**40),
    st.integers(0, 400),
    st.integers(0, 255),
    st.sampled_from(["none", "cut", "byte", "trailing"]),
)
def test_one_walk_reads_a_published_header_as_the_single_path_does(
    props: commands.Basic.Properties, table: dict, size: int, at: int, value: int, damage: str
) -> None:
    """scan_published against parse_content_header + checked_header + PropertyScan, on headers as pamqp writes
    them and on damaged ones (cut short, a byte changed, a byte too many): the same fields, or refused by both."""
    props.expiration = None  # skipped by the one walk: the single path reads it
    if at % 3:
        props.headers = table
    hdr = header_payload(size, props)
    i = at % len(hdr)
    hdr = {
        "none": hdr,
        "cut": hdr[:i],
        "byte": hdr[:i] + bytes([value]) + hdr[i + 1 :],
        "trailing": hdr + bytes([value]),
    }[damage]
    _HEADERS.clear()  # each reads the header as never seen before (a header seen is not checked again)
    _SHAPES.clear()  # nor a header of the same shape
    one_walk = _read_in_one_walk(hdr)
    _HEADERS.clear()
    if one_walk is None:
        # refused here: either the single path refuses it too, or it has a flag this walk leaves to that path
        single = _read_one_by_one(hdr)
        assert single is None or single[2] & (FLAG_EXPIRATION | 1)
    else:
        assert one_walk == _read_one_by_one(hdr)


@settings(max_examples=400, deadline=None)
@given(
    properties,
    st.dictionaries(
        st.text("abcxyz-", min_size=1, max_size=8),
        header_values | st.dictionaries(st.text("ab", min_size=1, max_size=2), header_values, max_size=2),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 400),
    st.integers(0, 255),
)
def test_a_header_shaped_as_one_checked_before_is_read_as_the_single_path_does(
    props: commands.Basic.Properties, table: dict, at: int, value: int
) -> None:
    """scan_published learns where a checked header's lengths and type tags lie, and reads a later header of the
    same flags and length from there when its bytes there are equal (publishers whose ids change per message).
    A later header with any one byte changed (a length, a type tag, a value) is read as the single path reads
    it, or refused as that path refuses it."""
    props.expiration = None  # skipped by the one walk: the single path reads it
    if at % 3:
        props.headers = table
    first = header_payload(1000, props)
    _HEADERS.clear()
    _SHAPES.clear()
    assert _read_in_one_walk(first) == _read_one_by_one(first)
    i = 12 + at % (len(first) - 12)  # the property flags and after
    later = first[:i] + bytes([value]) + first[i + 1 :]
    _HEADERS.clear()  # short headers are known by their bytes: each is read as a header not seen before
    one_walk = _read_in_one_walk(later)
    _HEADERS.clear()
    if one_walk is None:
        single = _read_one_by_one(later)
        assert single is None or single[2] & (FLAG_EXPIRATION | 1)
    else:
        assert one_walk == _read_one_by_one(later)


def test_headers_that_differ_only_in_their_values_are_each_read_whole() -> None:
    """The common case the shapes are for: ids and a header value of the same length, each message its own."""
    _HEADERS.clear()
    _SHAPES.clear()
    for n in range(3):
        props = commands.Basic.Properties(
            content_type="application/json",
            headers={"x-request-id": f"req-{n:04}"},
            delivery_mode=2,
            priority=n,
            message_id=f"msg-{n:04}",
        )
        hdr = header_payload(100 + n, props)
        assert _read_in_one_walk(hdr) == _read_one_by_one(hdr)
        table = b"\x0cx-request-idS\x00\x00\x00\x08" + f"req-{n:04}".encode()
        assert _read_in_one_walk(hdr)[4] == (2, n, len(table).to_bytes(4, "big") + table)
    assert len(_SHAPES) == 1


def test_a_large_headers_table_leaves_no_shape() -> None:
    """A shape keeps every length and type tag of its header: one with a large table is not kept (memory)."""
    _SHAPES.clear()
    hdr = header_payload(10, commands.Basic.Properties(headers={f"k{i:02}": i for i in range(40)}))
    assert _read_in_one_walk(hdr) == _read_one_by_one(hdr)
    assert not _SHAPES
