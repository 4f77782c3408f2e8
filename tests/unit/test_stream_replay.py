"""The batched stream replay (amqpd/broker/streams/replay.py) against the per-message path it replaces.

Two consumers of one stream, each on its own connection, are driven in lockstep: one unfiltered (the batched
replay, straight from the stored bytes, its deliveries held as runs of offsets) and one with a filter that every
message passes (x-stream-match-unfiltered and every filter value used: the per-message path, one
StreamDelivery and StreamEntry per message). They must receive byte for byte the same frames — delivery tags,
the x-stream-offset (and x-stream-timestamp) header, every property, bodies split at frame_max, redelivered
flags — under the same prefetch, start offset and acks in random order, with messages arriving at the tail
while they read, and report the same offsets (tracked ones too)."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from unittest.mock import patch

import anyio
from fakes import ClientChannel, FakeTransport, new_broker, publish_frames
from fakes import messages as grouped
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame, header

from amqpd.broker.broker import Broker
from amqpd.broker.streams import log as stream_log
from amqpd.broker.streams import replay as stream_replay
from amqpd.broker.streams.cursor import StreamRun
from amqpd.broker.streams.offsets import OffsetSet
from amqpd.broker.streams.stream import StreamQueue
from amqpd.config import Settings
from amqpd.session.connection import Session
from store import MessageRecord, MessageStore, segment
from store.record_codec import encode_record
from store.segment_log import SegmentLog

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_FRAME = struct.Struct(">BHI")
Frame = tuple[int, int, bytes]


def open_session(broker: Broker, frame_max: int) -> Session:
    s = Session(broker, FakeTransport(), "test")
    s.feed(PROTOCOL_HEADER)
    for method in (
        commands.Connection.StartOk({"product": "test", "capabilities": {}}, "PLAIN", "\0guest\0guest", "en_US"),
        commands.Connection.TuneOk(2047, frame_max, 0),
        commands.Connection.Open("/"),
    ):
        s.feed(frame.marshal(method, 0))
    s.feed(frame.marshal(commands.Channel.Open(), 1))
    s.take_output()
    return s


def stream_session(store: MessageStore | None, frame_max: int) -> tuple[Broker, Session]:
    """A broker on `store` with a session on channel 1 that has declared the stream "s"."""
    broker = Broker(Settings(), store=store)
    pub = open_session(broker, frame_max)
    pub.feed(frame.marshal(commands.Queue.Declare(queue="s", durable=True, arguments={"x-queue-type": "stream"}), 1))
    return broker, pub


def frames(data: bytes, ctag: bytes) -> list[Frame]:
    """Every frame as (type, channel, payload), the consumer tag in basic.deliver and consume-ok cut out
    (the two consumers' tags differ; everything else must not)."""
    out: list[Frame] = []
    pos = 0
    while pos < len(data):
        kind, channel, size = _FRAME.unpack_from(data, pos)
        payload = data[pos + 7 : pos + 7 + size]
        assert data[pos + 7 + size] == 0xCE
        if kind == 1 and payload[:4] in (b"\x00\x3c\x00\x3c", b"\x00\x3c\x00\x15"):
            assert payload[4 : 5 + len(ctag)] == bytes((len(ctag),)) + ctag
            payload = payload[:4] + payload[5 + len(ctag) :]
        out.append((kind, channel, payload))
        pos += 8 + size
    return out


def delivery_tags(found: list[Frame]) -> list[int]:
    return [struct.unpack_from(">Q", p, 4)[0] for kind, _, p in found if kind == 1 and p[:4] == b"\x00\x3c\x00\x3c"]


def ack(tag: int, multiple: bool) -> bytes:
    return frame.marshal(commands.Basic.Ack(tag, multiple), 1)


TABLES = st.dictionaries(
    st.sampled_from(["k", "x-request-id", "n", "nested", "list"]),
    st.one_of(
        st.text(max_size=8),
        st.integers(-(2**31), 2**31 - 1),
        st.booleans(),
        st.just({"a": 1, "b": "c"}),
        st.just([1, "two", {"three": 3}]),
    ),
    max_size=4,
)
PROPERTIES = st.fixed_dictionaries(
    {},
    optional={
        "content_type": st.sampled_from(["application/json", "text/plain", ""]),
        "content_encoding": st.sampled_from(["gzip", "utf-8"]),
        "headers": TABLES,
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 9),
        "correlation_id": st.text("abc123", max_size=12),
        "message_id": st.text("abc123", max_size=12),
        "timestamp": st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
        "message_type": st.just("event"),
        "app_id": st.just("app"),
    },
)
FILTER_VALUES = ["x", "y"]


@st.composite
def messages(draw: st.DrawFn, frame_max: int) -> list[tuple[dict[str, Any], bytes]]:
    """1 to 40 messages, some in runs of one layout (the same properties and body size, other body bytes:
    what stream_replay._encode_uniform and the store's _alike_frames take in one step)."""
    out: list[tuple[dict[str, Any], bytes]] = []
    count = draw(st.integers(1, 40))
    while len(out) < count:
        props = draw(PROPERTIES)
        value = draw(st.sampled_from([None, *FILTER_VALUES]))
        if value is not None:
            props["headers"] = {**props.get("headers", {}), "x-stream-filter-value": value}
        # small; around VIEW_FROM up to one frame (a body sent as a view of its record); several frames
        size = draw(
            st.one_of(
                st.integers(0, 300),
                st.integers(stream_replay.VIEW_FROM - 2, frame_max - 8),
                st.integers(frame_max - 10, 2 * frame_max + 20),
            )
        )
        for _ in range(min(draw(st.sampled_from([1, 1, 3, 12])), count - len(out))):
            out.append((props, bytes([65 + len(out) % 26]) * size))
    return out


def run(scenario: Callable[[MessageStore | None], Awaitable[None]], stored: bool) -> None:
    async def main() -> None:
        if not stored:
            await scenario(None)
            return
        with tempfile.TemporaryDirectory() as d:
            store = MessageStore(d, fsync="none")
            await store.open()
            try:
                await scenario(store)
            finally:
                await store.close()

    anyio.run(main)


async def settle(store: MessageStore | None) -> None:
    """Published messages are committed and the tail consumers have been told."""
    if store is not None:
        await store.flush()
        await store.reads_done()
    for _ in range(3):
        await anyio.sleep(0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_batched_replay_sends_what_the_per_message_path_sends(data: st.DataObject) -> None:
    frame_max = data.draw(st.sampled_from([4096, 131072]), "frame_max")
    msgs = data.draw(messages(frame_max), "messages")
    before = data.draw(st.integers(0, len(msgs)), "published before consuming")
    offset = data.draw(st.sampled_from(["first", "last", "next", None, 0, 3, len(msgs) + 2]), "x-stream-offset")
    prefetch = data.draw(st.integers(1, 40), "prefetch")
    with_time = data.draw(st.booleans(), "x-stream-timestamp")
    tracking = data.draw(st.booleans(), "tracking")
    stored = data.draw(st.booleans(), "with a store")
    chunk = data.draw(st.sampled_from([2, 3, 7, stream_log.RAW_CHUNK]), "raw chunk")  # small: chunk edges
    uniform_min = data.draw(st.sampled_from([1, 2, stream_replay.UNIFORM_MIN]), "records for a uniform encoding")
    alike_min = data.draw(st.sampled_from([1, 2, segment.ALIKE_MIN]), "frames for a check all at once")

    async def scenario(store: MessageStore | None) -> None:
        broker, pub = stream_session(store, frame_max)

        def publish(batch: list[tuple[dict[str, Any], bytes]]) -> None:
            for props, body in batch:
                pub.feed(publish_frames(1, "", "s", body, frame_max=frame_max, **props))
            pub.take_output()

        publish(msgs[:before])
        await settle(store)
        args: dict[str, Any] = {}
        if offset is not None:
            args["x-stream-offset"] = offset
        if with_time:
            args["x-stream-timestamp"] = True
        if tracking:
            args["x-stream-automatic-offset-tracking"] = True
        everything = {"x-stream-filter": FILTER_VALUES, "x-stream-match-unfiltered": True}
        batched, each = open_session(broker, frame_max), open_session(broker, frame_max)
        for session, tag, extra in ((batched, "ca", {}), (each, "cb", everything)):
            session.feed(frame.marshal(commands.Basic.Qos(prefetch_count=prefetch), 1))
            session.feed(
                frame.marshal(commands.Basic.Consume(queue="s", consumer_tag=tag, arguments={**args, **extra}), 1)
            )
        q = broker.vhosts["/"].queues["s"]
        assert isinstance(q, StreamQueue)
        publish(msgs[before:])
        await settle(store)
        pending: list[int] = []
        for _step in range(400):
            await settle(store)
            got_a, got_b = frames(batched.take_output(), b"ca"), frames(each.take_output(), b"cb")
            assert got_a == got_b
            pending += delivery_tags(got_a)
            stats = q.stream_stats()["consumers"]
            assert stats["ca"]["offset"] == stats["cb"]["offset"]
            assert batched.channels[1].unacked.count == each.channels[1].unacked.count
            if not pending:
                break
            choice = data.draw(st.sampled_from(["one", "multiple", "all"]), "ack")
            i = data.draw(st.integers(0, len(pending) - 1), "which")
            if choice == "one":
                acks, pending = ack(pending[i], False), pending[:i] + pending[i + 1 :]
            elif choice == "multiple":
                acks, pending = ack(pending[i], True), [t for t in pending if t > pending[i]]
            else:
                acks, pending = ack(0, True), []
            batched.feed(acks)
            each.feed(acks)
        else:
            raise AssertionError("the replay went on for too long")
        for session, tag in ((batched, "ca"), (each, "cb")):
            session.feed(frame.marshal(commands.Basic.Cancel(tag), 1))
        assert q.tracked.get("ca") == q.tracked.get("cb")
        assert q.unacked == 0

    with (
        patch.object(stream_log, "RAW_CHUNK", chunk),
        patch.object(stream_replay, "UNIFORM_MIN", uniform_min),
        patch.object(segment, "ALIKE_MIN", alike_min),
    ):
        run(scenario, stored)


def test_a_record_damaged_on_disk_is_skipped_by_both_paths_and_its_offset_stays_unused() -> None:
    async def scenario(store: MessageStore | None) -> None:
        assert store is not None
        broker, pub = stream_session(store, 131072)
        # as after a restart: the store has not noted what it wrote as checked (store/checked_runs.py)
        with patch.object(SegmentLog, "written", lambda self, batch: None):
            for n in range(10):
                pub.feed(publish_frames(1, "", "s", b"body-%d-" % n + b"z" * 50, headers={"n": n}))
            await settle(store)
        segment = next(iter(store._layout.segments.glob("*.seg")))  # noqa: SLF001 - damage a record by hand
        raw = bytearray(segment.read_bytes())
        raw[raw.index(b"body-5-") + 10] ^= 0xFF
        segment.write_bytes(bytes(raw))
        batched, each = open_session(broker, 131072), open_session(broker, 131072)
        everything = {"x-stream-filter": FILTER_VALUES, "x-stream-match-unfiltered": True}
        for session, tag, extra in ((batched, "ca", {}), (each, "cb", everything)):
            session.feed(frame.marshal(commands.Basic.Qos(prefetch_count=100), 1))
            arguments = {"x-stream-offset": "first", **extra}
            session.feed(frame.marshal(commands.Basic.Consume(queue="s", consumer_tag=tag, arguments=arguments), 1))
        await settle(store)
        got = frames(batched.take_output(), b"ca")
        assert got == frames(each.take_output(), b"cb")
        bodies = [p for kind, _, p in got if kind == 3]
        assert bodies == [b"body-%d-" % n + b"z" * 50 for n in range(10) if n != 5]
        # the tags run on past the hole; an ack of the last one acks all nine
        assert delivery_tags(got) == list(range(1, 10))
        batched.feed(ack(9, True))
        q = broker.vhosts["/"].queues["s"]
        assert q.stream_stats()["consumers"]["ca"]["offset"] == 10

    run(scenario, True)


@given(st.lists(st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 60), st.integers(1, 8)), max_size=60))
def test_a_cursors_unacked_offsets_are_the_set_they_model(ops: list[tuple[str, int, int]]) -> None:
    """OffsetSet (both paths keep a cursor's unacked offsets in it) against a plain set: adds come in offset
    order, as a cursor delivers; discards anywhere."""
    unacked, model, next_offset = OffsetSet(), set(), 0
    for op, at, length in ops:
        if op == "add":
            start = next_offset + at % 3  # filtered-out offsets leave holes
            unacked.add_offsets(range(start, start + length) if length % 2 else list(range(start, start + length)))
            model.update(range(start, start + length))
            next_offset = start + length
        else:
            unacked.discard_offsets(range(at, at + length) if length % 2 else [at, at + length])
            model.difference_update(range(at, at + length) if length % 2 else [at, at + length])
        assert unacked.first() == min(model, default=None)
        assert bool(unacked) == bool(model)
        assert {o for a, b in zip(unacked.starts, unacked.stops, strict=True) for o in range(a, b)} == model
        assert all(a < b for a, b in zip(unacked.starts, unacked.stops, strict=True))


def test_stream_acks_in_a_transaction_take_effect_at_commit_and_come_back_on_rollback() -> None:
    """A tx channel holds a stream consumer's acks until commit: the credit and the tracked offset move then;
    a rollback gives the acked deliveries back (acking them again is no unknown tag)."""
    broker = new_broker()
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    for n in range(10):
        c.publish("", "s", b"m%d" % n)
    c.call(commands.Basic.Qos(prefetch_count=4))
    c.call(commands.Tx.Select())
    c.consume("s", "t", arguments={"x-stream-offset": "first", "x-stream-automatic-offset-tracking": True})
    assert [m.delivery_tag for m, _ in c.deliveries()] == [1, 2, 3, 4]
    q = broker.vhosts["/"].queues["s"]
    assert isinstance(q, StreamQueue)
    c.ack(2, multiple=True)
    c.ack(4)
    assert c.deliveries() == []  # held by the transaction: no credit back yet
    c.call(commands.Tx.Rollback())
    c.ack(3)
    c.ack(1)
    committed = c.call(commands.Tx.Commit())
    assert [m.delivery_tag for m, _ in grouped(committed)] == [5, 6]  # two slots came back: 2 and 4 unacked
    assert q.stream_stats()["consumers"]["t"]["offset"] == 1  # tag 2's offset, the oldest unacked
    c.ack(6, multiple=True)
    assert [m.delivery_tag for m, _ in grouped(c.call(commands.Tx.Commit()))] == [7, 8, 9, 10]
    assert q.stream_stats()["consumers"]["t"]["offset"] == 6


def test_a_stream_delivery_left_unacked_past_the_consumer_timeout_is_overdue_until_acked() -> None:
    broker = new_broker()
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    for n in range(3):
        c.publish("", "s", b"m%d" % n)
    c.call(commands.Basic.Qos(prefetch_count=10))
    broker.clock = 1000.0
    c.consume("s", "t", arguments={"x-stream-offset": "first"})
    assert len(c.deliveries()) == 3
    assert not c.ch.overdue_ack(1000.0 + 30, 60)
    assert c.ch.overdue_ack(1000.0 + 61, 60)
    c.ack(3, multiple=True)
    assert not c.ch.overdue_ack(1000.0 + 61, 60)


def replay_counting_reads(body_size: int, count: int, consumers: int, prefetch: int) -> list[int]:
    """Publish `count` messages into a stored stream and replay them all with `consumers` consumers that
    ack each delivery: how many records each read of the store asked for."""
    asked: list[int] = []

    async def scenario(store: MessageStore | None) -> None:
        assert store is not None
        broker, pub = stream_session(store, 131072)
        for n in range(count):
            pub.feed(publish_frames(1, "", "s", b"%06d" % n + b"z" * body_size))
        await settle(store)
        read_payloads = store.read_payloads

        def counting(offsets: list[int]) -> list[bytes | None]:
            asked.append(len(offsets))
            return read_payloads(offsets)

        store.read_payloads = counting  # type: ignore[method-assign]
        sessions = [open_session(broker, 131072) for _ in range(consumers)]
        for s in sessions:
            s.feed(frame.marshal(commands.Basic.Qos(prefetch_count=prefetch), 1))
            arguments = {"x-stream-offset": "first"}
            s.feed(frame.marshal(commands.Basic.Consume(queue="s", consumer_tag="c", arguments=arguments), 1))
        received = [0] * consumers
        while min(received) < count:
            await settle(store)
            for i, s in enumerate(sessions):
                tags = delivery_tags(frames(s.take_output(), b"c"))
                assert tags or received[i] == count, "the replay stalled"
                received[i] += len(tags)
                for tag in tags:
                    s.feed(ack(tag, False))

    run(scenario, True)
    return asked


def test_consumers_replaying_together_read_each_small_record_from_the_store_once() -> None:
    chunk = stream_log.RAW_CHUNK
    asked = replay_counting_reads(100, 4 * chunk, consumers=3, prefetch=50)
    assert sum(asked) <= 4 * chunk + 50  # the first read, before record sizes are known, is the consumer's own
    assert max(asked) == chunk  # whole chunks


def test_big_records_are_read_ahead_by_bytes_never_a_chunk_of_them() -> None:
    """A consumer with prefetch 1 on a stream of 20 KiB messages: each read takes about RAW_CHUNK_BYTES of
    them ahead, not a chunk (20 MiB), and each record is read once."""
    asked = replay_counting_reads(20_000, 300, consumers=1, prefetch=1)
    assert sum(asked) == 300
    assert max(asked) * 20_000 <= stream_log.RAW_CHUNK_BYTES + 20_000


def test_one_channel_acking_a_queue_and_a_stream_together_settles_both() -> None:
    """A channel consuming a classic queue and a stream keeps their unacked deliveries in one table (a queue's
    runs of entries, a stream's runs of offsets); a multiple-ack settles every tag up to the one it names in
    both, whichever holds that tag."""
    broker = new_broker()
    c = ClientChannel(broker)
    c.declare_queue("q")
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    for n in range(3):
        c.publish("", "q", b"q%d" % n)
    for n in range(5):
        c.publish("", "s", b"s%d" % n)
    c.call(commands.Basic.Qos(prefetch_count=100))
    c.consume("q", "cq")
    c.consume("s", "cs", arguments={"x-stream-offset": "first"})
    c.publish("", "q", b"q3")
    c.publish("", "q", b"q4")
    got = [(m.delivery_tag, body) for m, body in c.deliveries()]
    assert got == [(1, b"q0"), (2, b"q1"), (3, b"q2")] + [(4 + n, b"s%d" % n) for n in range(5)] + [
        (9, b"q3"),
        (10, b"q4"),
    ]
    assert any(isinstance(run, StreamRun) for run in c.ch.unacked.ranges())  # the stream's went out in runs
    queues = broker.vhosts["/"].queues
    c.ack(5, multiple=True)  # a stream's tag: the queue's 1-3 go with the stream's 4-5
    assert (queues["q"].unacked, queues["s"].unacked) == (2, 3)
    c.ack(9, multiple=True)  # a queue's tag: the stream's 6-8 go with it
    assert (queues["q"].unacked, queues["s"].unacked) == (1, 0)
    c.ack(10)
    assert (queues["q"].unacked, queues["s"].unacked, len(queues["q"].ready)) == (0, 0, 0)


def stored(exchange: str, routing_key: str, body: bytes, **properties: Any) -> bytes:
    """A record's payload as the store keeps it, with these properties."""
    props = header.ContentHeader(0, len(body), commands.Basic.Properties(**properties)).marshal()
    return encode_record(0, MessageRecord(exchange, routing_key, props, body, 1_790_000_000_000), [])


def test_records_of_one_size_but_different_layouts_are_each_encoded_as_their_own() -> None:
    """The uniform encoding takes a run only when every record's layout is the first one's: records of
    equal length whose headers table, properties or route differ must come out as the general loop sends
    them (itself held to the per-message path by the differential test above)."""
    alike = [stored("", "s", b"body%d" % n, headers={"k": "ab"}, message_id="1234") for n in range(4)]
    payloads: list[bytes | None] = [
        *alike,
        stored("", "s", b"body4", headers={"k": "abcd"}, message_id="12"),  # a longer table
        stored("", "s", b"body5", headers={"k": "ab"}, content_type="1234"),  # another property
        stored("s", "", b"body6", headers={"k": "ab"}, message_id="1234"),  # another route
        *alike,
    ]
    assert len({len(p) for p in payloads if p is not None}) == 1
    for with_time in (False, True):
        with patch.object(stream_replay, "UNIFORM_MIN", 1):
            fast = stream_replay.encode_replay(1, b"\x01c", 5, 10, payloads, with_time, 131072)
            alone = stream_replay.encode_replay(1, b"\x01c", 5, 10, alike, with_time, 131072)
        with patch.object(stream_replay, "UNIFORM_MIN", len(payloads) + 1):
            plain = stream_replay.encode_replay(1, b"\x01c", 5, 10, payloads, with_time, 131072)
            plain_alone = stream_replay.encode_replay(1, b"\x01c", 5, 10, alike, with_time, 131072)
        assert fast == plain
        assert alone == plain_alone


def test_runs_of_one_layout_with_big_bodies_or_no_headers_table_take_the_uniform_encoding() -> None:
    """A fixed-size publisher's records with no headers table (the offset's table is added) or with a body
    sent as a view of its record go through the uniform encoding too, and come out as the general loop
    sends them; bodies of APART_FROM bytes or more as pieces of their own (written without a copy) by both."""
    for body_size in (100, stream_replay.VIEW_FROM, stream_replay.APART_FROM, 16384):
        for properties in ({"delivery_mode": 2}, {"headers": {"k": "ab"}, "content_type": "text/plain"}):
            bodies = [bytes([65 + n]) * body_size for n in range(4)]
            payloads: list[bytes | None] = [stored("", "s", body, **properties) for body in bodies]
            apart = bodies if body_size >= stream_replay.APART_FROM else []
            for with_time in (False, True):
                uniform = stream_replay._encode_uniform(1, b"\x01c", 5, range(10, 14), payloads, with_time, 131064)
                assert uniform is not None
                with patch.object(stream_replay, "UNIFORM_MIN", len(payloads) + 1):
                    plain, _ = stream_replay.encode_replay_pieces(1, b"\x01c", 5, 10, payloads, with_time, 131072)
                assert b"".join(uniform) == b"".join(plain), (body_size, properties, with_time)
                for pieces in (uniform, plain):
                    assert [bytes(p) for p in pieces if isinstance(p, memoryview)] == apart
