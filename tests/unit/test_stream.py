"""Stream queues without sockets or a store (the in-memory log): RabbitMQ 3.10's rules for declaring and
consuming, x-stream-offset in every form, the offset header, tail consumers, retention by whole segments,
offset tracking and filters."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from fakes import ClientChannel, Conn, decode_frames, make_message, new_broker, publish_frames
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from amqpd import errors
from amqpd.broker.broker import Broker
from amqpd.broker.streams.args import parse_age_ms
from amqpd.broker.streams.log import OffsetMap
from amqpd.broker.streams.stream import FEED_BATCHES, FEED_BYTES, READ_BATCH, StreamQueue
from amqpd.config import Settings

STREAM = {"x-queue-type": "stream"}


@pytest.fixture
def broker() -> Broker:
    return new_broker()


@pytest.fixture
def client(broker: Broker) -> ClientChannel:
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments=STREAM)
    c.call(commands.Basic.Qos(prefetch_count=100))
    return c


def stream_of(client: ClientChannel, name: str = "s") -> StreamQueue:
    q = client.broker.vhosts["/"].queues[name]
    assert isinstance(q, StreamQueue)
    return q


def publish(client: ClientChannel, *bodies: bytes, **properties: Any) -> None:
    for b in bodies:
        client.publish("", "s", b, **properties)


def read(client: ClientChannel, offset: Any = None, tag: str = "", **arguments: Any) -> list[tuple[int, bytes]]:
    """Subscribe and return (x-stream-offset header, body) of everything delivered."""
    args = dict(arguments)
    if offset is not None:
        args["x-stream-offset"] = offset
    client.consume("s", tag, arguments=args)
    return offsets_and_bodies(client)


def offsets_and_bodies(client: ClientChannel) -> list[tuple[int, bytes]]:
    frames = [*client.pending, *client.conn.take_frames()]
    client.pending = []
    out: list[tuple[int, bytes]] = []
    for f in frames:
        if isinstance(f, commands.Basic.Deliver):
            out.append((-1, b""))
        elif hasattr(f, "properties") and out:
            out[-1] = (f.properties.headers["x-stream-offset"], b"")
        elif hasattr(f, "value") and out:
            out[-1] = (out[-1][0], out[-1][1] + f.value)
    return out


def error_of(call: Any, *args: Any, **kwargs: Any) -> errors.AMQPError:
    with pytest.raises(errors.AMQPError) as info:
        call(*args, **kwargs)
    return info.value


# -- declaring -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "prop"),
    [
        ({}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_a_stream_must_be_durable_shared_and_kept(broker: Broker, flags: dict, prop: str) -> None:
    exc = error_of(ClientChannel(broker).declare_queue, "t", arguments=STREAM, **flags)
    assert (exc.code, exc.connection_level) == (406, False)
    assert f"invalid property '{prop}'" in exc.text


@pytest.mark.parametrize(
    ("args", "detail"),
    [
        ({"x-max-age": "1x"}, "invalid_max_age"),
        ({"x-max-age": "foo"}, "invalid_max_age"),  # RabbitMQ 3.10 crashes with 541 here
        ({"x-max-age": "0D"}, "invalid_max_age"),
        ({"x-max-age": 5}, "{unacceptable_type,signedint}"),
        ({"x-stream-max-segment-size-bytes": -1}, "{value_negative,-1}"),
        ({"x-max-length": 10}, "of queue type rabbit_stream_queue"),
        ({"x-message-ttl": 10}, "of queue type rabbit_stream_queue"),
        ({"x-dead-letter-exchange": "x"}, "of queue type rabbit_stream_queue"),
    ],
)
def test_bad_stream_arguments_are_406(broker: Broker, args: dict, detail: str) -> None:
    exc = error_of(ClientChannel(broker).declare_queue, "t", durable=True, arguments={**STREAM, **args})
    assert (exc.code, exc.connection_level) == (406, False)
    assert detail in exc.text


def test_max_age_units_are_rabbitmqs() -> None:
    assert [parse_age_ms(v) for v in ("1Y", "2M", "3D", "4h", "5m", "6s")] == [
        365 * 86400_000,
        60 * 86400_000,
        3 * 86400_000,
        4 * 3600_000,
        5 * 60_000,
        6000,
    ]
    assert parse_age_ms("1D1h") is None


def test_redeclaring_with_another_max_age_is_406(client: ClientChannel) -> None:
    client.declare_queue("t", durable=True, arguments={**STREAM, "x-max-age": "1D"})
    exc = error_of(client.declare_queue, "t", durable=True, arguments={**STREAM, "x-max-age": "2D"})
    assert exc.code == 406 and "inequivalent arg 'x-max-age'" in exc.text


def test_declare_ok_counts_the_streams_messages_and_delete_ok_none(client: ClientChannel) -> None:
    publish(client, b"a", b"b")
    (ok,) = client.call(commands.Queue.Declare(queue="s", durable=True, arguments=STREAM))
    assert ok.message_count == 2
    (deleted,) = client.call(commands.Queue.Delete(queue="s"))
    assert deleted.message_count == 0


# -- what a stream refuses -------------------------------------------------------------------------------------


def test_get_and_purge_close_the_connection_with_540(client: ClientChannel) -> None:
    for method in (commands.Basic.Get(queue="s"), commands.Queue.Purge(queue="s")):
        exc = error_of(client.call, method)
        assert (exc.code, exc.connection_level) == (540, True)
        assert "not supported by stream queues" in exc.text


def test_no_ack_consumer_is_540_and_no_prefetch_is_406(broker: Broker) -> None:
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments=STREAM)
    exc = error_of(c.consume, "s")
    assert (exc.code, exc.connection_level) == (406, False)
    assert "consumer prefetch count is not set" in exc.text
    c = ClientChannel(broker, channel_id=2)
    c.call(commands.Basic.Qos(prefetch_count=10, global_=True))
    assert error_of(c.consume, "s").code == 406  # a global prefetch does not count
    c.call(commands.Basic.Qos(prefetch_count=10))
    exc = error_of(c.consume, "s", no_ack=True)
    assert (exc.code, exc.connection_level, exc.class_id, exc.method_id) == (540, True, 60, 20)


@pytest.mark.parametrize("settle", ["nack", "reject"])
def test_nack_and_reject_close_the_connection_with_540(client: ClientChannel, settle: str) -> None:
    publish(client, b"a")
    read(client, "first")
    exc = error_of(getattr(client, settle), 1)
    assert (exc.code, exc.connection_level, exc.method_id) == (540, True, 120 if settle == "nack" else 90)
    assert "basic.nack and basic.reject not supported" in exc.text


@pytest.mark.parametrize("settle", ["nack", "reject"])
@pytest.mark.parametrize("in_tx", [False, True], ids=["plain", "in a transaction"])
def test_a_refused_nack_leaves_nothing_unacked_once_its_connection_closes(settle: str, in_tx: bool) -> None:
    """540 closes the connection over a nack or reject of a stream's delivery, and with it go all of the
    connection's unacked deliveries: the named ones too (the stream's messages_unacknowledged back at 0, the
    classic queue's requeued)."""
    broker = new_broker()
    con = Conn(broker)
    for method in (
        commands.Queue.Declare(queue="q"),
        commands.Queue.Declare(queue="s", durable=True, arguments=STREAM),
        commands.Basic.Qos(prefetch_count=10),
        *([commands.Tx.Select()] if in_tx else []),
    ):
        con.send(frame.marshal(method, 1))
    for n in range(3):
        con.send(publish_frames(1, "", "q", b"q%d" % n) + publish_frames(1, "", "s", b"s%d" % n))
    if in_tx:
        con.send(frame.marshal(commands.Tx.Commit(), 1))
    con.send(frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="cq"), 1))
    args = {"x-stream-offset": "first"}
    con.send(frame.marshal(commands.Basic.Consume(queue="s", consumer_tag="cs", arguments=args), 1))
    queues = broker.vhosts["/"].queues
    assert (queues["q"].unacked, queues["s"].unacked) == (3, 3)  # tags 1-3 the queue's, 4-6 the stream's
    settled = commands.Basic.Nack(5, multiple=True) if settle == "nack" else commands.Basic.Reject(5, requeue=True)
    con.send(frame.marshal(settled, 1))
    if in_tx:  # an ack after it in the transaction, never applied, is given back all the same
        con.send(frame.marshal(commands.Basic.Ack(6), 1) + frame.marshal(commands.Tx.Commit(), 1))
    closing = [f for _ch, f in decode_frames(con.session.take_output()) if isinstance(f, commands.Connection.Close)]
    assert [f.reply_code for f in closing] == [540]
    assert (queues["q"].unacked, queues["s"].unacked, len(queues["q"].ready)) == (0, 0, 3)


@pytest.mark.parametrize("offset", ["1x", "foo", "5", True, 1.5])
def test_an_unreadable_offset_is_406_not_rabbitmqs_541(client: ClientChannel, offset: Any) -> None:
    exc = error_of(client.consume, "s", arguments={"x-stream-offset": offset})
    assert (exc.code, exc.connection_level) == (406, False)
    assert "invalid arg 'x-stream-offset'" in exc.text


def test_consumer_priority_is_refused(client: ClientChannel) -> None:
    assert error_of(client.consume, "s", arguments={"x-priority": 1}).code == 406


# -- reading -------------------------------------------------------------------------------------------------


def test_each_delivery_carries_its_offset_and_keeps_every_header(client: ClientChannel) -> None:
    publish(client, b"a", b"b", headers={"t": {"n": 1}, "arr": [1, "x"]})
    client.consume("s", arguments={"x-stream-offset": "first"})
    frames = [f for f in [*client.pending, *client.conn.take_frames()] if hasattr(f, "properties")]
    assert [f.properties.headers for f in frames] == [
        {"t": {"n": 1}, "arr": [1, "x"], "x-stream-offset": 0},
        {"t": {"n": 1}, "arr": [1, "x"], "x-stream-offset": 1},
    ]


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        ("first", [0, 1, 2, 3]),
        ("last", [3]),
        ("next", []),
        (None, []),
        (2, [2, 3]),
        (-5, [0, 1, 2, 3]),
        (datetime.datetime(2000, 1, 1), [0, 1, 2, 3]),
        (datetime.datetime(2999, 1, 1), []),
        ("1h", [0, 1, 2, 3]),
    ],
)
def test_every_form_of_x_stream_offset(client: ClientChannel, offset: Any, expected: list[int]) -> None:
    publish(client, b"0", b"1", b"2", b"3")
    assert [o for o, _ in read(client, offset)] == expected


def test_an_offset_past_the_end_waits_until_it_exists(client: ClientChannel) -> None:
    publish(client, b"0", b"1")
    assert read(client, 4) == []
    publish(client, b"2", b"3", b"4", b"5")
    assert offsets_and_bodies(client) == [(4, b"4"), (5, b"5")]


def test_a_consumer_at_the_tail_gets_new_messages(client: ClientChannel) -> None:
    publish(client, b"old")
    assert read(client, "next") == []
    publish(client, b"new")
    assert offsets_and_bodies(client) == [(1, b"new")]


def test_acks_remove_nothing_many_consumers_read_at_their_own_offsets(client: ClientChannel) -> None:
    publish(client, b"0", b"1", b"2")
    assert [o for o, _ in read(client, "first", "a")] == [0, 1, 2]
    client.ack(3, multiple=True)
    assert [o for o, _ in read(client, 1, "b")] == [1, 2]
    assert [o for o, _ in read(client, "last", "c")] == [2]
    assert len(stream_of(client).ready) == 3


def test_prefetch_limits_a_replay_and_acks_move_it_on(broker: Broker) -> None:
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments=STREAM)
    c.call(commands.Basic.Qos(prefetch_count=2))
    publish(c, *[str(i).encode() for i in range(5)])
    assert [o for o, _ in read(c, "first")] == [0, 1]
    c.ack(2, multiple=True)
    assert [o for o, _ in offsets_and_bodies(c)] == [2, 3]


def test_unacked_deliveries_are_not_redelivered_when_the_channel_closes(broker: Broker, client: ClientChannel) -> None:
    publish(client, b"0")
    read(client, "first")
    client.ch.shutdown()
    other = ClientChannel(broker, channel_id=2)
    other.call(commands.Basic.Qos(prefetch_count=5))
    assert [o for o, _ in read(other, "next")] == []


# -- retention -------------------------------------------------------------------------------------------------


def test_max_length_bytes_drops_whole_segments_oldest_first(broker: Broker) -> None:
    c = ClientChannel(broker)
    c.declare_queue(
        "s", durable=True, arguments={**STREAM, "x-max-length-bytes": 300, "x-stream-max-segment-size-bytes": 100}
    )
    c.call(commands.Basic.Qos(prefetch_count=1000))
    publish(c, *[b"x" * 40 for _ in range(20)])
    offsets = [o for o, _ in read(c, "first")]
    assert offsets == list(range(offsets[0], 20))  # dense from the first kept to the last
    assert offsets[0] > 0 and offsets[0] % 2 == 0  # whole segments of two 50-byte messages went
    stats = stream_of(c).stream_stats()
    assert stats["first_offset"] == offsets[0] and stats["last_offset"] == 19
    assert stats["size_bytes"] <= 300 + 100


def test_max_age_drops_segments_older_than_it_when_a_segment_fills(broker: Broker) -> None:
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments={**STREAM, "x-max-age": "10s", "x-stream-max-segment-size-bytes": 100})
    c.call(commands.Basic.Qos(prefetch_count=1000))
    publish(c, *[b"x" * 40 for _ in range(4)])
    q = stream_of(c)
    for segment in q._segments[:-1]:
        segment[2] -= 60_000  # they were written a minute ago
    publish(c, *[b"x" * 40 for _ in range(2)])
    assert q.log.first == 4
    assert [o for o, _ in read(c, "first")] == [4, 5]


# -- offset tracking and filters -------------------------------------------------------------------------------


def test_a_tracking_consumer_resumes_after_its_last_ack(broker: Broker, client: ClientChannel) -> None:
    publish(client, *[str(i).encode() for i in range(6)])
    track = {"x-stream-automatic-offset-tracking": True}
    assert [o for o, _ in read(client, "first", "reader", **track)] == list(range(6))
    client.ack(3, multiple=True)  # offsets 0, 1, 2
    client.ch.shutdown()
    again = ClientChannel(broker, channel_id=2)
    again.call(commands.Basic.Qos(prefetch_count=100))
    assert [o for o, _ in read(again, "first", "reader", **track)] == [3, 4, 5]
    assert stream_of(again).stream_stats()["consumers"]["reader"]["offset"] == 3


def test_filters_deliver_matching_values_and_optionally_unfiltered(client: ClientChannel) -> None:
    for value in ("red", "blue", None, "red"):
        headers = {"x-stream-filter-value": value} if value else {}
        client.publish("", "s", (value or "none").encode(), headers=headers)
    assert [b for _, b in read(client, "first", "", **{"x-stream-filter": "red"})] == [b"red", b"red"]
    got = read(client, "first", "", **{"x-stream-filter": ["blue"], "x-stream-match-unfiltered": True})
    assert [b for _, b in got] == [b"blue", b"none"]


# -- dense offsets ---------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 3)), max_size=30), st.data())
def test_dense_offsets_map_to_store_offsets_like_a_list(steps: list[tuple[int, int]], data: st.DataObject) -> None:
    """Model: the dense offsets are list indexes into the stream's store offsets, from a moving first."""
    runs, model, first, store = OffsetMap(0), [], 0, 0
    for count, gap in steps:
        store += gap
        for _ in range(count):
            assert runs.append(store) == first + len(model)
            model.append(store)
            store += 1
        if model and data.draw(st.booleans()):
            cut = data.draw(st.integers(first, first + len(model)))
            assert runs.drop_before(cut) == model[: cut - first]
            model, first = model[cut - first :], cut
    assert runs.store_offsets(first, first + len(model)) == model
    for i, s in enumerate(model):
        assert runs.dense_at_or_after(s) == first + i
        assert runs.dense_at_or_after(s - 1) <= first + i
    assert runs.dense_at_or_after(store + 10) == first + len(model)


# -- deduplication (LavinMQ's arguments) -------------------------------------------------------------------------


def test_a_repeated_message_id_is_dropped_and_still_confirmed(broker: Broker) -> None:
    c = ClientChannel(broker)
    c.declare_queue("q", arguments={"x-message-deduplication": True})
    c.call(commands.Confirm.Select())
    for message_id in ("a", "b", "a", None):
        c.publish("", "q", (message_id or "none").encode(), message_id=message_id)
    acks = [f for f in c.conn.take_frames() if isinstance(f, commands.Basic.Ack)]
    assert acks and acks[-1].delivery_tag == 4 and not any(isinstance(f, commands.Basic.Nack) for f in acks)
    q = broker.vhosts["/"].queues["q"]
    assert [e.msg.body for e in q.ready] == [b"a", b"b", b"none"]  # no id: never a duplicate


def test_dedup_by_header_with_a_cache_size_and_ttl(broker: Broker, client: ClientChannel) -> None:
    client.declare_queue(
        "d",
        durable=True,
        arguments={**STREAM, "x-message-deduplication": True, "x-deduplication-header": "id", "x-cache-size": 2},
    )
    for i in ("1", "2", "1", "3", "1"):  # "1" is forgotten when "3" fills the cache of two
        client.publish("", "d", i.encode(), headers={"id": i})
    q = broker.vhosts["/"].queues["d"]
    assert len(q.ready) == 4
    dedup = q.dedup
    assert dedup is not None
    dedup.ttl_ms = 10
    msg = make_message("", "d", b"x", headers={"id": "9"})
    assert not dedup.is_duplicate(msg, 1000) and dedup.is_duplicate(msg, 1005)
    assert not dedup.is_duplicate(msg, 1011)  # the window ran out


@pytest.mark.parametrize(
    "args", [{"x-message-deduplication": "yes"}, {"x-cache-size": 0}, {"x-deduplication-header": 5}]
)
def test_bad_dedup_arguments_are_406(broker: Broker, args: dict) -> None:
    exc = error_of(ClientChannel(broker).declare_queue, "q", arguments=args)
    assert (exc.code, exc.connection_level) == (406, False)


def test_a_void_offset_tracks_from_the_first_message(broker: Broker, client: ClientChannel) -> None:
    publish(client, b"0", b"1", b"2")
    assert [o for o, _ in read(client, None, "t", **{"x-stream-offset": None})] == [0, 1, 2]
    client.ack(1)
    client.ch.shutdown()
    again = ClientChannel(broker, channel_id=2)
    again.call(commands.Basic.Qos(prefetch_count=10))
    assert [o for o, _ in read(again, None, "t", **{"x-stream-offset": None})] == [1, 2]


def test_stream_stats_for_management(client: ClientChannel) -> None:
    q = stream_of(client)
    assert q.stream_stats()["last_offset"] is None
    publish(client, b"0", b"1", b"2")
    read(client, "first", "a", **{"x-stream-automatic-offset-tracking": True})
    client.ack(2, multiple=True)
    stats = q.stream_stats()
    assert {k: stats[k] for k in ("first_offset", "last_offset", "committed_offset", "messages", "segments")} == {
        "first_offset": 0,
        "last_offset": 2,
        "committed_offset": 2,
        "messages": 3,
        "segments": 1,
    }
    assert stats["first_timestamp"] is not None and stats["size_bytes"] > 0
    assert stats["consumers"]["a"] == {"offset": 2, "lag": 1, "tracked": True, "attached": True}
    assert q.offset_for_timestamp(0) == 0 and q.offset_for_timestamp(2**62) == 3


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("publish"), st.integers(1, 6)),
            st.tuples(st.just("subscribe"), st.one_of(st.sampled_from(["first", "last", "next"]), st.integers(0, 40))),
            st.tuples(st.just("ack"), st.integers(0, 3)),
        ),
        max_size=25,
    )
)
def test_model_every_consumer_reads_the_log_densely_from_its_start(ops: list[tuple[str, Any]]) -> None:
    """Random publishes, subscriptions at any offset and acks, with retention dropping segments: offset n is
    always the n-th message published, and each consumer gets consecutive offsets except where retention
    dropped the ones it had not read yet (it then goes on from the first kept, as on RabbitMQ)."""
    broker = new_broker()
    c = ClientChannel(broker)
    c.declare_queue(
        "s", durable=True, arguments={**STREAM, "x-max-length-bytes": 120, "x-stream-max-segment-size-bytes": 40}
    )
    c.call(commands.Basic.Qos(prefetch_count=3))
    log = stream_of(c).log
    published = 0
    last: dict[str, int | None] = {}
    for op, arg in ops:
        if op == "publish":
            for _ in range(arg):
                c.publish("", "s", b"%d" % published)
                published += 1
        elif op == "subscribe":
            last[c.consume("s", f"c{len(last)}", arguments={"x-stream-offset": arg})] = None
        elif c.ch.unacked:
            c.ack(sorted(c.ch.unacked)[min(arg, len(c.ch.unacked) - 1)], multiple=True)
        frames = [*c.pending, *c.conn.take_frames()]
        c.pending = []
        for f in frames:
            if isinstance(f, commands.Basic.Deliver):
                tag = f.consumer_tag
            elif hasattr(f, "properties"):
                offset = f.properties.headers["x-stream-offset"]
                previous = last[tag]
                assert previous is None or offset == previous + 1 or previous + 1 < log.first <= offset
                assert offset < published
                last[tag] = offset
            elif hasattr(f, "value"):
                assert f.value == b"%d" % last[tag]  # offset n is the n-th message


def test_a_filter_that_matches_little_yields_to_the_loop_between_reads() -> None:
    later: list[Any] = []
    broker = Broker(Settings(), scheduler=lambda delay, fn: later.append(fn) or object())
    c = ClientChannel(broker)
    c.declare_queue("s", durable=True, arguments=STREAM)
    c.call(commands.Basic.Qos(prefetch_count=10))
    total = FEED_BATCHES * READ_BATCH * 2 + 5
    for i in range(total):
        c.publish("", "s", b"x", headers={"x-stream-filter-value": "wanted" if i == total - 1 else "other"})
    got = read(c, "first", "", **{"x-stream-filter": "wanted"})
    assert got == [] and later  # one dispatch read a bounded stretch, then asked for another turn
    turns = 0
    while later and not got:
        later.pop(0)()
        got = offsets_and_bodies(c)
        turns += 1
    assert got == [(total - 1, b"x")] and turns >= 2


BIG = 64 << 10  # a body of one frame (the fake connection's frame_max is 128 KiB)
BIG_COUNT = 4 * FEED_BYTES // BIG + 3  # a replay of several slices


def big_stream(scheduler: Any) -> ClientChannel:
    """A stream of BIG_COUNT messages of BIG bytes, and a client whose prefetch takes all of them at once."""
    c = ClientChannel(Broker(Settings(), scheduler=scheduler))
    c.declare_queue("s", durable=True, arguments=STREAM)
    c.call(commands.Basic.Qos(prefetch_count=BIG_COUNT))
    for i in range(BIG_COUNT):
        c.publish("", "s", b"%06d" % i + b"b" * (BIG - 6))
    return c


def test_a_replay_of_big_messages_yields_to_the_loop_between_slices() -> None:
    """The consumer's prefetch would take the whole stream: it comes in slices of about FEED_BYTES, one a
    loop turn, so that other connections' frames and confirms go between them. Nothing is lost or reordered."""
    later: list[Any] = []
    c = big_stream(lambda delay, fn: later.append(fn) or object())
    got = read(c, "first")
    slices = [len(got)]
    while later:
        later.pop(0)()
        more = offsets_and_bodies(c)
        slices.append(len(more))
        got += more
    assert [offset for offset, _ in got] == list(range(BIG_COUNT))
    assert all(body[:6] == b"%06d" % offset for offset, body in got)
    assert len(slices) >= 4 and max(slices) <= FEED_BYTES // BIG + 1


def test_another_task_runs_on_the_loop_before_a_long_replay_ends() -> None:
    async def replay_beside_another_task() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        c = big_stream(loop.call_later)
        delivered: list[tuple[int, bytes]] = []
        seen_by_other: list[int] = []

        async def other() -> None:
            seen_by_other.append(len(delivered) + len(offsets_and_bodies_kept(c, delivered)))

        c.consume("s", "", arguments={"x-stream-offset": "first"})
        task = asyncio.create_task(other())
        for _ in range(10 * BIG_COUNT):  # bounded: one loop turn per step
            offsets_and_bodies_kept(c, delivered)
            if len(delivered) == BIG_COUNT and task.done():
                break
            await asyncio.sleep(0)
        return seen_by_other[0], len(delivered)

    seen, total = asyncio.run(replay_beside_another_task())
    assert total == BIG_COUNT and 0 < seen < BIG_COUNT


def offsets_and_bodies_kept(c: ClientChannel, into: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """What was delivered since the last call, added to `into` too."""
    more = offsets_and_bodies(c)
    into += more
    return more


def test_a_stream_stamps_its_records_by_the_brokers_clock() -> None:
    """The broker's wall clock (injected here) is the only one: a stream's records take their time from it."""
    clock = [1_000_000_000_000]
    c = ClientChannel(new_broker(now_ms=lambda: clock[0]))
    c.declare_queue("s", durable=True, arguments=STREAM)
    c.publish("", "s", b"then")
    stream = c.broker.vhosts["/"].queues["s"]
    assert isinstance(stream, StreamQueue)
    ((_, record),) = stream.log.read(0, 1)
    assert record.timestamp_ms == clock[0]
