"""Chunk layout 3 (amqpd/broker/streams/chunks.py: a runs table, then store frames as they lie on disk or bare
records) read into rows as layout 2 reads the same records (a differential on chunk_rows.Located), and which
layout a consumer gets for what it asks (x-amqpd-chunk-layout)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from fakes import ClientChannel, new_broker
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands
from test_spark_chunks import read, stream_with

import amqpd.broker.streams.chunks as chunks_module
from amqpd import errors
from amqpd.broker.streams.chunks import CONTENT_TYPES, encode_chunk, runs_table
from amqpd.spark.chunk_rows import chunk_batch
from amqpd.spark.wire import BrokerError, Chunks
from store.frame import HEADER_SIZE, append_frames
from store.record_codec import encode_record
from store.records import MessageRecord

PLAIN = struct.pack(">HHQH", 60, 0, 0, 0x1000) + b"\x02"  # a content header's bytes: persistent, nothing else


def record(body: bytes, routing_key: str) -> bytes:
    return encode_record(0, MessageRecord("", routing_key, PLAIN, body, 1_700_000_000_000), [])


def as_runs(payloads: list[bytes | None], cuts: list[int], framed: list[bool], first: int) -> bytes:
    """Layout 3 for the payloads: split at `cuts`, each piece as the store's frames when `framed` says so
    and its records are all of one size, else bare (a skipped record, None: length 0)."""
    runs: list[tuple[int, int, int]] = []
    parts: list[bytes] = []
    bounds = [0, *sorted(set(cuts)), len(payloads)]
    for (a, b), frames in zip(zip(bounds, bounds[1:], strict=False), framed, strict=False):
        piece = payloads[a:b]
        sizes = {len(p) if p is not None else -1 for p in piece}
        if frames and len(sizes) == 1 and -1 not in sizes:
            out = bytearray()
            append_frames(out, first + a, piece)  # type: ignore[arg-type]
            runs.append((len(piece), HEADER_SIZE, sizes.pop()))
            parts.append(bytes(out))
        else:
            runs += [(1, 0, len(p) if p is not None else 0) for p in piece]
            parts += [p for p in piece if p is not None]
    return b"".join([runs_table(runs), *parts])


def batch(bodies: list[tuple[bytes, int, int, int]], stop: int) -> dict[str, list[Any]]:
    chunks = Chunks(stop)
    for body, first, count, layout in bodies:
        chunks.add(body, first, count, layout)
    return chunk_batch("s", chunks, include_headers=False).to_pydict()


# bodies of a few sizes, so that runs of one size form and break; routing keys on either side of 12 bytes
sized = st.tuples(st.sampled_from([b"", b"a" * 5, b"b" * 40, b"c" * 100]), st.sampled_from(["s", "k" * 20]))


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(st.one_of(st.none(), sized), min_size=1, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=8),
    framed=st.lists(st.booleans(), min_size=9, max_size=9),
    first=st.integers(0, 1000),
    stop=st.integers(0, 50),
)
def test_layout_3_reads_as_the_same_rows_as_layout_2(
    messages: list[tuple[bytes, str] | None], cuts: list[int], framed: list[bool], first: int, stop: int
) -> None:
    payloads = [record(*m) if m is not None else None for m in messages]
    n = len(payloads)
    cuts = [c for c in cuts if c < n]
    old = batch([(encode_chunk(payloads), first, n, 2)], first + stop)
    new = batch([(as_runs(payloads, cuts, framed, first), first, n, 3)], first + stop)
    assert new == old
    kept = [first + i for i, p in enumerate(payloads) if p is not None and i < stop]
    assert new["offset"] == kept  # skipped records and offsets from the stop on (mid-run) are left out


def test_chunks_of_both_layouts_read_together_in_one_batch() -> None:
    payloads: list[bytes | None] = [record(b"%d" % i, "s") for i in range(10)]
    two = (encode_chunk(payloads[:5]), 0, 5, 2)
    three = (as_runs(payloads[5:], [2], [True, True], 5), 5, 5, 3)
    assert batch([two, three], 10)["body"] == [b"%d" % i for i in range(10)]


def test_a_layout_3_chunk_whose_runs_do_not_add_up_is_an_error() -> None:
    payloads: list[bytes | None] = [record(b"x" * 10, "s")] * 4
    body = as_runs(payloads, [], [True], 0)
    for broken, count, error in (
        (body[:-1], 4, "do not add up"),
        (body + b"\x00", 4, "do not add up"),
        (body, 5, "runs do not add up to its count"),
        (body[:10], 4, "shorter than its runs table"),
    ):
        with pytest.raises(BrokerError, match=error):
            batch([(broken, 0, count, 3)], 100)


def consume_chunks(arguments: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(content type, body) of the chunk deliveries a consumer with these arguments gets from a stream of 3."""
    c = ClientChannel(new_broker())
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    c.call(commands.Basic.Qos(prefetch_count=10))
    for i in range(3):
        c.publish("", "s", b"m%d" % i)
    c.consume("s", "", arguments={"x-stream-offset": "first", "x-amqpd-chunk": 10, **arguments})
    frames = [*c.pending, *c.conn.take_frames()]
    types = [f.properties.content_type for f in frames if hasattr(f, "properties")]
    bodies = [f.value for f in frames if hasattr(f, "value")]
    return list(zip(types, bodies, strict=True))


def test_a_reader_gets_the_newest_layout_up_to_the_one_it_asks_for() -> None:
    assert [t for t, _ in consume_chunks({})] == [CONTENT_TYPES[2]]  # a reader older than layout 3
    assert [t for t, _ in consume_chunks({"x-amqpd-chunk-layout": 2})] == [CONTENT_TYPES[2]]
    ((kind, body),) = consume_chunks({"x-amqpd-chunk-layout": 3})
    assert kind == CONTENT_TYPES[3]
    runs, count, gap, length = struct.unpack_from(">4I", body)
    # an in-memory stream has no store frames: one run of bare records, all three of one size
    assert (runs, count, gap) == (1, 3, 0)
    assert len(body) == 16 + 3 * length
    assert [t for t, _ in consume_chunks({"x-amqpd-chunk-layout": 9})] == [CONTENT_TYPES[3]]  # newer than known


def test_a_layout_without_chunks_is_ignored_as_any_unknown_argument() -> None:
    c = ClientChannel(new_broker())
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    c.call(commands.Basic.Qos(prefetch_count=10))
    c.publish("", "s", b"m")
    c.consume("s", "", arguments={"x-stream-offset": "first", "x-amqpd-chunk-layout": "three"})
    frames = [*c.pending, *c.conn.take_frames()]
    assert [f.value for f in frames if hasattr(f, "value")] == [b"m"]  # one message, delivered as it is


@pytest.mark.parametrize("value", [1, 0, "3", True, 3.0])
def test_a_layout_that_is_not_an_integer_from_2_on_is_406(value: Any) -> None:
    with pytest.raises(errors.AMQPError) as info:
        consume_chunks({"x-amqpd-chunk-layout": value})
    assert info.value.code == 406
    assert "x-amqpd-chunk-layout" in info.value.reply_text


def test_a_newer_reader_reads_an_older_broker_that_ignores_the_layout_it_asks_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an amqpd from before layout 3 ignores x-amqpd-chunk-layout, as any argument it does not know: told
    # another name, the broker here does the same and sends layout 2
    monkeypatch.setattr(chunks_module, "LAYOUT_ARG", "x-not-this")
    client = stream_with([(b"m%d" % i, {"message_id": "id"} if i % 3 else {}) for i in range(30)])
    out, sock = read(client, monkeypatch, 2, 29, with_headers=False, chunk_records=4)
    assert sock.consumes[0]["x-amqpd-chunk-layout"] == 3
    assert len(sock.consumes) == 1  # read as chunks, not message by message after
    assert out["offset"] == list(range(2, 29))
    assert out["body"] == [b"m%d" % i for i in range(2, 29)]
    assert out["message_id"] == ["id" if i % 3 else None for i in range(2, 29)]
