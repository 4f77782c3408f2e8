"""The hand-written codecs on the hot path must produce and accept exactly the bytes pamqp does.

Each property builds the same frame both ways (amqpd's struct code and pamqp's marshal/unmarshal) from
hypothesis-generated values and compares bytes, or decodes pamqp's bytes with amqpd and compares values.
pamqp validates names more strictly than RabbitMQ (ASCII subset, 127 chars), so comparisons against
pamqp's marshal use pamqp-valid names, and arbitrary UTF-8 names up to 255 bytes are checked by decoding
amqpd's output with pamqp's unmarshal (which does not validate).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pamqp.frame
import pamqp.heartbeat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, header
from pamqp import encode as pencode

from amqpd.errors import AMQPError
from amqpd.protocol import fastpath, frames, methods, properties
from amqpd.protocol.constants import FLAG_REPLY_TO

settings.register_profile("codec", max_examples=150, deadline=None)
settings.load_profile("codec")

PAMQP_NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@#,/+ "

channels = st.integers(0, 65535)
delivery_tags = st.integers(0, 2**63 - 1)  # pamqp encodes longlong as signed
u32 = st.integers(0, 2**32 - 1)
u16 = st.integers(0, 65535)
pamqp_names = st.text(PAMQP_NAME_ALPHABET, max_size=127)
any_names = st.text(max_size=90).filter(lambda s: len(s.encode()) <= 255)
short_texts = st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)


def _method_payload(method: object) -> bytes:
    """The payload (class/method ids + arguments) of pamqp's method frame."""
    return pamqp.frame.marshal(method, 1)[7:-1]


def _route(exchange: str, routing_key: str) -> bytes:
    return fastpath.shortstr(exchange) + fastpath.shortstr(routing_key)


def _unmarshal(data: bytes) -> tuple[int, object]:
    consumed, channel, value = pamqp.frame.unmarshal(data)
    assert consumed == len(data)
    return channel, value


# --- short strings ----------------------------------------------------------------------------------------


@given(any_names)
def test_shortstr_matches_pamqp(value: str) -> None:
    assert fastpath.shortstr(value) == pencode.short_string(value)


@given(st.text(min_size=86).filter(lambda s: len(s.encode()) > 255))
def test_shortstr_over_255_bytes_is_a_syntax_error(value: str) -> None:
    with pytest.raises(AMQPError) as info:
        fastpath.shortstr(value)
    assert info.value.code == 502


# --- server → client encoders -----------------------------------------------------------------------------


@given(channels, pamqp_names, delivery_tags, st.booleans(), pamqp_names, pamqp_names)
def test_encode_deliver_matches_pamqp_marshal(
    channel: int, ctag: str, tag: int, redelivered: bool, exchange: str, key: str
) -> None:
    ours = fastpath.encode_deliver(channel, fastpath.shortstr(ctag), tag, redelivered, _route(exchange, key))
    assert ours == pamqp.frame.marshal(commands.Basic.Deliver(ctag, tag, redelivered, exchange, key), channel)


@given(channels, any_names, delivery_tags, st.booleans(), any_names, any_names)
def test_encode_deliver_with_any_utf8_names_decodes_in_pamqp(
    channel: int, ctag: str, tag: int, redelivered: bool, exchange: str, key: str
) -> None:
    ours = fastpath.encode_deliver(channel, fastpath.shortstr(ctag), tag, redelivered, _route(exchange, key))
    ch, m = _unmarshal(ours)
    assert ch == channel
    assert (m.consumer_tag, m.delivery_tag, m.redelivered, m.exchange, m.routing_key) == (
        ctag,
        tag,
        redelivered,
        exchange,
        key,
    )


@given(channels, delivery_tags, st.booleans(), pamqp_names, pamqp_names, u32)
def test_encode_get_ok_matches_pamqp_marshal(
    channel: int, tag: int, redelivered: bool, exchange: str, key: str, count: int
) -> None:
    ours = fastpath.encode_get_ok(channel, tag, redelivered, _route(exchange, key), count)
    assert ours == pamqp.frame.marshal(commands.Basic.GetOk(tag, redelivered, exchange, key, count), channel)


@given(channels, delivery_tags, st.booleans(), any_names, any_names, u32)
def test_encode_get_ok_with_any_utf8_names_decodes_in_pamqp(
    channel: int, tag: int, redelivered: bool, exchange: str, key: str, count: int
) -> None:
    _, m = _unmarshal(fastpath.encode_get_ok(channel, tag, redelivered, _route(exchange, key), count))
    assert (m.delivery_tag, m.redelivered, m.exchange, m.routing_key, m.message_count) == (
        tag,
        redelivered,
        exchange,
        key,
        count,
    )


@given(channels, u16, short_texts, pamqp_names, pamqp_names)
def test_encode_return_matches_pamqp_marshal(channel: int, code: int, text: str, exchange: str, key: str) -> None:
    ours = fastpath.encode_return(channel, code, text, _route(exchange, key))
    assert ours == pamqp.frame.marshal(commands.Basic.Return(code, text, exchange, key), channel)


@given(channels, u16, short_texts, any_names, any_names)
def test_encode_return_with_any_utf8_names_decodes_in_pamqp(
    channel: int, code: int, text: str, exchange: str, key: str
) -> None:
    _, m = _unmarshal(fastpath.encode_return(channel, code, text, _route(exchange, key)))
    assert (m.reply_code, m.reply_text, m.exchange, m.routing_key) == (code, text, exchange, key)


@given(channels, delivery_tags, st.booleans())
def test_encode_ack_matches_pamqp_marshal(channel: int, tag: int, multiple: bool) -> None:
    assert fastpath.encode_ack(channel, tag, multiple) == pamqp.frame.marshal(
        commands.Basic.Ack(tag, multiple), channel
    )


@given(channels, delivery_tags, st.booleans())
def test_encode_nack_matches_pamqp_marshal_and_rabbitmq(channel: int, tag: int, multiple: bool) -> None:
    # RabbitMQ 3.10 sends publisher nacks with requeue=true (the spec's default, and pamqp's): observed
    # bytes for a reject-publish overflow are 01 0001 0000000d 003c0078 0000000000000001 03 ce.
    assert fastpath.encode_nack(channel, tag, multiple) == pamqp.frame.marshal(
        commands.Basic.Nack(tag, multiple), channel
    )


# --- client → server decoders -----------------------------------------------------------------------------


@given(pamqp_names, pamqp_names, st.booleans(), st.booleans())
def test_parse_publish_reads_pamqp_marshal(exchange: str, key: str, mandatory: bool, immediate: bool) -> None:
    payload = _method_payload(commands.Basic.Publish(0, exchange, key, mandatory, immediate))
    assert fastpath.parse_publish(payload) == (exchange, key, mandatory, immediate)


@given(any_names, any_names, st.booleans(), st.booleans(), u16)
def test_parse_publish_reads_any_utf8_names(
    exchange: str, key: str, mandatory: bool, immediate: bool, ticket: int
) -> None:
    bits = (1 if mandatory else 0) | (2 if immediate else 0)
    payload = struct.pack(">HHH", 60, 40, ticket) + _route(exchange, key) + bytes((bits,))
    assert fastpath.parse_publish(payload) == (exchange, key, mandatory, immediate)


@given(pamqp_names, pamqp_names, st.data())
def test_parse_publish_refuses_every_truncation_with_502(exchange: str, key: str, data: st.DataObject) -> None:
    payload = _method_payload(commands.Basic.Publish(0, exchange, key))
    cut = data.draw(st.integers(6, len(payload) - 1))
    with pytest.raises(AMQPError) as info:
        fastpath.parse_publish(payload[:cut])
    assert info.value.code == 502


@given(delivery_tags, st.booleans())
def test_parse_tag_bits_reads_pamqp_ack(tag: int, multiple: bool) -> None:
    assert fastpath.parse_tag_bits(_method_payload(commands.Basic.Ack(tag, multiple)), "basic.ack") == (
        tag,
        int(multiple),
    )


@given(delivery_tags, st.booleans(), st.booleans())
def test_parse_tag_bits_reads_pamqp_nack(tag: int, multiple: bool, requeue: bool) -> None:
    payload = _method_payload(commands.Basic.Nack(tag, multiple, requeue))
    assert fastpath.parse_tag_bits(payload, "basic.nack") == (tag, int(multiple) | int(requeue) << 1)


@given(delivery_tags, st.booleans())
def test_parse_tag_bits_reads_pamqp_reject(tag: int, requeue: bool) -> None:
    assert fastpath.parse_tag_bits(_method_payload(commands.Basic.Reject(tag, requeue)), "basic.reject") == (
        tag,
        int(requeue),
    )


# --- content headers and properties -----------------------------------------------------------------------

field_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(width=32, allow_nan=False)  # pamqp writes floats as 'f' (single precision)
    | st.text(max_size=20)
    | st.binary(max_size=20).map(bytearray),  # pamqp writes bytearray as 'x'
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
header_tables = st.dictionaries(st.text(max_size=12).filter(lambda s: len(s.encode()) <= 255), field_values, max_size=6)
opt_short = st.none() | short_texts

basic_properties = st.builds(
    commands.Basic.Properties,
    content_type=opt_short,
    content_encoding=opt_short,
    headers=st.none() | header_tables,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=opt_short,
    reply_to=opt_short,
    expiration=st.none() | st.integers(0, 2**31).map(str),
    message_id=opt_short,
    timestamp=st.none() | st.integers(0, 2**32).map(lambda s: datetime.fromtimestamp(s, UTC)),
    message_type=opt_short,
    user_id=opt_short,
    app_id=opt_short,
)


@given(st.integers(0, 2**62), basic_properties)
def test_parse_content_header_reads_pamqp_marshal(body_size: int, props: commands.Basic.Properties) -> None:
    payload = header.ContentHeader(0, body_size, props).marshal()
    (flags,) = struct.unpack_from(">H", payload, 12)
    assert fastpath.parse_content_header(payload) == (60, body_size, flags)


@given(st.integers(0, 2**62), basic_properties)
def test_property_scan_agrees_with_pamqp_unmarshal(body_size: int, props: commands.Basic.Properties) -> None:
    payload = header.ContentHeader(0, body_size, props).marshal()
    _, _, flags = fastpath.parse_content_header(payload)
    scan = properties.PropertyScan(payload, flags)
    decoded = header.ContentHeader()
    decoded.unmarshal(payload)
    expected = decoded.properties
    assert scan.delivery_mode == expected.delivery_mode
    assert scan.priority == expected.priority
    assert scan.expiration == expected.expiration
    if flags & properties.FLAG_HEADERS:
        assert scan.headers_raw == pencode.field_table(props.headers)
        assert methods.decode_table(scan.headers_raw) == expected.headers
    else:
        assert scan.headers_raw is None


@given(st.integers(0, 2**62), basic_properties)
def test_split_and_join_properties_round_trip_byte_for_byte(body_size: int, props: commands.Basic.Properties) -> None:
    # Rewrites (BCC, reply-to, dead-lettering) go through split/join, never pamqp's decoder, which would
    # read a millisecond timestamp (> 2^32) as seconds.
    payload = header.ContentHeader(0, body_size, props).marshal()
    assert properties.join_properties(body_size, properties.split_properties(payload)) == payload


@given(st.integers(0, 2**62), basic_properties, st.text(max_size=50))
def test_rewriting_one_property_leaves_the_others_as_pamqp_wrote_them(
    body_size: int, props: commands.Basic.Properties, reply_to: str
) -> None:
    payload = header.ContentHeader(0, body_size, props).marshal()
    new = properties.rewrite_properties(payload, body_size, {FLAG_REPLY_TO: fastpath.shortstr(reply_to)})
    before, after = properties.split_properties(payload), properties.split_properties(new)
    assert after.pop(FLAG_REPLY_TO) == fastpath.shortstr(reply_to)
    before.pop(FLAG_REPLY_TO, None)
    assert after == before


# --- frames -----------------------------------------------------------------------------------------------

pamqp_frames = st.one_of(
    st.builds(
        lambda ch, b: pamqp.frame.marshal(body.ContentBody(b), ch), st.integers(1, 65535), st.binary(max_size=300)
    ),
    st.builds(
        lambda ch, p, n: pamqp.frame.marshal(header.ContentHeader(0, n, p), ch),
        st.integers(1, 65535),
        basic_properties,
        st.integers(0, 2**40),
    ),
    st.builds(
        lambda ch, t, m: pamqp.frame.marshal(commands.Basic.Ack(t, m), ch), channels, delivery_tags, st.booleans()
    ),
    st.builds(lambda ch, q: pamqp.frame.marshal(commands.Queue.Declare(queue=q), ch), channels, pamqp_names),
    st.just(pamqp.frame.marshal(pamqp.heartbeat.Heartbeat(), 0)),
)


def _payloads(got: list[frames.Frame]) -> list[frames.Frame]:
    """The frames with each body part (a large announced body's frames, filled in place) as its bytes: the
    parts of one body follow each other in it, as the assembler reads them."""
    read: dict[int, int] = {}  # id of a body being filled -> bytes of it taken by the parts before
    out = []
    for ftype, channel, payload in got:
        if isinstance(payload, frames.BodyPart):
            start = read.get(id(payload.body), 0)
            read[id(payload.body)] = start + payload.size
            payload = bytes(payload.body[start : start + payload.size])
        out.append((ftype, channel, payload))
    return out


@given(st.lists(pamqp_frames, max_size=12), st.data())
def test_frame_reader_splits_any_chunking_into_pamqps_frames(encoded: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encoded)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    reader = frames.FrameReader(frame_max=131072)
    got: list[frames.Frame] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += reader.feed(stream[start:end])
    assert reader.buffered == 0
    assert [frames.frame(t, ch, p) for t, ch, p in _payloads(got)] == encoded
    assert [(t, ch) for t, ch, _ in got] == [(f[0], struct.unpack_from(">H", f, 1)[0]) for f in encoded]


def test_frame_reader_fills_a_large_announced_body_in_place_at_any_cut() -> None:
    """A header announcing a large body, then its body frames (an empty one among them) on that channel and
    another channel's frame between them: the same frames come out wherever the stream is cut in two."""
    encoded = [
        pamqp.frame.marshal(header.ContentHeader(0, frames.SINK_MIN + 5, commands.Basic.Properties()), 3),
        pamqp.frame.marshal(body.ContentBody(b""), 3),
        pamqp.frame.marshal(body.ContentBody(b"abc"), 3),
        pamqp.frame.marshal(commands.Basic.Ack(7, False), 2),
        pamqp.frame.marshal(body.ContentBody(b"de"), 3),
    ]
    stream = b"".join(encoded)
    for cut in range(len(stream) + 1):
        reader = frames.FrameReader(frame_max=131072)
        got = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert any(isinstance(p, frames.BodyPart) for _, _, p in got)
        assert [frames.frame(t, ch, p) for t, ch, p in _payloads(got)] == encoded


@given(st.integers(4096, 10000), st.integers(0, 2**16), st.data())
def test_frame_reader_refuses_a_frame_over_frame_max_from_its_header(
    frame_max: int, excess: int, data: st.DataObject
) -> None:
    size = frame_max + 1 + excess
    reader = frames.FrameReader(frame_max=frame_max)
    with pytest.raises(AMQPError) as info:
        reader.feed(struct.pack(">BHI", data.draw(st.sampled_from([1, 2, 3])), 1, size))
    assert info.value.code == 501


@given(st.binary(max_size=200), st.integers(0, 255).filter(lambda b: b != 0xCE))
def test_frame_reader_refuses_a_bad_frame_end_with_501(payload: bytes, end: int) -> None:
    encoded = pamqp.frame.marshal(body.ContentBody(payload), 1)[:-1] + bytes((end,))
    with pytest.raises(AMQPError) as info:
        frames.FrameReader(frame_max=131072).feed(encoded)
    assert info.value.code == 501


@given(channels, st.integers(4096, 9000), st.binary(max_size=30000), basic_properties)
def test_content_frames_match_pamqp_header_and_body_frames(
    channel: int, frame_max: int, payload: bytes, props: commands.Basic.Properties
) -> None:
    header_payload = header.ContentHeader(0, len(payload), props).marshal()
    expected = pamqp.frame.marshal(header.ContentHeader(0, len(payload), props), channel)
    step = frame_max - 8
    for start in range(0, len(payload), step):
        expected += pamqp.frame.marshal(body.ContentBody(payload[start : start + step]), channel)
    assert frames.content_frames(channel, header_payload, payload, frame_max) == expected


# --- the pamqp adapter ------------------------------------------------------------------------------------

server_methods = st.one_of(
    st.builds(commands.Queue.DeclareOk, pamqp_names, u32, u32),
    st.builds(commands.Queue.PurgeOk, u32),
    st.builds(commands.Queue.DeleteOk, u32),
    st.builds(commands.Basic.ConsumeOk, pamqp_names),
    st.builds(commands.Basic.CancelOk, pamqp_names),
    st.builds(commands.Basic.Cancel, pamqp_names, st.booleans()),
    st.builds(commands.Basic.GetEmpty),
    st.builds(commands.Channel.Close, u16, short_texts, u16, u16),
    st.builds(commands.Connection.Close, u16, short_texts, u16, u16),
    st.builds(commands.Connection.Tune, u16, u32, u16),
    st.builds(commands.Channel.OpenOk),
    st.builds(commands.Exchange.DeclareOk),
    st.builds(commands.Confirm.SelectOk),
)


@given(channels, server_methods)
def test_encode_method_matches_pamqp_marshal(channel: int, method: object) -> None:
    assert methods.encode_method(channel, method) == pamqp.frame.marshal(method, channel)


client_methods = st.one_of(
    st.builds(
        commands.Queue.Declare,
        st.just(0),  # pamqp insists on ticket 0
        pamqp_names,
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.none() | header_tables,
    ),
    st.builds(
        commands.Queue.Bind, st.just(0), pamqp_names, pamqp_names, pamqp_names, st.booleans(), st.none() | header_tables
    ),
    st.builds(
        commands.Exchange.Declare,
        st.just(0),  # pamqp insists on ticket 0
        pamqp_names,
        st.sampled_from(["direct", "topic", "fanout"]),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.none() | header_tables,
    ),
    st.builds(
        commands.Basic.Consume,
        st.just(0),  # pamqp insists on ticket 0
        pamqp_names,
        pamqp_names,
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.none() | header_tables,
    ),
    st.builds(commands.Basic.Qos, u32, u16, st.booleans()),
    st.builds(commands.Basic.Get, st.just(0), pamqp_names, st.booleans()),
)


@given(client_methods)
def test_decode_method_agrees_with_pamqp_unmarshal(method: object) -> None:
    encoded = pamqp.frame.marshal(method, 1)
    _, expected = _unmarshal(encoded)
    ours = methods.decode_method(encoded[7:-1])
    assert type(ours) is type(expected)
    for name in expected.__slots__:
        assert getattr(ours, name) == getattr(expected, name), name


@given(any_names, any_names, st.booleans(), st.booleans())
def test_parse_publish_route_returns_the_route_bytes_deliver_reuses(
    exchange: str, key: str, mandatory: bool, immediate: bool
) -> None:
    bits = (1 if mandatory else 0) | (2 if immediate else 0)
    payload = struct.pack(">HHH", 60, 40, 0) + _route(exchange, key) + bytes((bits,))
    assert fastpath.parse_publish_route(payload) == (exchange, key, _route(exchange, key), bits)


@given(
    channels,
    pamqp_names,
    delivery_tags,
    st.booleans(),
    pamqp_names,
    pamqp_names,
    basic_properties,
    st.integers(4096, 9000),
    st.binary(max_size=20000),
)
def test_encode_delivery_matches_pamqp_deliver_header_and_body_frames(
    channel: int,
    ctag: str,
    tag: int,
    redelivered: bool,
    exchange: str,
    key: str,
    props: commands.Basic.Properties,
    frame_max: int,
    payload: bytes,
) -> None:
    header_payload = header.ContentHeader(0, len(payload), props).marshal()
    expected = pamqp.frame.marshal(commands.Basic.Deliver(ctag, tag, redelivered, exchange, key), channel)
    expected += pamqp.frame.marshal(header.ContentHeader(0, len(payload), props), channel)
    step = frame_max - 8
    for start in range(0, len(payload), step):
        expected += pamqp.frame.marshal(body.ContentBody(payload[start : start + step]), channel)
    ours = fastpath.encode_delivery(
        channel, fastpath.shortstr(ctag), tag, redelivered, _route(exchange, key), header_payload, payload, frame_max
    )
    assert ours == expected
