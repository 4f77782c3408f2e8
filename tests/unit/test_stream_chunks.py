"""Chunk deliveries (x-amqpd-chunk) from a stream, without sockets or a store: what a raw AMQP client receives
(each chunk's first offset and count, its records as stored), credit and acks per chunk, a cancel with a
chunk unacked, retention while reading, records larger than frame_max, and the 406s."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from fakes import ClientChannel, new_broker
from pamqp import commands

from amqpd import errors
from amqpd.broker.streams.chunks import CHUNK_BYTES, CONTENT_TYPES, MAX_RECORDS
from amqpd.broker.streams.stream import StreamQueue
from store.record_codec import decode_record
from store.records import MessageRecord

STREAM = {"x-queue-type": "stream"}


def setup(prefetch: int = 100, **arguments: Any) -> ClientChannel:
    c = ClientChannel(new_broker())
    c.declare_queue("s", durable=True, arguments={**STREAM, **arguments})
    c.call(commands.Basic.Qos(prefetch_count=prefetch))
    return c


def publish(c: ClientChannel, *bodies: bytes, **properties: Any) -> None:
    for b in bodies:
        c.publish("", "s", b, **properties)


def records_of(body: bytes, count: int) -> list[MessageRecord | None]:
    """A chunk's body: `count` u32 lengths (big-endian), 0 for one skipped, then the records as stored."""
    out: list[MessageRecord | None] = []
    pos = 4 * count
    for n in struct.unpack_from(f">{count}I", body):
        out.append(decode_record(body[pos : pos + n])[2] if n else None)
        pos += n
    assert pos == len(body)
    return out


def chunks(c: ClientChannel) -> list[tuple[int, int, int, list[MessageRecord | None]]]:
    """(delivery tag, first offset, count, records) of each delivery sent since the last call."""
    frames = [*c.pending, *c.conn.take_frames()]
    c.pending = []
    out: list[tuple[int, int, int, list[MessageRecord | None]]] = []
    props: Any = None
    tag = 0
    body = b""
    for f in frames:
        if isinstance(f, commands.Basic.Deliver):
            if props is not None:
                out.append(_chunk(tag, props, body))
            tag, props, body = f.delivery_tag, None, b""
        elif hasattr(f, "properties"):
            props = f.properties
        elif hasattr(f, "value"):
            body += f.value
    if props is not None:
        out.append(_chunk(tag, props, body))
    return out


def _chunk(tag: int, props: Any, body: bytes) -> tuple[int, int, int, list[MessageRecord | None]]:
    assert props.content_type == CONTENT_TYPES[2]
    first, count = props.headers["x-stream-offset"], props.headers["x-amqpd-chunk"]
    records = records_of(body, count)
    assert len(records) == count
    return tag, first, count, records


def consume(c: ClientChannel, chunk: Any, offset: Any = "first", tag: str = "", **arguments: Any) -> str:
    return c.consume("s", tag, arguments={"x-stream-offset": offset, "x-amqpd-chunk": chunk, **arguments})


def positions(found: list[tuple[int, int, int, list[MessageRecord | None]]]) -> list[tuple[int, int]]:
    return [(first, count) for _, first, count, _ in found]


def test_a_chunk_consumer_gets_runs_of_records_as_stored_with_the_first_offset_and_count() -> None:
    c = setup()
    publish(c, *[f"m{i}".encode() for i in range(10)], message_id="id", headers={"h": 1})
    c.publish("amq.direct", "nowhere")  # unroutable: no offset
    consume(c, 4)
    found = chunks(c)
    assert positions(found) == [(0, 4), (4, 4), (8, 2)]
    records = [r for *_, rs in found for r in rs]
    assert [r.body for r in records if r] == [f"m{i}".encode() for i in range(10)]
    assert {(r.exchange, r.routing_key) for r in records if r} == {("", "s")}
    stored = stream_of(c).log.read(0, 10)
    assert [r.properties for r in records if r] == [rec.properties for _, rec in stored]  # as published
    assert [r.timestamp_ms for r in records if r] == [rec.timestamp_ms for _, rec in stored]


def test_each_chunk_is_one_delivery_for_credit_and_an_ack_settles_all_of_it() -> None:
    c = setup(prefetch=2)
    publish(c, *[b"x"] * 10)
    consume(c, 3)
    assert positions(chunks(c)) == [(0, 3), (3, 3)]
    c.ack(1)
    assert positions(chunks(c)) == [(6, 3)]
    c.ack(3, multiple=True)
    assert positions(chunks(c)) == [(9, 1)]


def test_a_consumer_at_the_tail_gets_what_is_there_without_waiting_for_a_full_chunk() -> None:
    c = setup()
    publish(c, b"old")
    consume(c, 1000, offset="next")
    assert chunks(c) == []
    publish(c, b"a", b"b")
    found = chunks(c)
    assert [r.body for *_, rs in found for r in rs if r] == [b"a", b"b"]
    assert found[0][1] == 1


def test_a_cancel_with_a_chunk_unacked_stops_it_and_a_new_consumer_starts_where_it_asks() -> None:
    c = setup(prefetch=1)
    publish(c, *[str(i).encode() for i in range(10)])
    tag = consume(c, 4, tag="first-reader")
    assert positions(chunks(c)) == [(0, 4)]
    c.call(commands.Basic.Cancel(consumer_tag=tag))
    c.ack(1)
    assert chunks(c) == []  # nothing more for a cancelled consumer
    consume(c, 4, offset=2, tag="second")
    assert positions(chunks(c)) == [(2, 4)]


def test_retention_while_reading_moves_the_next_chunk_to_the_first_offset_kept() -> None:
    c = setup(prefetch=1, **{"x-max-length-bytes": 300, "x-stream-max-segment-size-bytes": 100})
    publish(c, *[b"x" * 40 for _ in range(2)])
    consume(c, 2)
    assert positions(chunks(c)) == [(0, 2)]
    publish(c, *[b"y" * 40 for _ in range(20)])  # whole segments before offset 2 and beyond are dropped
    first = stream_of(c).log.first
    assert first > 2
    c.ack(1)
    found = chunks(c)
    assert found[0][1] == first
    assert [r.body for r in found[0][3] if r] == [b"y" * 40] * found[0][2]


def test_records_larger_than_frame_max_arrive_whole_in_chunks_that_stop_past_the_byte_limit() -> None:
    c = setup()
    big = [bytes([i]) * 200_000 for i in range(20)]  # each over frame_max; together four times CHUNK_BYTES
    assert len(big[0]) > c.conn.frame_max and sum(map(len, big)) > 3 * CHUNK_BYTES
    publish(c, *big, b"small")
    consume(c, 1000)
    found = chunks(c)
    assert [r.body for *_, rs in found for r in rs if r] == [*big, b"small"]
    assert [first for _, first, _, _ in found] == sorted({first for _, first, _, _ in found})
    assert len(found) > 1  # a chunk stops once it holds CHUNK_BYTES
    assert sum(count for _, _, count, _ in found) == 21


@pytest.mark.parametrize("value", [0, -1, MAX_RECORDS + 1, "100", True, 1.5])
def test_a_chunk_size_that_is_not_a_positive_integer_is_406(value: Any) -> None:
    c = setup()
    with pytest.raises(errors.AMQPError) as info:
        consume(c, value)
    assert info.value.code == 406
    assert "x-amqpd-chunk" in info.value.reply_text


@pytest.mark.parametrize(
    "arguments",
    [{"x-stream-filter": "a"}, {"x-stream-automatic-offset-tracking": True}],
    ids=["filter", "tracking"],
)
def test_chunks_with_a_filter_or_offset_tracking_are_406(arguments: dict) -> None:
    c = setup()
    with pytest.raises(errors.AMQPError) as info:
        consume(c, 10, **arguments)
    assert info.value.code == 406
    assert "not supported with" in info.value.reply_text


def stream_of(c: ClientChannel) -> StreamQueue:
    q = c.broker.vhosts["/"].queues["s"]
    assert isinstance(q, StreamQueue)
    return q


def test_without_the_argument_deliveries_stay_one_message_each() -> None:
    c = setup()
    publish(c, b"a", b"b")
    c.consume("s", "", arguments={"x-stream-offset": "first"})
    frames = [*c.pending, *c.conn.take_frames()]
    headers = [f.properties for f in frames if hasattr(f, "properties")]
    assert [h.headers["x-stream-offset"] for h in headers] == [0, 1]
    assert {h.content_type for h in headers} == {None}


def _deliver_get(c: ClientChannel) -> int:
    from amqpd.mgmt.objects import queue_info
    from amqpd.mgmt.stats import Rates

    return int(queue_info(stream_of(c), Rates())["message_stats"]["deliver_get"])


def test_the_management_api_counts_every_record_a_chunk_or_a_filtered_consumer_got() -> None:
    """The stream's deliver_get (and its rate) counts records however they went out: by the batched replay, in
    chunks, or one by one to a filtered consumer."""
    c = setup()
    publish(c, *[f"m{i}".encode() for i in range(10)])
    consume(c, 4)
    assert positions(chunks(c)) == [(0, 4), (4, 4), (8, 2)]
    assert _deliver_get(c) == 10
    publish(c, b"red", headers={"x-stream-filter-value": "red"})
    publish(c, b"blue", headers={"x-stream-filter-value": "blue"})
    assert sum(count for _, _, count, _ in chunks(c)) == 2
    c.consume("s", "filtered", arguments={"x-stream-offset": 10, "x-stream-filter": "red"})
    assert [body for _, body in c.deliveries()][-1:] == [b"red"]
    assert _deliver_get(c) == 10 + 2 + 1  # the chunk consumer got the two new ones, the filtered one "red"
