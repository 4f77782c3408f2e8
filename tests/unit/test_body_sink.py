"""A large body read straight into a buffer of its own (FrameReader's body sink): the same messages and the
same errors as the frame-by-frame path, however the bytes are cut into reads and however channels interleave."""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import pytest
from fakes import Conn, header_payload, new_broker, publish_frames
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from amqpd import errors
from amqpd.protocol import frames as frames_module
from amqpd.protocol.assembler import ContentAssembler
from amqpd.protocol.constants import FRAME_BODY, FRAME_HEADER, FRAME_METHOD
from amqpd.protocol.frames import PUBLISH, PUBLISH_GROUP, PUBLISH_RUN, BrokenStream, FrameReader

FRAME_MAX = 131072
PUBLISH_METHOD = frame.marshal(commands.Basic.Publish(0, "", "q"), 1)[7:-1]
Outcome = tuple[list[tuple[int, bytes]], tuple[int, str] | None]


def raw(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end])


def body_of(size: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(size))


class Session:
    """What a session does with the reader's items, cut down to content assembly: every method frame is a
    basic.publish; the messages completed in order, and the first error (its reply code and text)."""

    def __init__(self) -> None:
        self.assemblers: dict[int, ContentAssembler] = {}
        self.messages: list[tuple[int, bytes]] = []
        self.filled: list[Any] = []  # the bodies, as the assembler handed them over

    def take(self, items: list[tuple[int, int, Any]]) -> None:
        for ftype, channel, payload in items:
            if ftype in (PUBLISH, PUBLISH_RUN, PUBLISH_GROUP):
                method, headers, bodies = payload
                if ftype != PUBLISH_GROUP:
                    headers = [headers] * (len(bodies) if ftype == PUBLISH_RUN else 1)
                if ftype == PUBLISH:
                    bodies = [bodies]
                for h, b in zip(headers, bodies, strict=True):
                    self.frame(FRAME_METHOD, channel, method)
                    self.frame(FRAME_HEADER, channel, h)
                    if b:
                        self.frame(FRAME_BODY, channel, b)
            else:
                self.frame(ftype, channel, payload)

    def frame(self, ftype: int, channel: int, payload: Any) -> None:
        if ftype == 8:
            return  # a heartbeat
        a = self.assemblers.setdefault(channel, ContentAssembler(1 << 30))
        if ftype == FRAME_METHOD:
            a.expect_method()
            a.begin(payload)
            return
        done = a.take_header(payload) if ftype == FRAME_HEADER else a.take_body(payload)
        if done is not None:
            self.filled.append(done.body)
            self.messages.append((channel, bytes(done.body)))


def run(data: bytes, cuts: list[int], frame_max: int, session: Session | None = None) -> Outcome:
    session = session or Session()
    reader = FrameReader(frame_max)
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    try:
        for start, end in zip(bounds, bounds[1:], strict=False):
            try:
                items = reader.feed(data[start:end])
            except BrokenStream as exc:
                session.take(exc.frames)
                raise
            session.take(items)
    except errors.AMQPError as exc:
        return session.messages, (exc.code, exc.text)
    return session.messages, None


@given(cuts=st.lists(st.integers(0, 3 * FRAME_MAX + 400), max_size=12))
@settings(max_examples=40, deadline=None)
def test_a_large_body_cut_anywhere_into_reads_arrives_whole_in_one_buffer(cuts: list[int]) -> None:
    body = body_of(3 * FRAME_MAX + 123, 1)
    data = publish_frames(1, "", "q", body) + publish_frames(1, "", "q", b"small")
    session = Session()
    reader_cuts = cuts + [7, 8, 30, 31, 60]  # inside the method's and the header's frames too
    assert run(data, reader_cuts, FRAME_MAX, session) == ([(1, body), (1, b"small")], None)
    assert isinstance(session.filled[0], bytearray)  # the reader's buffer itself: not copied again


def test_a_body_frame_split_at_every_byte_of_its_framing_arrives_whole() -> None:
    body = body_of(FRAME_MAX + 1000, 2)
    data = publish_frames(1, "", "q", body)
    first_body = data.index(struct.pack(">BH", FRAME_BODY, 1))
    second_end = first_body + 7 + FRAME_MAX - 8  # the first body frame's end byte
    for cut in [*range(first_body, first_body + 9), *range(second_end - 1, second_end + 9)]:
        assert run(data, [cut], FRAME_MAX) == ([(1, body)], None), cut


def test_two_channels_interleaving_large_bodies_both_arrive_whole() -> None:
    one, two = body_of(2 * FRAME_MAX + 5, 3), body_of(2 * FRAME_MAX + 9, 4)

    def frames_of(channel: int, body: bytes) -> list[bytes]:
        data = publish_frames(channel, "", "q", body)
        out, pos = [], 0
        while pos < len(data):
            size = struct.unpack_from(">I", data, pos + 3)[0]
            out.append(data[pos : pos + size + 8])
            pos += size + 8
        return out

    a, b = frames_of(1, one), frames_of(2, two)
    heartbeat = raw(8, 0, b"")
    data = b"".join(x + y + heartbeat for x, y in zip(a, b, strict=True))
    for cuts in ([], [len(data) // 3, len(data) // 2], list(range(0, len(data), 65536))):
        messages, error = run(data, cuts, FRAME_MAX)
        assert error is None
        assert sorted(messages) == [(1, one), (2, two)]


# -- the same errors as before ----------------------------------------------------------------------------

SMALL_FRAME_MAX = 64  # with the sink for every body (below), small frames reach every boundary quickly


@st.composite
def publish_unit(draw: Any) -> list[bytes]:
    """A well-formed publish on channel 1 or 2, its body in frames of up to the frame_max."""
    channel = draw(st.integers(1, 2))
    body = body_of(draw(st.integers(0, 200)), draw(st.integers(0, 250)))
    step = draw(st.integers(1, SMALL_FRAME_MAX))
    out = [raw(FRAME_METHOD, channel, PUBLISH_METHOD), raw(FRAME_HEADER, channel, header_payload(len(body)))]
    out += [raw(FRAME_BODY, channel, body[i : i + step]) for i in range(0, len(body), step)]
    return out


@st.composite
def wrong_unit(draw: Any) -> list[bytes]:
    """Something a client should not send: a body frame over frame_max, one with a bad end byte, or one the
    header did not announce; a method or header in the middle of a body."""
    channel = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["body", "bad_end", "method", "header", "over_frame_max"]))
    payload = b"x" * draw(st.integers(0, 40))
    if kind == "body":
        return [raw(FRAME_BODY, channel, payload)]
    if kind == "bad_end":
        return [raw(draw(st.sampled_from([FRAME_BODY, FRAME_METHOD])), channel, payload, end=0)]
    if kind == "method":
        return [raw(FRAME_METHOD, channel, PUBLISH_METHOD)]
    if kind == "header":
        return [raw(FRAME_HEADER, channel, header_payload(draw(st.integers(0, 120))))]
    return [raw(FRAME_BODY, channel, b"y" * (SMALL_FRAME_MAX + 1))]


DAMAGES = ["bad_end", "over_frame_max", "too_long", "method", "header"]


def damage(frames: list[bytes], i: int, kind: str) -> list[bytes]:
    """A publish's frames with its i-th body frame (i >= 2) damaged as `kind` says."""
    channel = struct.unpack_from(">H", frames[i], 1)[0]
    before, frame_i, after = frames[:i], frames[i], frames[i + 1 :]
    if kind == "bad_end":
        return [*before, frame_i[:-1] + b"\x00", *after]
    if kind == "over_frame_max":
        return [*before, raw(FRAME_BODY, channel, b"y" * (SMALL_FRAME_MAX + 1)), *after]
    if kind == "too_long":
        return [*before, raw(FRAME_BODY, channel, frame_i[7:-1] + b"z"), *after]
    if kind == "method":
        return [*before, raw(FRAME_METHOD, channel, PUBLISH_METHOD), frame_i, *after]
    return [*before, raw(FRAME_HEADER, channel, header_payload(10)), frame_i, *after]


@st.composite
def damaged_publish(draw: Any) -> list[bytes]:
    frames = draw(publish_unit())
    if len(frames) < 3:
        return frames
    return damage(frames, draw(st.integers(2, len(frames) - 1)), draw(st.sampled_from(DAMAGES)))


@st.composite
def interleaved(draw: Any) -> bytes:
    """Units whose frames are interleaved at random (each unit's own frames stay in order)."""
    units = draw(st.lists(st.one_of(publish_unit(), publish_unit(), damaged_publish(), wrong_unit()), max_size=6))
    out: list[bytes] = []
    while units:
        i = draw(st.integers(0, len(units) - 1))
        out.append(units[i].pop(0))
        if not units[i]:
            units.pop(i)
    return b"".join(out)


@given(data=interleaved(), cuts=st.lists(st.integers(0, 2000), max_size=10))
@settings(max_examples=300, deadline=None)
def test_with_or_without_the_body_sink_the_same_messages_and_the_same_error(
    data: bytes, cuts: list[int], monkeypatch_module: pytest.MonkeyPatch
) -> None:
    monkeypatch_module.setattr(frames_module, "SINK_MIN", 1 << 62)
    without = run(data, [], SMALL_FRAME_MAX)
    monkeypatch_module.setattr(frames_module, "SINK_MIN", 1)
    assert run(data, cuts, SMALL_FRAME_MAX) == without


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_a_connection_closed_in_the_middle_of_a_large_body_lets_go_of_it() -> None:
    conn = Conn(new_broker())
    tracemalloc.start()
    try:
        conn.send(publish_frames(1, "", "q", bytes(8 * 1024 * 1024))[: 4 * 1024 * 1024])
        held = reader_memory()
        conn.session.connection_lost()
        left = reader_memory()  # the session object itself is still referenced here
    finally:
        tracemalloc.stop()
    assert held >= 4 * 1024 * 1024 - 65536
    assert left < 65536


def reader_memory() -> int:
    """Bytes allocated by the frame reader (since tracemalloc started) and not freed."""
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, frames_module.__file__)])
    return sum(stat.size for stat in snapshot.statistics("filename"))


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_damaged_large_body_gets_the_error_it_got_frame_by_frame(kind: str) -> None:
    body = body_of(3 * FRAME_MAX, 5)
    data = publish_frames(1, "", "q", body)
    frames, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">I", data, pos + 3)[0]
        frames.append(data[pos : pos + size + 8])
        pos += size + 8
    frames = damage(frames, 3, kind)
    if kind == "over_frame_max":  # over the real frame_max, as big bodies' frames are
        frames[3] = raw(FRAME_BODY, 1, b"y" * (FRAME_MAX + 1))
    damaged = b"".join(frames)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(frames_module, "SINK_MIN", 1 << 62)
        without = run(damaged, [], FRAME_MAX)
    assert without[1] is not None and without[0] == []
    assert run(damaged, [], FRAME_MAX) == without
    assert run(damaged, list(range(0, len(damaged), 100_000)), FRAME_MAX) == without
