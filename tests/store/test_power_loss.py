"""Power loss, simulated at the store's I/O seam. kill -9 keeps the page cache, so the crash tests would pass
with fsync turned off; here every write and fsync is recorded, and at random points of a workload the data
directory a power cut would leave is rebuilt: each file as of its last fsync (a file whose directory was
never fsync'd after it was created is gone) and, as a separate case, plus a random prefix of its unsynced
tail, torn mid-record. Reopened, it must hold every confirmed, unacked message exactly once.

A second workload starts from such a cut (torn) data directory: recovery cuts the torn tail, rewrites the
segment indexes and the store appends where the cut records were. Cut again, the directory then holds
index files as a power cut leaves them: an appended tail lost or torn, a rewritten file not renamed yet
(the old one, stale: its entries point into records since replaced). There every held message must also be
found where a log reader starts from it (read_range at its offset) and by its timestamp (the time index).
Bounded: two seeded workloads of a few hundred records, about forty cut points each; and from three cuts of
one of them, a second workload with about twenty cut points each."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import anyio
import pytest

from store import MessageRecord, MessageStore, Recovered
from store.frame import header_at
from tests.store.faulty_io import RecordingIO, Snapshot, restore

pytestmark = pytest.mark.anyio

RECORDS = 400
CUTS = 40
REOPENED = 3
INDEX_INTERVAL = 256  # an index entry every few records: stale entries have records to point at wrongly


async def workload(
    root: Path, seed: int, fsync: str, records: int = RECORDS, cuts: int = CUTS, prefix: bytes = b"m"
) -> tuple[RecordingIO, dict[bytes, int], dict[bytes, int]]:
    """Publish `records` records in small bursts (one by one or together), acking a third of the confirmed
    ones, with small segments and checkpoints so rolls, deletions and checkpoints happen. A data directory
    already at `root` is opened (recovered) first, its files taken as durable. Returns the recorder and, per
    body, the I/O event count when its confirm (on_durable) and its ack happened. Bodies start with `prefix`;
    timestamps grow with the records, across workloads too (the time index is checked against them)."""
    rng = random.Random(seed)
    io = RecordingIO(root, cut_at=set(rng.sample(range(1, 180), cuts)))
    io.adopt()
    store = MessageStore(
        root, segment_size=8 * 1024, checkpoint_bytes=16 * 1024, index_interval=INDEX_INTERVAL, fsync=fsync, io=io
    )
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    stamp = 1_700_000_000_000 + (1 << 20) * (prefix != b"m")
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
        while n < records:
            burst = []
            for _ in range(rng.randint(1, 12)):
                body = prefix + b"%05d" % n + b"." * rng.randint(0, 300)
                burst.append(MessageRecord("", "q", b"", body, stamp + n))
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
    stale: dict[str, bytes] | None = None,
) -> list[str]:
    """`stale`: index files (by name) put back over those the cut left, where their segment is there."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    restore(snapshot, target, root, torn)
    for name, content in (stale or {}).items():
        if (target / "segments" / name).with_suffix(".seg").exists():
            (target / "segments" / name).write_bytes(content)
    store = MessageStore(target)
    recovered = await store.open()
    found = [f"cut at event {snapshot.events}: {problem}" for problem in unreadable(store, recovered)]
    await store.close()
    bodies = [m.record.body for q in recovered.queues for m in q.messages]
    duplicates = {b for b in bodies if bodies.count(b) > 1}
    if duplicates:
        found.append(f"cut at event {snapshot.events}: duplicated {sorted(duplicates)[:3]}")
    must = {b for b, at in confirmed.items() if at <= snapshot.events and not acked.get(b, 1 << 62) <= snapshot.events}
    missing = must - set(bodies)
    if missing:
        found.append(f"cut at event {snapshot.events}: {len(missing)} confirmed messages lost")
    return found


def unreadable(store: MessageStore, recovered: Recovered) -> list[str]:
    """Index entries recovery kept that do not point at their record, and held messages that a log reader
    starting at their offset, or a search by their timestamp, misses. Both go through the segment indexes
    (a recovered message's own record came from a scan)."""
    found = wrong_index_entries(store)
    for message in (m for q in recovered.queues for m in q.messages):
        offset, record = message.offset, message.record
        assert record is not None
        if store.read_range(offset, 1) != [(offset, record)]:
            found.append(f"read_range({offset}) does not start at its record")
        if store.find_offset_by_time(record.timestamp_ms) != offset:
            found.append(f"find_offset_by_time misses the record at {offset}")
    return found[:3]


def wrong_index_entries(store: MessageStore) -> list[str]:
    segments = store._segments  # noqa: SLF001 - the indexes recovery kept, checked against their segments
    found = []
    for base, index in segments.indexes.items():
        data = segments.layout.segment(base).read_bytes()
        for rel, position in zip(index.rel_offsets, index.positions, strict=True):
            header = header_at(data, position, len(data))
            if header is None or header[0] != base + rel:
                found.append(f"segment {base}: index entry for {base + rel} at {position} points elsewhere")
    return found


async def check_power_loss(tmp_path: Path, seed: int, fsync: str) -> list[str]:
    root = tmp_path / "live"
    io, confirmed, acked = await workload(root, seed, fsync)
    assert len(io.snapshots) >= CUTS // 2, "the workload is too short for its cut points"
    assert confirmed
    return await check_cuts(io, root, tmp_path / "cut", confirmed, acked, random.Random(seed + 1))


async def check_cuts(
    io: RecordingIO,
    root: Path,
    target: Path,
    confirmed: dict[bytes, int],
    acked: dict[bytes, int],
    rng: random.Random,
    stale: dict[str, bytes] | None = None,
) -> list[str]:
    found: list[str] = []
    for snapshot in io.snapshots:
        found += await problems_after_cut(snapshot, root, target, confirmed, acked, None)
        torn = torn_tails(snapshot, rng)
        found += await problems_after_cut(snapshot, root, target, confirmed, acked, torn)
        if stale:
            found += await problems_after_cut(snapshot, root, target, confirmed, acked, None, stale)
    return found


def torn_tails(snapshot: Snapshot, rng: random.Random) -> dict[str, int]:
    """The same cut with part of each unsynced tail on disk too, torn at a random byte."""
    return {
        path: rng.randint(1, len(image.current) - len(image.synced))
        for path, image in snapshot.files.items()
        if len(image.current) > len(image.synced) and rng.random() < 0.7
    }


async def check_power_loss_after_reopen(tmp_path: Path, seed: int) -> list[str]:
    """From a few torn cuts of a first workload, a second one on the recovered directory, cut in turn."""
    first = tmp_path / "first"
    io, _, _ = await workload(first, seed, "always-batched")
    rng = random.Random(seed + 2)
    found: list[str] = []
    for snapshot in rng.sample(io.snapshots[len(io.snapshots) // 3 :], REOPENED):
        root = tmp_path / "live"
        if root.exists():
            shutil.rmtree(root)
        root.mkdir()
        restore(snapshot, root, first, torn_tails(snapshot, rng))
        # The page cache may write index appends back while a segment's unsynced tail is lost: the index
        # files as written, ahead of their segments.
        indexes = {Path(p).name: i.current for p, i in snapshot.files.items() if p.endswith((".idx", ".tix"))}
        for name, content in indexes.items():
            if (root / "segments" / name).with_suffix(".seg").exists():
                (root / "segments" / name).write_bytes(content)
        survivors = await held_bodies(root)
        io2, confirmed, acked = await workload(root, seed + 3, "always-batched", RECORDS // 2, CUTS // 2, b"r")
        confirmed.update(dict.fromkeys(survivors, 0))  # durable before the second workload began
        # Each cut also with those index files back: what a lost rename of recovery's rewrite would leave,
        # now stale (the segment was cut and appended to since).
        found += await check_cuts(io2, root, tmp_path / "cut", confirmed, acked, rng, indexes)
    return found


async def held_bodies(root: Path) -> list[bytes]:
    """The bodies a store at `root` holds (opened on a copy: the original must stay as the cut left it)."""
    copy = root.with_name(root.name + "-copy")
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(root, copy)
    store = MessageStore(copy)
    recovered = await store.open()
    await store.close()
    return [m.record.body for q in recovered.queues for m in q.messages if m.record is not None]


@pytest.mark.parametrize("seed", [11, 12])
async def test_every_confirmed_message_survives_a_power_cut_exactly_once(tmp_path: Path, seed: int) -> None:
    assert await check_power_loss(tmp_path, seed, "always-batched") == []


async def test_after_a_power_cut_and_a_restart_stale_or_torn_indexes_lose_no_message(tmp_path: Path) -> None:
    assert await check_power_loss_after_reopen(tmp_path, 21) == []


async def test_the_power_cut_check_catches_a_store_that_does_not_fsync(tmp_path: Path) -> None:
    # With fsync off, confirms go out after the write only: the page cache is all that holds them.
    found = await check_power_loss(tmp_path, 11, "none")
    assert any("confirmed messages lost" in problem for problem in found)
