"""Reading a queue's records back from a segment it shares with a busy queue: the reader jumps through the
offset index to each wanted record instead of walking every frame in between."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from store.segment import read_payloads

pytestmark = pytest.mark.anyio


def read_counting_bytes(store: MessageStore, directory: Path, steps: list[list[int]]) -> tuple[list, int, int]:
    """read_payloads over the store's first segment, one call per step of offsets: the payloads, the bytes
    read from the file and the segment's size."""
    segment = next((directory / "segments").glob("*.seg"))
    read = [0]

    def counting_pread(fd: int, size: int, pos: int) -> bytes:
        data = os.pread(fd, size, pos)
        read[0] += len(data)
        return data

    fd = os.open(segment, os.O_RDONLY)
    try:
        index = store._segments.indexes[0]  # noqa: SLF001 - the store's own index of this segment
        payloads = [p for step in steps for p in read_payloads(fd, index, step, pread=counting_pread)]
    finally:
        os.close(fd)
    return payloads, read[0], segment.stat().st_size


async def test_a_sparse_read_jumps_through_the_index_and_reads_a_fraction_of_the_segment(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    quiet, busy = store.put_queue("/", "quiet", False, {}), store.put_queue("/", "busy", False, {})
    wanted = []
    for n in range(2000):
        if n % 100 == 0:
            wanted.append(store.append(MessageRecord("", "quiet", b"", b"q%d" % n, 1), [quiet]))
        else:
            store.append(MessageRecord("", "busy", b"", b"b" * 10_000, 1), [busy])
    await store.flush()
    payloads, read, size = read_counting_bytes(store, tmp_path, [wanted])
    assert [p is not None and p.endswith(b"q%d" % (i * 100)) for i, p in enumerate(payloads)] == [True] * 20
    assert read < size // 10
    assert [r.body for r in store.read_many(wanted)] == [b"q%d" % (i * 100) for i in range(20)]
    await store.close()


async def test_a_short_run_reads_about_its_own_bytes_not_a_whole_block(tmp_path: Path) -> None:
    """A stream consumer reads ~100 records per step from a long segment: each step reads about those."""
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    log = store.put_queue("/", "log", False, {})
    offsets = [store.append(MessageRecord("", "log", b"", b"m%05d" % n + b"x" * 200, 1), [log]) for n in range(20_000)]
    await store.flush()
    steps = [offsets[i : i + 100] for i in range(5000, 15_000, 100)]
    try:
        payloads, read, _size = read_counting_bytes(store, tmp_path, steps)
    finally:
        await store.close()
    assert [p[-206:-200] if p else None for p in payloads] == [b"m%05d" % n for n in range(5000, 15_000)]
    assert read < 2 * 10_000 * 250 + len(steps) * 2 * 16384  # the records, plus at most an index step each
