"""A segment index is derived data written without fsync (FORMAT.md, Indexes): after a power cut it may be
torn, or stale — an older file whose entries point where records used to be before a torn tail was cut and
other records were appended there. Recovery must not trust such an index: a log reader that starts at a held
message's offset, or searches by its timestamp, must still find it. (test_power_loss.py covers the same
through simulated power cuts; this is the one stale case spelt out.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from tests.store.test_power_loss import unreadable

pytestmark = pytest.mark.anyio

INTERVAL = 64  # an index entry for every record or so


def record(n: int, size: int) -> MessageRecord:
    return MessageRecord("", "q", b"", b"%04d" % n + b"." * size, 1_700_000_000_000 + n)


async def crash_after(path: Path, records: list[MessageRecord]) -> None:
    """Open, append to queue q, flush, and stop as a crash would (nothing more written)."""
    store = MessageStore(path, segment_size=1 << 20, index_interval=INTERVAL)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    for r in records:
        store.append(r, [qid])
    await store.flush()
    await store.abort()


async def test_a_stale_index_from_before_a_cut_tail_is_not_trusted(tmp_path: Path) -> None:
    await crash_after(tmp_path, [record(n, 100) for n in range(30)])
    segment = next((tmp_path / "segments").glob("*.seg"))
    old = {p: p.read_bytes() for p in (segment.with_suffix(".idx"), segment.with_suffix(".tix"))}
    # A torn tail: the last ten records cut short. Recovery cuts it; new records of another size follow
    # where they were, at other positions.
    size = segment.stat().st_size
    frame = (size - 24) // 30  # the file header, then 30 frames of one size
    os.truncate(segment, size - 10 * frame + 7)
    await crash_after(tmp_path, [record(n, 300) for n in range(100, 120)])
    for path, content in old.items():  # the old index, as a lost rename of recovery's rewrite leaves it
        path.write_bytes(content)

    store = MessageStore(tmp_path)
    recovered = await store.open()
    problems = unreadable(store, recovered)
    await store.close()
    (queue,) = recovered.queues
    assert len(queue.messages) == 40
    assert problems == []
