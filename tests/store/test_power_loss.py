"""Power loss, simulated at the store's I/O seam. kill -9 keeps the page cache, so the crash tests would pass
with fsync turned off; here every write and fsync is recorded, and at random points of a workload the data
directory a power cut would leave is rebuilt: each file as of its last fsync (a file whose directory was
never fsync'd after it was created is gone) and, as a separate case, plus a random prefix of its unsynced
tail, torn mid-record. Reopened, it must hold every confirmed, unacked message exactly once.
Bounded: two seeded workloads of a few hundred records, about forty cut points each."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import anyio
import pytest

from store import MessageRecord, MessageStore
from tests.store.faulty_io import RecordingIO, Snapshot, restore

pytestmark = pytest.mark.anyio

RECORDS = 400
CUTS = 40


async def workload(root: Path, seed: int, fsync: str) -> tuple[RecordingIO, dict[bytes, int], dict[bytes, int]]:
    """Publish RECORDS records in small bursts (one by one or together), acking a third of the confirmed ones,
    with small segments and checkpoints so rolls, deletions and checkpoints happen. Returns the recorder and,
    per body, the I/O event count when its confirm (on_durable) and its ack happened."""
    rng = random.Random(seed)
    io = RecordingIO(root, cut_at=set(rng.sample(range(1, 180), CUTS)))
    store = MessageStore(root, segment_size=8 * 1024, checkpoint_bytes=16 * 1024, fsync=fsync, io=io)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    confirmed: dict[bytes, int] = {}
    acked: dict[bytes, int] = {}
    offsets: dict[bytes, int] = {}

    def durable(body: bytes) -> None:
        confirmed[body] = io.events
        if rng.random() < 0.33:
            acked[body] = io.events
            store.ack(qid, offsets[body])

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        n = 0
        while n < RECORDS:
            burst = []
            for _ in range(rng.randint(1, 12)):
                body = b"m%05d" % n + b"." * rng.randint(0, 300)
                burst.append(MessageRecord("", "q", b"", body, 1_700_000_000_000 + n))
                n += 1
            if rng.random() < 0.5:  # one by one, each with its confirm
                for record in burst:
                    offsets[record.body] = store.append(record, [qid], lambda body=record.body: durable(body))
            else:  # together, one confirm for all (a publish group)
                first = store.append_many(burst, [qid], lambda burst=burst: [durable(r.body) for r in burst])
                offsets.update((record.body, first + i) for i, record in enumerate(burst))
            await anyio.sleep(0.001)
        await store.flush()
        tg.cancel_scope.cancel()
    await store.abort()
    return io, confirmed, acked


async def problems_after_cut(
    snapshot: Snapshot,
    root: Path,
    target: Path,
    confirmed: dict[bytes, int],
    acked: dict[bytes, int],
    torn: dict[str, int] | None,
) -> list[str]:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    restore(snapshot, target, root, torn)
    store = MessageStore(target)
    recovered = await store.open()
    await store.close()
    bodies = [m.record.body for q in recovered.queues for m in q.messages]
    found: list[str] = []
    duplicates = {b for b in bodies if bodies.count(b) > 1}
    if duplicates:
        found.append(f"cut at event {snapshot.events}: duplicated {sorted(duplicates)[:3]}")
    must = {b for b, at in confirmed.items() if at <= snapshot.events and not acked.get(b, 1 << 62) <= snapshot.events}
    missing = must - set(bodies)
    if missing:
        found.append(f"cut at event {snapshot.events}: {len(missing)} confirmed messages lost")
    return found


async def check_power_loss(tmp_path: Path, seed: int, fsync: str) -> list[str]:
    root = tmp_path / "live"
    io, confirmed, acked = await workload(root, seed, fsync)
    assert len(io.snapshots) >= CUTS // 2, "the workload is too short for its cut points"
    assert confirmed
    rng = random.Random(seed + 1)
    found: list[str] = []
    for snapshot in io.snapshots:
        found += await problems_after_cut(snapshot, root, tmp_path / "cut", confirmed, acked, None)
        # The same cut with part of each unsynced tail on disk too, torn at a random byte.
        torn = {
            path: rng.randint(1, len(image.current) - len(image.synced))
            for path, image in snapshot.files.items()
            if len(image.current) > len(image.synced) and rng.random() < 0.7
        }
        found += await problems_after_cut(snapshot, root, tmp_path / "cut", confirmed, acked, torn)
    return found


@pytest.mark.parametrize("seed", [11, 12])
async def test_every_confirmed_message_survives_a_power_cut_exactly_once(tmp_path: Path, seed: int) -> None:
    assert await check_power_loss(tmp_path, seed, "always-batched") == []


async def test_the_power_cut_check_catches_a_store_that_does_not_fsync(tmp_path: Path) -> None:
    # With fsync off, confirms go out after the write only: the page cache is all that holds them.
    found = await check_power_loss(tmp_path, 11, "none")
    assert any("confirmed messages lost" in problem for problem in found)
