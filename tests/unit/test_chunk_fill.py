"""A chunk delivery from a stream on disk is filled over several read steps, and a step may wait
for the store's read worker (ReadPending): the chunk goes on from where it was when the records are in,
rather than being read again from its first record (which made a chunk's cost grow with the square of its
read steps on a first read of records of many sizes)."""

from __future__ import annotations

import random
from typing import Any
from unittest.mock import patch

import anyio
import pytest
from fakes import ClientChannel
from pamqp import commands
from test_reads_off_loop import Setup, broker_on_disk

from amqpd.broker.streams.stream import StreamQueue
from amqpd.spark.chunk_rows import chunk_batch
from amqpd.spark.wire import Chunks
from store import segment
from store.segment_log import SegmentLog

COUNT = 3_000


async def published_as_before_a_restart(setup: Setup, c: ClientChannel, bodies: list[bytes]) -> None:
    """Publish `bodies` to stream "s" and let the store write them, without it noting what it wrote as
    checked: as a broker finds them after a restart, where its first read checks every record."""
    with patch.object(SegmentLog, "written", lambda self, batch: None):
        for body in bodies:
            c.publish("", "s", body)
        await setup.settle()


def varied_bodies() -> list[bytes]:
    """JSON-like bodies of 80-400 bytes, no two neighbours alike in size: no run of one size forms."""
    rng = random.Random(31)
    return [b'{"id":%d,"pad":"' % i + b"x" * rng.randrange(60, 380) + b'"}' for i in range(COUNT)]


def chunk_rows(c: ClientChannel, layout: int) -> list[tuple[int, bytes]]:
    """(offset, body) of every row in the chunk deliveries sent since the last call."""
    got = Chunks(1 << 62)
    frames = [*c.pending, *c.conn.take_frames()]
    c.pending = []
    chunks: list[tuple[Any, bytearray]] = []
    for f in frames:
        if hasattr(f, "properties"):
            chunks.append((f.properties, bytearray()))
        elif hasattr(f, "value"):
            chunks[-1][1].extend(f.value)  # a body longer than frame_max comes in several frames
    for props, body in chunks:
        got.add(body, props.headers["x-stream-offset"], props.headers["x-amqpd-chunk"], layout)
    rows = chunk_batch("s", got, include_headers=False).to_pydict()
    return list(zip(rows["offset"], rows["body"], strict=True))


async def read_all(setup: Setup, c: ClientChannel, layout: int) -> list[tuple[int, bytes]]:
    """Rows until every record has come; each settle lets the store's read worker answer what it was asked."""
    rows: list[tuple[int, bytes]] = []
    for _ in range(2_000):  # bounded: a read that stopped coming fails below instead of hanging
        await setup.settle()
        rows += chunk_rows(c, layout)
        if len(rows) >= COUNT:
            break
    return rows


@pytest.mark.parametrize("layout", [2, 3])
def test_a_first_read_of_varied_sizes_takes_each_record_from_the_log_once(layout: int) -> None:
    async def scenario(setup: Setup) -> None:
        c = ClientChannel(setup.broker)
        c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
        bodies = varied_bodies()
        await published_as_before_a_restart(setup, c, bodies)
        stream = setup.broker.vhosts["/"].queues["s"]
        assert isinstance(stream, StreamQueue)
        taken = 0
        read_raw, read_checked = stream.log.read_raw, stream.log.read_checked

        def raw(start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
            nonlocal taken
            got = read_raw(start, limit, cached)
            taken += len(got[1])
            return got

        def checked(start: int, limit: int, budget: int) -> tuple[list[int], bytes]:
            nonlocal taken
            got = read_checked(start, limit, budget)
            taken += len(got[0])
            return got

        stream.log.read_raw, stream.log.read_checked = raw, checked  # type: ignore[method-assign]
        c.call(commands.Basic.Qos(prefetch_count=1000))
        chunk = {"x-amqpd-chunk": 5_000, "x-amqpd-chunk-layout": layout}
        c.consume("s", "c", arguments={"x-stream-offset": "first", **chunk})
        rows = await read_all(setup, c, layout)
        assert rows == list(enumerate(bodies))
        assert taken == COUNT  # each record once: a chunk that waited for the worker went on where it was

    async def main() -> None:
        async with broker_on_disk() as setup:
            await scenario(setup)

    anyio.run(main)


@pytest.mark.parametrize("sizes", ["one size", "many sizes"])
def test_a_repeat_read_goes_out_as_checked_frames_without_hashing_them_again(sizes: str) -> None:
    """The first read checks every record; a second consumer reading the same records gets them as the
    segment's checked frames (store/checked_runs.py: one pread, no check per record), neither hashed nor
    cut out record by record again, whatever the first read's steps found unchecked before they checked
    them; records of one size or of many."""

    async def scenario(setup: Setup) -> None:
        c = ClientChannel(setup.broker)
        c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
        bodies = [b"%05d" % n + b"b" * 95 for n in range(COUNT)] if sizes == "one size" else varied_bodies()
        await published_as_before_a_restart(setup, c, bodies)
        hashed, read_one_by_one = [0], [0]
        real_hash, real_checked = segment.xxh3_64_intdigest, setup.store.checked_records

        def hash_counted(data: bytes) -> int:  # the payload hash every check of a record on disk goes through
            hashed[0] += 1
            return real_hash(data)

        def checked_counted(offset: int, count: int, budget: int) -> tuple[list[int], bytes]:
            got = real_checked(offset, count, budget)  # records read and cut out one by one (checked or not)
            read_one_by_one[0] += len(got[0])
            return got

        setup.store.checked_records = checked_counted  # type: ignore[method-assign]
        chunk = {"x-amqpd-chunk": 5_000, "x-amqpd-chunk-layout": 3}
        c.call(commands.Basic.Qos(prefetch_count=1000))
        with patch.object(segment, "xxh3_64_intdigest", hash_counted):
            c.consume("s", "first", arguments={"x-stream-offset": "first", **chunk})
            assert await read_all(setup, c, 3) == list(enumerate(bodies))
            first = hashed[0], read_one_by_one[0]
            c.consume("s", "again", arguments={"x-stream-offset": "first", **chunk})
            assert await read_all(setup, c, 3) == list(enumerate(bodies))
        assert first[0] >= COUNT  # the first read checked every record
        assert hashed[0] - first[0] < COUNT // 50  # the repeat read: a frame or two a read step at most
        assert read_one_by_one[0] - first[1] == 0  # and as the segment's frames, not record by record

    async def main() -> None:
        async with broker_on_disk() as setup:
            await scenario(setup)

    anyio.run(main)


@pytest.mark.parametrize("sizes", ["one size", "many sizes"])
def test_a_first_read_after_publishing_goes_out_as_checked_frames_without_hashing(sizes: str) -> None:
    """Records this broker wrote and fsynced count as checked (store/checked_runs.py): the first consumer
    after the publishers gets them as the segment's frames, as a repeat read does, without a check each."""

    async def scenario(setup: Setup) -> None:
        c = ClientChannel(setup.broker)
        c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
        bodies = [b"%05d" % n + b"b" * 95 for n in range(COUNT)] if sizes == "one size" else varied_bodies()
        for body in bodies:
            c.publish("", "s", body)
        await setup.settle()
        hashed, read_one_by_one = [0], [0]
        real_hash, real_checked = segment.xxh3_64_intdigest, setup.store.checked_records

        def hash_counted(data: bytes) -> int:
            hashed[0] += 1
            return real_hash(data)

        def checked_counted(offset: int, count: int, budget: int) -> tuple[list[int], bytes]:
            got = real_checked(offset, count, budget)
            read_one_by_one[0] += len(got[0])
            return got

        setup.store.checked_records = checked_counted  # type: ignore[method-assign]
        c.call(commands.Basic.Qos(prefetch_count=1000))
        with patch.object(segment, "xxh3_64_intdigest", hash_counted):
            c.consume(
                "s", "first", arguments={"x-stream-offset": "first", "x-amqpd-chunk": 5_000, "x-amqpd-chunk-layout": 3}
            )
            assert await read_all(setup, c, 3) == list(enumerate(bodies))
        assert hashed[0] < COUNT // 50 and read_one_by_one[0] == 0

    async def main() -> None:
        async with broker_on_disk() as setup:
            await scenario(setup)

    anyio.run(main)
