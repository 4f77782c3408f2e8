"""Offsets acked together (MessageStore.ack_many, a multiple-ack) leave the store exactly as the same offsets
acked one by one: the same ack-log bytes, the same segments deleted, the same messages back after a crash."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore

pytestmark = pytest.mark.anyio

MESSAGES = 40
SEGMENT_SIZE = 400  # a few records per segment: acks span segments, and drained ones are deleted


def fixed_clock() -> int:
    return 1_700_000_000_000 * 1_000_000


def ack_rounds(seed: int) -> list[list[int]]:
    """Rounds of offsets to ack, each a run a multiple-ack could settle, with offsets already acked, offsets
    never appended and duplicates mixed in."""
    rng = random.Random(seed)
    rounds = []
    for _ in range(6):
        start = rng.randrange(MESSAGES)
        offsets = list(range(start, min(MESSAGES, start + rng.randrange(1, 15))))
        offsets += rng.sample(range(MESSAGES + 5), 3)
        rng.shuffle(offsets)
        rounds.append(offsets)
    return rounds


async def _after(path: Path, together: bool, seed: int) -> tuple[list[bytes], list[str], list[int]]:
    """Ack-log files, segment files left, and what a restart after a crash gives back."""
    store = MessageStore(path, clock=fixed_clock, segment_size=SEGMENT_SIZE, fsync="none")
    await store.open()
    q = store.put_queue("/", "q", False, {})
    for i in range(MESSAGES):
        store.append(MessageRecord("", "q", b"\x00\x00", b"m%d" % i, 1_700_000_000_000), [q])
    await store.flush()
    for offsets in ack_rounds(seed):
        if together:
            store.ack_many(q, offsets)
        else:
            for offset in offsets:
                store.ack(q, offset)
        await store.flush()
    await store.abort()  # a crash: the ack log is what brings the acks back
    acks = [f.read_bytes() for f in sorted(path.rglob("*.ack"))]
    segments = sorted(f.name for f in path.rglob("*.seg"))
    store = MessageStore(path, clock=fixed_clock, segment_size=SEGMENT_SIZE, fsync="none")
    recovered = await store.open()
    await store.close()
    (queue,) = recovered.queues
    return acks, segments, [m.offset for m in queue.messages]


@pytest.mark.parametrize("seed", range(5))
async def test_offsets_acked_together_leave_what_acking_them_one_by_one_leaves(tmp_path: Path, seed: int) -> None:
    one = await _after(tmp_path / "one", False, seed)
    together = await _after(tmp_path / "together", True, seed)
    assert together == one
    acked = {offset for offsets in ack_rounds(seed) for offset in offsets}
    assert one[2] == [offset for offset in range(MESSAGES) if offset not in acked]
