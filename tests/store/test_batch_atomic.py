"""A commit batch that moves messages (appends a record for one queue and acks another queue's copy, as a
delayed message's release and dead-lettering do) is all or nothing after a crash.

kill -9 keeps every byte written, so a kill between the batch's segment write and its ack-log write used to
leave both copies (the message came twice) — or, in the other order, neither. After a kill -9 at any I/O
event each moved message is held exactly once: by its holder or by its targets. After a power cut (files as
of their last fsync, or with a torn unsynced tail) a message may come back in both places, never in
neither."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from tests.store.faulty_io import RecordingIO, Snapshot, restore

# Each case opens a few hundred stores from snapshots: minutes on a loaded machine, so a hang guard above
# the suite's default.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

MESSAGES = 120


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _record(n: int, routing_key: str) -> MessageRecord:
    return MessageRecord("", routing_key, b"", b"m%04d" % n + b"." * (n % 97), 1_700_000_000_000 + n)


async def _workload(root: Path, seed: int) -> RecordingIO:
    """Confirm MESSAGES into a holder queue, then move them a few at a time to two target queues (one record
    held by both) while also publishing unrelated messages, with small segments and checkpoints."""
    rng = random.Random(seed)
    io = RecordingIO(root)
    store = MessageStore(root, segment_size=4 * 1024, checkpoint_bytes=8 * 1024, fsync="always-batched", io=io)
    await store.open()
    holder = store.put_queue("/", "holder", False, {})
    targets = [store.put_queue("/", "target-1", False, {}), store.put_queue("/", "target-2", False, {})]
    other = store.put_queue("/", "other", False, {})
    held = {n: store.append(_record(n, "holder"), [holder]) for n in range(MESSAGES)}
    await store.flush()
    io.cut_at = set(range(io.events + 1, io.events + 400))  # a snapshot at every I/O event from here on
    waiting = list(held)
    while waiting:  # one commit per step, so the batches (and the snapshots) do not depend on timing
        count = rng.randint(1, 6)
        moving, waiting = waiting[:count], waiting[count:]
        for n in moving:
            store.append(_record(n, "moved"), targets)
            store.ack(holder, held[n])
        if rng.random() < 0.5:
            store.append(_record(10_000 + rng.randint(0, 999), "other"), [other])
        await store.flush()
    await store.abort()
    return io


async def _holders_after(snapshot: Snapshot, root: Path, target: Path, killed: bool, torn: dict[str, int]) -> Counter:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    restore(snapshot, target, root, torn, killed)
    store = MessageStore(target)
    recovered = await store.open()
    await store.close()
    seen: Counter = Counter()  # target-2 holds the same records as target-1
    for queue in recovered.queues:
        if queue.name in ("holder", "target-1"):
            seen.update(m.record.body[:5] for m in queue.messages)
    return seen


async def _check(tmp_path: Path, seed: int) -> tuple[list[str], list[str]]:
    """(duplicates or losses after a kill -9, losses after a power cut) at every snapshot."""
    root = tmp_path / "live"
    io = await _workload(root, seed)
    assert len(io.snapshots) > 150, "the workload is too short for its cut points"
    rng = random.Random(seed + 1)
    everyone = {b"m%04d" % n for n in range(MESSAGES)}
    killed_problems, power_problems = [], []
    for snapshot in io.snapshots:
        seen = await _holders_after(snapshot, root, tmp_path / "cut", True, {})
        wrong = sorted(b for b in everyone if seen[b] != 1)
        if wrong:
            killed_problems.append(f"kill -9 at event {snapshot.events}: {[(b, seen[b]) for b in wrong[:3]]}")
        torn = {
            path: rng.randint(1, len(image.current) - len(image.synced))
            for path, image in snapshot.files.items()
            if len(image.current) > len(image.synced) and rng.random() < 0.7
        }
        for cut in ({}, torn):
            seen = await _holders_after(snapshot, root, tmp_path / "cut", False, cut)
            lost = sorted(b for b in everyone if seen[b] == 0)
            if lost:
                power_problems.append(f"power cut at event {snapshot.events}: {len(lost)} lost, e.g. {lost[:3]}")
    return killed_problems, power_problems


@pytest.mark.parametrize("seed", [3, 4])
async def test_a_moved_message_is_held_exactly_once_after_a_kill_9_and_never_lost_in_a_power_cut(
    tmp_path: Path, seed: int
) -> None:
    killed_problems, power_problems = await _check(tmp_path, seed)
    assert killed_problems == []
    assert power_problems == []
