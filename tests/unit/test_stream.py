"""Stream queues without sockets or a store (the in-memory log): RabbitMQ 3.10's rules for declaring and
consuming, x-stream-offset in every form, the offset header, tail consumers, retention by whole segments,
offset tracking and filters."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from fakes import ClientChannel, new_broker
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from amqpd import errors
from amqpd.broker.broker import Broker
from amqpd.broker.stream import StreamQueue
from amqpd.broker.stream_args import parse_age_ms
from amqpd.broker.stream_log import OffsetRuns

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


@pytest.mark.parametrize(("flags", "prop"), [({}, "non-durable"), ({"durable": True, "exclusive": True},
                                               "exclusive-owner"), ({"durable": True, "auto_delete": True},
                                                                    "auto-delete")])
def test_a_stream_must_be_durable_shared_and_kept(broker: Broker, flags: dict, prop: str) -> None:
    exc = error_of(ClientChannel(broker).declare_queue, "t", arguments=STREAM, **flags)
    assert (exc.code, exc.connection_level) == (406, False)
    assert f"invalid property '{prop}'" in exc.text


@pytest.mark.parametrize(("args", "detail"), [
    ({"x-max-age": "1x"}, "invalid_max_age"),
    ({"x-max-age": "foo"}, "invalid_max_age"),  # RabbitMQ 3.10 crashes with 541 here
    ({"x-max-age": "0D"}, "invalid_max_age"),
    ({"x-max-age": 5}, "{unacceptable_type,signedint}"),
    ({"x-stream-max-segment-size-bytes": -1}, "{value_negative,-1}"),
    ({"x-max-length": 10}, "of queue type rabbit_stream_queue"),
    ({"x-message-ttl": 10}, "of queue type rabbit_stream_queue"),
    ({"x-dead-letter-exchange": "x"}, "of queue type rabbit_stream_queue"),
])
def test_bad_stream_arguments_are_406(broker: Broker, args: dict, detail: str) -> None:
    exc = error_of(ClientChannel(broker).declare_queue, "t", durable=True, arguments={**STREAM, **args})
    assert (exc.code, exc.connection_level) == (406, False)
    assert detail in exc.text


def test_max_age_units_are_rabbitmqs() -> None:
    assert [parse_age_ms(v) for v in ("1Y", "2M", "3D", "4h", "5m", "6s")] == [
        365 * 86400_000, 60 * 86400_000, 3 * 86400_000, 4 * 3600_000, 5 * 60_000, 6000]
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


@pytest.mark.parametrize(("offset", "expected"), [
    ("first", [0, 1, 2, 3]), ("last", [3]), ("next", []), (None, []), (2, [2, 3]), (-5, [0, 1, 2, 3]),
    (datetime.datetime(2000, 1, 1), [0, 1, 2, 3]), (datetime.datetime(2999, 1, 1), []), ("1h", [0, 1, 2, 3]),
])
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
    c.declare_queue("s", durable=True, arguments={**STREAM, "x-max-length-bytes": 300,
                                                    "x-stream-max-segment-size-bytes": 100})
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
    c.declare_queue("s", durable=True, arguments={**STREAM, "x-max-age": "10s",
                                                    "x-stream-max-segment-size-bytes": 100})
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
    runs, model, first, store = OffsetRuns(0), [], 0, 0
    for count, gap in steps:
        store += gap
        for _ in range(count):
            assert runs.append(store) == first + len(model)
            model.append(store)
            store += 1
        if model and data.draw(st.booleans()):
            cut = data.draw(st.integers(first, first + len(model)))
            assert runs.drop_before(cut) == model[: cut - first]
            model, first = model[cut - first:], cut
    assert runs.store_offsets(first, first + len(model)) == model
    for i, s in enumerate(model):
        assert runs.dense_at_or_after(s) == first + i
        assert runs.dense_at_or_after(s - 1) <= first + i
    assert runs.dense_at_or_after(store + 10) == first + len(model)
