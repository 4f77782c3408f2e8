"""Frame boundaries: what the broker reads however the bytes arrive, and how it splits bodies it writes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from amqpd import errors
from amqpd.protocol import frames as frames_module
from amqpd.protocol.frames import HEARTBEAT_FRAME, BodyPart, FrameReader, content_frames, content_pieces
from amqpd.protocol.frames import frame as make_frame

Frame = tuple[int, int, bytes]
# The reader may hand a fully buffered publish + header + body over as one pseudo-frame (the straight-line
# path); what a user cares about is that the same frames come out, so tests expand it back.
# Publishes that differ only by body may come as one PUBLISH_RUN item (method, header, [bodies]).
PUBLISH = frames_module.PUBLISH
PUBLISH_RUN = frames_module.PUBLISH_RUN
# Publishes to one place with properties of their own may come as one PUBLISH_GROUP (method, [headers], [bodies]).
PUBLISH_GROUP = frames_module.PUBLISH_GROUP


def expand(items: list) -> list[Frame]:
    """The frames as sent; a large body's frames come as BodyParts of the buffer the reader filled, in order."""
    out: list[Frame] = []
    filled: dict[int, int] = {}  # id of a body buffer -> bytes of it already expanded
    for ftype, channel, payload in items:
        if isinstance(payload, BodyPart):
            at = filled.get(id(payload.body), 0)
            filled[id(payload.body)] = at + payload.size
            out.append((ftype, channel, bytes(payload.body[at : at + payload.size])))
        elif ftype == PUBLISH:
            method, hdr, body_ = payload
            out += [(1, channel, method), (2, channel, hdr)]
            if body_:
                out.append((3, channel, body_))
        elif ftype == PUBLISH_RUN:
            method, hdr, bodies = payload
            for body_ in bodies:
                out += [(1, channel, method), (2, channel, hdr), (3, channel, body_)]
        elif ftype == PUBLISH_GROUP:
            method, headers, bodies = payload
            for hdr, body_ in zip(headers, bodies, strict=True):
                out += [(1, channel, method), (2, channel, hdr), (3, channel, body_)]
        else:
            out.append((ftype, channel, payload))
    return out


def publish_unit(channel: int, payload: bytes, pieces: int) -> list[Frame]:
    """A client's publish: method, header and the body in `pieces` frames (0 pieces for an empty body)."""
    method = frame.marshal(commands.Basic.Publish(0, "ex", "rk"), channel)[7:-1]
    hdr = frame.marshal(header.ContentHeader(0, len(payload), commands.Basic.Properties()), channel)[7:-1]
    out = [(1, channel, method), (2, channel, hdr)]
    if payload:
        step = -(-len(payload) // max(pieces, 1))
        out += [(3, channel, payload[i : i + step]) for i in range(0, len(payload), step)]
    return out


raw_frame = st.tuples(st.sampled_from([1, 2, 3, 8]), st.integers(0, 65535), st.binary(max_size=300)).map(lambda f: [f])
publish = st.builds(publish_unit, st.integers(1, 3), st.binary(max_size=200), st.integers(1, 3))
# Back-to-back publishes that differ only by body, as a publisher in a loop sends them (a PUBLISH_RUN)
same_shape = st.builds(
    lambda channel, size, fills: sum((publish_unit(channel, bytes([f]) * size, 1) for f in fills), []),
    st.integers(1, 2),
    st.integers(1, 40),
    st.lists(st.integers(0, 255), min_size=1, max_size=5),
)
frames_strategy = st.lists(st.one_of(raw_frame, publish, same_shape), max_size=10).map(lambda units: sum(units, []))


def stream_of(frames: list[Frame]) -> bytes:
    return b"".join(make_frame(t, c, p) for t, c, p in frames)


@given(frames=frames_strategy, cuts=st.lists(st.integers(0, 4000), max_size=20))
@settings(max_examples=200, deadline=None)
def test_any_chunking_of_a_stream_yields_the_same_frames(frames: list[Frame], cuts: list[int]) -> None:
    data = stream_of(frames)
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    reader = FrameReader(131072)
    got: list = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        got += reader.feed(data[start:end])
    assert expand(got) == frames
    assert reader.buffered == 0


def test_publishes_differing_only_by_body_come_out_as_one_run() -> None:
    bodies = [bytes([i]) * 10 for i in range(5)]
    data = stream_of(sum((publish_unit(1, b, 1) for b in bodies), []))
    [(ftype, channel, (method, hdr, got))] = FrameReader(4096).feed(data)
    assert (ftype, channel, got) == (PUBLISH_RUN, 1, bodies)
    first = publish_unit(1, bodies[0], 1)
    assert (method, hdr) == (first[0][2], first[1][2])


def test_a_run_ends_where_the_next_publish_differs() -> None:
    units = [
        publish_unit(1, b"a" * 10, 1),
        publish_unit(1, b"b" * 10, 1),
        publish_unit(1, b"c" * 11, 1),
        publish_unit(2, b"d" * 11, 1),
    ]
    items = FrameReader(4096).feed(stream_of(sum(units, [])))
    assert [(t, c) for t, c, _ in items] == [(PUBLISH_RUN, 1), (PUBLISH, 1), (PUBLISH, 2)]  # a group needs two
    assert expand(items) == sum(units, [])


def test_publishes_to_one_place_with_their_own_properties_come_out_as_one_group() -> None:
    units = [publish_unit(1, bytes([65 + i]) * (10 + i), 1) for i in range(4)]  # each its own header (body size)
    units.append(publish_unit(2, b"e" * 20, 1))  # another channel: not in the group
    items = FrameReader(4096).feed(stream_of(sum(units, [])))
    assert [(t, c) for t, c, _ in items] == [(PUBLISH_GROUP, 1), (PUBLISH, 2)]
    method, headers, bodies = items[0][2]
    assert method == units[0][0][2]
    assert headers == [u[1][2] for u in units[:4]]
    assert bodies == [u[2][2] for u in units[:4]]


def test_a_broken_frame_end_inside_a_run_is_a_frame_error_after_the_good_publishes() -> None:
    good = stream_of(publish_unit(1, b"a" * 10, 1) * 2)
    bad = bytearray(stream_of(publish_unit(1, b"b" * 10, 1)))
    bad[-1] = 0
    error, items = stream_error(FrameReader(4096), good + bytes(bad))
    assert error.code == 501
    assert expand(items) == publish_unit(1, b"a" * 10, 1) * 2 + publish_unit(1, b"b" * 10, 1)[:2]


def stream_error(reader: FrameReader, data: bytes) -> tuple[errors.AMQPError, list]:
    """The error a broken stream causes, and the complete frames before the damage (which still take effect,
    as in RabbitMQ): the reader raises an AMQPError that may carry them as `frames`."""
    with pytest.raises(errors.AMQPError) as info:
        reader.feed(data)
    return info.value, list(getattr(info.value, "frames", []))


def test_one_byte_at_a_time_yields_frames_only_when_complete() -> None:
    data = frame.marshal(commands.Basic.Ack(7), 3)
    reader = FrameReader(4096)
    for byte in data[:-1]:
        assert reader.feed(bytes([byte])) == []
    assert reader.feed(data[-1:]) == [(1, 3, data[7:-1])]


def test_coalesced_frames_come_out_in_order() -> None:
    data = (
        frame.marshal(commands.Basic.Publish(0, "ex", "rk"), 1)
        + frame.marshal(header.ContentHeader(0, 2, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"hi"), 1)
        + HEARTBEAT_FRAME
    )
    got = expand(FrameReader(4096).feed(data))
    assert [(t, c) for t, c, _ in got] == [(1, 1), (2, 1), (3, 1), (8, 0)]
    assert got[2][2] == b"hi"


def test_partial_frame_stays_buffered() -> None:
    reader = FrameReader(4096)
    data = make_frame(3, 1, b"abcdef")
    assert reader.feed(data + data[:5]) == [(3, 1, b"abcdef")]
    assert reader.buffered == 5


def test_frame_larger_than_frame_max_is_refused_from_its_header_alone() -> None:
    exc, _ = stream_error(FrameReader(4096), b"\x03\x00\x01" + (4097).to_bytes(4, "big"))  # header only
    assert (exc.code, exc.connection_level) == (errors.FRAME_ERROR, True)


def test_frame_payload_of_exactly_frame_max_is_accepted() -> None:
    # RabbitMQ allows the 8 bytes of framing as slack on top of frame_max.
    reader = FrameReader(4096)
    assert reader.feed(make_frame(3, 1, b"x" * 4096)) == [(3, 1, b"x" * 4096)]


def test_body_frame_over_frame_max_inside_a_buffered_publish_is_refused() -> None:
    data = (
        frame.marshal(commands.Basic.Publish(0, "ex", "rk"), 1)
        + frame.marshal(header.ContentHeader(0, 5000, commands.Basic.Properties()), 1)
        + make_frame(3, 1, bytes(5000))
    )
    assert stream_error(FrameReader(4096), data)[0].code == 501


def test_bad_frame_end_byte_is_a_frame_error() -> None:
    data = bytearray(make_frame(1, 1, b"\x00\x3c\x00\x50" + bytes(9)))
    data[-1] = 0x00
    assert stream_error(FrameReader(4096), bytes(data))[0].code == 501


def test_frames_before_a_broken_one_are_still_returned() -> None:
    good = make_frame(1, 1, b"\x00\x3c\x00\x50" + bytes(9))
    error, frames = stream_error(FrameReader(4096), good + b"\x03\x00\x01" + (5000).to_bytes(4, "big"))
    assert error.code == 501
    assert frames == [(1, 1, good[7:-1])]


def test_frame_max_zero_means_no_limit() -> None:
    assert FrameReader(0).feed(make_frame(3, 1, b"y" * 200_000)) == [(3, 1, b"y" * 200_000)]


# -- writing content ---------------------------------------------------------------------------------


def body_frames(data: bytes) -> list[tuple[int, int, bytes]]:
    return FrameReader(0).feed(data)


@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 8176, 8177, 20000])
def test_content_frames_split_bodies_at_frame_max_minus_8(size: int) -> None:
    hdr = b"\x00\x3c\x00\x00" + size.to_bytes(8, "big") + b"\x00\x00"
    payload = bytes(i % 251 for i in range(size))
    frames = body_frames(content_frames(5, hdr, payload, 4096))
    assert frames[0] == (2, 5, hdr)
    bodies = frames[1:]
    assert all(t == 3 and c == 5 for t, c, _ in bodies)
    assert all(len(p) + 8 <= 4096 for _, _, p in bodies)
    assert b"".join(p for _, _, p in bodies) == payload
    assert len(bodies) == -(-size // 4088)  # no empty body frame, none more than needed


@given(size=st.integers(0, 3 * 4096), frame_max=st.integers(4096, 9000))
@settings(max_examples=60, deadline=None)
def test_content_frames_decode_with_pamqp_to_the_same_body(size: int, frame_max: int) -> None:
    payload = bytes(size)
    hdr = frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties(content_type="a/b")), 1)[7:-1]
    data = content_frames(1, hdr, payload, frame_max)
    got, rest = b"", data
    used, _, head = frame.unmarshal(rest)
    rest = rest[used:]
    assert head.body_size == size and head.properties.content_type == "a/b"
    while rest:
        used, _, piece = frame.unmarshal(rest)
        assert used <= frame_max
        got += piece.value
        rest = rest[used:]
    assert got == payload


@given(
    size=st.integers(0, 3 * 4096),
    cuts=st.lists(st.integers(0, 3 * 4096), max_size=6),
    frame_max=st.integers(4096, 9000),
)
@settings(max_examples=200, deadline=None)
def test_a_body_held_in_parts_goes_out_as_the_same_frames_as_the_whole_body(
    size: int, cuts: list[int], frame_max: int
) -> None:
    """A chunk's body is framed from its parts (the runs table, then the records as read) without joining
    them: the pieces on the wire are the frames the joined body gives, cut at frame_max whatever the parts."""
    payload = bytes(i % 251 for i in range(size))
    bounds = sorted({0, len(payload), *(c for c in cuts if c <= len(payload))})
    parts = [payload[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    hdr = frame.marshal(header.ContentHeader(0, len(payload), commands.Basic.Properties()), 7)[7:-1]
    method = frame.marshal(commands.Basic.Deliver("c", 1, False, "", "s"), 7)
    pieces = content_pieces(7, hdr, parts, len(payload), frame_max, method)
    expected = [method, frame.marshal(header.ContentHeader(0, len(payload), commands.Basic.Properties()), 7)]
    for start in range(0, len(payload), frame_max - 8):
        expected.append(frame.marshal(body.ContentBody(payload[start : start + frame_max - 8]), 7))
    assert b"".join(pieces) == b"".join(expected) == content_frames(7, hdr, payload, frame_max, method)


def test_a_run_after_publishes_with_their_own_properties_still_comes_out_as_a_run() -> None:
    """The group's loop (FrameReader._group_rest) stops where the next publishes repeat one another."""
    units = [publish_unit(1, b"a" * 10, 1), publish_unit(1, b"c" * 12, 1)]
    units += [publish_unit(1, bytes([66 + i]) * 11, 1) for i in range(3)]  # equal headers: a run
    items = FrameReader(4096).feed(stream_of(sum(units, [])))
    assert [(t, c) for t, c, _ in items] == [(PUBLISH_GROUP, 1), (PUBLISH_RUN, 1)]
    assert expand(items) == sum(units, [])


@pytest.mark.parametrize("where", ["header", "body"])
def test_a_group_takes_no_content_frame_of_another_channel(where: str) -> None:
    """A publish on channel 1 whose header or body frame comes on channel 2, inside a group: the frames are
    read one by one from there (the session then reports the unexpected frame)."""
    units = [publish_unit(1, bytes([65 + i]) * (10 + i), 1) for i in range(4)]
    method, hdr, body_ = units[2]
    units[2] = [method, (2, 2, hdr[2]), body_] if where == "header" else [method, hdr, (3, 2, body_[2])]
    items = FrameReader(4096).feed(stream_of(sum(units, [])))
    assert expand(items) == sum(units, [])
    assert items[0][0] == PUBLISH_GROUP and len(items[0][2][1]) == 2
