"""Recovery from damaged files: torn tails, flipped bytes, missing or wrong indexes. Recovery must succeed,
say in its stats what it dropped, and keep everything before the damage."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore, Recovered
from store.frame import HEADER_SIZE, ScanReport, scan_frames
from store.record_codec import decode_record
from store.segment import FILE_HEADER_SIZE

pytestmark = pytest.mark.anyio

N = 60


def record(i: int) -> MessageRecord:
    return MessageRecord("ex", f"rk{i}", b"props", f"body-{i}-".encode().ljust(100, b"#"), 1000 + i)


async def build(path: Path, *, clean_close: bool, segment_size: int = 1 << 20) -> list[int]:
    """A store with one queue holding N messages. clean_close=False leaves it as a crash would (after the
    data was written): recovery then scans it all as the tail instead of trusting a checkpoint."""
    store = MessageStore(path, fsync="none", segment_size=segment_size)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(0), [qid])]
    await store.flush()  # creates the first segment, which takes a checkpoint; the rest is the tail
    offsets += [store.append(record(i), [qid]) for i in range(1, N)]
    await store.flush()
    if clean_close:
        await store.close()
    else:
        await store.abort()
    return offsets


async def recover(path: Path, segment_size: int = 1 << 20) -> tuple[MessageStore, Recovered]:
    store = MessageStore(path, fsync="none", segment_size=segment_size)
    return store, await store.open()


async def reopened(store: MessageStore, path: Path) -> MessageStore:
    """`store` closed and opened again: what a store wrote itself counts as checked until it closes
    (store/checked_runs.py), so damage made on disk under it afterwards is found by a store that did not."""
    await store.close()
    again = MessageStore(path, fsync="none")
    await again.open()
    return again


def frames(segment: Path) -> list[tuple[int, int, int]]:
    """(offset, start, end) of every record in a segment file."""
    data = segment.read_bytes()
    return [
        (seq, pos, pos + HEADER_SIZE + len(payload))
        for pos, seq, payload in scan_frames(data, FILE_HEADER_SIZE, len(data), ScanReport())
    ]


def flip_byte(segment: Path, where: int) -> None:
    with open(segment, "r+b") as f:
        f.seek(where)
        byte = f.read(1)[0]
        f.seek(where)
        f.write(bytes([byte ^ 0x5A]))


def delete_second_segment(path: Path) -> tuple[int, int]:
    """Delete the store's second segment file; (its base offset, the next segment's)."""
    segments = sorted((path / "segments").glob("*.seg"))
    segments[1].unlink()
    return int(segments[1].stem), int(segments[2].stem)


def only_segment(path: Path) -> Path:
    (segment,) = (path / "segments").glob("*.seg")
    return segment


def recovered_offsets(recovered: Recovered) -> list[int]:
    return [m.offset for m in recovered.queues[0].messages]


@pytest.fixture(params=[True, False], ids=["after-clean-close", "after-crash"])
def clean_close(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def test_truncated_segment_keeps_every_record_before_the_cut(tmp_path: Path, clean_close: bool) -> None:
    pristine = tmp_path / "pristine"
    offsets = await build(pristine, clean_close=clean_close)
    bounds = frames(only_segment(pristine))
    assert [b[0] for b in bounds] == offsets
    rng = random.Random(1234)
    size = only_segment(pristine).stat().st_size
    cuts = [FILE_HEADER_SIZE, bounds[10][2], size - 1] + rng.sample(range(FILE_HEADER_SIZE, size), 12)
    for trial, cut in enumerate(cuts):
        work = tmp_path / f"trial{trial}"
        shutil.copytree(pristine, work)
        with open(only_segment(work), "r+b") as f:
            f.truncate(cut)
        store, recovered = await recover(work)
        kept = [off for off, _, end in bounds if end <= cut]
        assert recovered_offsets(recovered) == kept, f"cut at {cut}"
        last_end = max([end for _, _, end in bounds if end <= cut], default=FILE_HEADER_SIZE)
        assert recovered.stats["torn_bytes_truncated"] == cut - last_end
        # Records the checkpoint knew of but the file no longer has are reported lost; tail records that
        # were never checkpointed are simply not found.
        assert recovered.stats["lost_records"] == (N - len(kept) if clean_close else int(not kept))
        # The store goes on: new records land after the last good one and survive the next restart.
        new = store.append(record(999), [recovered.queues[0].queue_id])
        await store.close()
        store, recovered = await recover(work)
        assert recovered_offsets(recovered) == kept + [new]
        assert recovered.queues[0].messages[-1].record == record(999)
        await store.close()


async def test_a_flipped_byte_loses_only_the_record_it_hits(tmp_path: Path, clean_close: bool) -> None:
    pristine = tmp_path / "pristine"
    offsets = await build(pristine, clean_close=clean_close)
    bounds = frames(only_segment(pristine))
    rng = random.Random(99)
    for trial in range(12):
        k = rng.randrange(N - 1)  # not the last record: damage at the very end is a torn tail (next test)
        _, start, end = bounds[k]
        where = start + rng.choice([0, 4, 12, 20, HEADER_SIZE + 3, rng.randrange(end - start)])
        work = tmp_path / f"trial{trial}"
        shutil.copytree(pristine, work)
        flip_byte(only_segment(work), where)
        store, recovered = await recover(work)
        assert recovered_offsets(recovered) == offsets[:k] + offsets[k + 1 :], f"record {k}, byte {where}"
        assert recovered.stats["corrupt_records_skipped"] == 1
        assert [m.record for m in recovered.queues[0].messages[:k]] == [record(i) for i in range(k)]
        await store.close()


async def test_damage_in_the_last_record_is_cut_as_a_torn_tail(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=False)
    _, start, end = frames(only_segment(tmp_path))[-1]
    with open(only_segment(tmp_path), "r+b") as f:
        f.seek(end - 5)
        f.write(b"\x00\x01\x02\x03\x04")
    store, recovered = await recover(tmp_path)
    assert recovered_offsets(recovered) == offsets[:-1]
    assert recovered.stats["torn_bytes_truncated"] == end - start
    await store.close()


async def test_garbage_appended_after_the_last_record_is_truncated(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=False)
    with open(only_segment(tmp_path), "ab") as f:
        f.write(b"\x00" * 1000 + random.Random(5).randbytes(3000))
    store, recovered = await recover(tmp_path)
    assert recovered_offsets(recovered) == offsets
    assert recovered.stats["torn_bytes_truncated"] == 4000
    await store.close()


def index_files(path: Path) -> list[Path]:
    return sorted((path / "segments").glob("*.idx")) + sorted((path / "segments").glob("*.tix"))


@pytest.mark.parametrize("damage", ["deleted", "garbage", "truncated-entry", "shifted-positions"])
async def test_missing_or_damaged_indexes_are_rebuilt(tmp_path: Path, clean_close: bool, damage: str) -> None:
    offsets = await build(tmp_path, clean_close=clean_close, segment_size=2048)
    for path in index_files(tmp_path):
        data = path.read_bytes()
        if damage == "deleted":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(random.Random(str(path)).randbytes(len(data)))
        elif damage == "truncated-entry":
            path.write_bytes(data[:-3])
        elif path.suffix == ".idx":  # well-formed file whose entries point one byte off
            entries = bytearray(data)
            for pos in range(24 + 4, len(entries), 8):
                entries[pos] ^= 1
            path.write_bytes(bytes(entries))
    store, recovered = await recover(tmp_path, segment_size=2048)
    assert recovered_offsets(recovered) == offsets
    assert [m.record for m in recovered.queues[0].messages] == [record(i) for i in range(N)]
    if damage != "truncated-entry":
        assert recovered.stats["indexes_rebuilt"] >= 1
    assert all(store.read(o) == record(i) for i, o in enumerate(offsets))
    await store.close()
    store, recovered = await recover(tmp_path, segment_size=2048)  # the rebuilt files are good
    assert recovered.stats["indexes_rebuilt"] == 0
    assert recovered_offsets(recovered) == offsets
    await store.close()


async def test_a_damaged_segment_header_does_not_lose_its_records(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=False, segment_size=2048)
    first = sorted((tmp_path / "segments").glob("*.seg"))[0]
    with open(first, "r+b") as f:
        f.write(b"XXXXXXXX")
    store, recovered = await recover(tmp_path, segment_size=2048)
    assert recovered_offsets(recovered) == offsets
    assert recovered.stats["damaged_headers"] == 1
    await store.close()


async def test_a_torn_ack_log_brings_the_unlogged_acks_messages_back(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(10)]
    await store.flush()
    store.ack(qid, offsets[0])
    await store.flush()
    store.ack(qid, offsets[1])
    await store.flush()
    await store.abort()
    (ack_file,) = (tmp_path / "acklog").glob("*.ack")
    with open(ack_file, "r+b") as f:
        f.truncate(ack_file.stat().st_size - 2)  # the second ack's batch is torn
    store, recovered = await recover(tmp_path)
    assert recovered_offsets(recovered) == offsets[1:]
    await store.close()


async def test_a_segment_from_a_newer_format_is_refused(tmp_path: Path) -> None:
    from store import UnsupportedFormat

    await build(tmp_path, clean_close=True)
    with open(only_segment(tmp_path), "r+b") as f:
        f.seek(8)
        f.write((2).to_bytes(2, "little"))
    with pytest.raises(UnsupportedFormat):
        await recover(tmp_path)


async def test_a_deleted_segment_file_is_reported_missing_with_its_records(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=True, segment_size=2048)
    gone_base, next_base = delete_second_segment(tmp_path)
    store, recovered = await recover(tmp_path, segment_size=2048)
    assert recovered_offsets(recovered) == [o for o in offsets if not gone_base <= o < next_base]
    assert recovered.stats["segments_missing"] == 1
    assert recovered.stats["lost_records"] == next_base - gone_base
    await store.close()


async def test_a_large_zero_filled_tail_is_cut_quickly(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=False)
    with open(only_segment(tmp_path), "ab") as f:
        f.write(bytes(8 << 20))  # what a file system may leave after a power cut: size grown, data not
    started = time.perf_counter()
    store, recovered = await recover(tmp_path)
    assert time.perf_counter() - started < 5  # byte-by-byte resync over 8 MiB would take far longer
    assert recovered_offsets(recovered) == offsets
    assert recovered.stats["torn_bytes_truncated"] == 8 << 20
    await store.close()


@pytest.mark.parametrize("where", ["payload", "header check", "sequence"])
async def test_a_damaged_record_among_records_of_one_size_is_none_and_the_others_are_read(
    tmp_path: Path, where: str
) -> None:
    """Records of one size are checked many at once (segment._alike_frames): damage to any of them is still
    found, and only that record is lost."""
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    alike = [MessageRecord("ex", "rk", b"props", b"body-%03d" % i, 1000 + i) for i in range(200)]
    offsets = [store.append(r, [qid]) for r in alike]
    store = await reopened(store, tmp_path)
    _, start, _ = frames(only_segment(tmp_path))[150]
    flip_byte(only_segment(tmp_path), start + {"payload": HEADER_SIZE + 30, "header check": 21, "sequence": 5}[where])
    try:
        payloads = store.read_payloads(offsets)
    finally:
        await store.close()
    assert [i for i, p in enumerate(payloads) if p is None] == [150]
    assert [decode_record(p)[2] for p in payloads if p is not None] == alike[:150] + alike[151:]


async def test_read_payloads_are_the_records_as_stored_and_none_for_a_damaged_one(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(N)]
    store = await reopened(store, tmp_path)
    _, start, _ = frames(only_segment(tmp_path))[7]
    flip_byte(only_segment(tmp_path), start + HEADER_SIZE + 30)  # record 7's payload fails its checksum
    payloads = store.read_payloads(offsets)
    assert payloads[7] is None
    decoded = [decode_record(p) for p in payloads if p is not None]
    assert [d[2] for d in decoded] == [record(i) for i in range(N) if i != 7]
    clean = [decode_record(p) for p in store.read_payloads(offsets[:7]) if p is not None]
    assert [(d[1], d[2]) for d in clean] == [((qid,), record(i)) for i in range(7)]  # as stored, queue ids too
    assert store.read_many(offsets) == [*[d[2] for d in decoded[:7]], None, *[d[2] for d in decoded[7:]]]
    unwritten = store.append(record(N), [qid])  # still only in memory: encoded from the record
    (payload,) = store.read_payloads([unwritten])
    assert payload is not None and decode_record(payload)[2] == record(N)
    await store.close()
