"""A run of records read once is not hashed again on the next read (store/checked_runs.py): a second reader
of the same records gets the same payloads for the cost of cutting them out; a segment cut back and written
again is read as it is now."""

from __future__ import annotations

import gc
import os
import random
import struct
from array import array
from pathlib import Path
from unittest.mock import patch

import pytest

from store import MessageRecord, MessageStore, checked_runs, segment
from store.checked_runs import CheckedRuns
from store.frame import HEADER_SIZE, append_frames
from store.record_codec import decode_record
from store.segment import FILE_HEADER_SIZE, SEGMENT_MAGIC, file_header, read_payloads
from store.segment_index import SegmentIndex

pytestmark = pytest.mark.anyio


def counting_hashes() -> tuple[list[int], object]:
    """A patch of the payload hash the segment reader uses that counts its calls."""
    calls = [0]
    real = segment.xxh3_64_intdigest

    def counted(data: bytes) -> int:
        calls[0] += 1
        return real(data)

    return calls, patch.object(segment, "xxh3_64_intdigest", counted)


async def log_store(tmp_path: Path, bodies: list[bytes], restart: bool = True) -> tuple[MessageStore, list[int]]:
    """An open store whose one queue holds `bodies`, written to disk, and their offsets; opened again after
    writing them (`restart`), so that it has checked none of them (what it wrote itself counts as checked)."""
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "log", False, {})
    offsets = [store.append(MessageRecord("", "log", b"", body, 1), [qid]) for body in bodies]
    await store.flush()
    if restart:
        await store.close()
        store = MessageStore(tmp_path, fsync="none")
        await store.open()
    return store, offsets


async def test_a_second_read_of_the_same_records_gives_them_without_hashing_each_again(tmp_path: Path) -> None:
    store, offsets = await log_store(tmp_path, [b"m%05d" % n + b"x" * 90 for n in range(3000)])
    calls, counting = counting_hashes()
    try:
        with counting:  # type: ignore[attr-defined]
            first = [p for i in range(0, 3000, 256) for p in store.read_payloads(offsets[i : i + 256])]
            hashed_first = calls[0]
            again = [p for i in range(0, 3000, 256) for p in store.read_payloads(offsets[i : i + 256])]
    finally:
        await store.close()
    assert again == first and None not in first
    assert [decode_record(p)[2].body[:6] for p in again[::1000]] == [b"m00000", b"m01000", b"m02000"]  # type: ignore[arg-type]
    assert hashed_first >= 3000  # every record checked on the first read
    # then only a frame or two per read (where the general walk starts, or a block ends)
    assert calls[0] - hashed_first < 3000 // 50
    # a stream of fixed-size records keeps one run for the whole segment, whatever the steps it was read in
    assert len(store._segments.indexes[0].checked) == 1  # noqa: SLF001


def write_frames(path: Path, index: SegmentIndex, first: int, payloads: list[bytes]) -> None:
    out = bytearray()
    append_frames(out, first, payloads)
    with path.open("ab") as f:
        position = f.tell()
        f.write(out)
    index.observe_run(first, position, [HEADER_SIZE + len(p) for p in payloads], [1] * len(payloads))


def test_records_written_again_where_a_segment_was_cut_back_are_read_as_they_are_now(tmp_path: Path) -> None:
    """A failed write cuts the segment back (SegmentIndex.drop_from) and the next records take the same
    positions, in other sizes: what was checked there before must not be trusted for them."""
    path = tmp_path / "0.seg"
    path.write_bytes(file_header(SEGMENT_MAGIC, 0))
    index = SegmentIndex(0, interval=4096)
    write_frames(path, index, 0, [b"old-%03d" % n + b"o" * 93 for n in range(300)])
    fd = os.open(path, os.O_RDONLY)
    try:
        assert len(read_payloads(fd, index, list(range(300)))) == 300
        cut = FILE_HEADER_SIZE + 100 * (HEADER_SIZE + 100)  # records 100 … 299 go
        os.truncate(path, cut)
        index.drop_from(cut)
        new = [b"new-%03d" % n + b"n" * 53 for n in range(100, 300)]
        write_frames(path, index, 100, new)
        payloads = read_payloads(fd, index, list(range(300)))
    finally:
        os.close(fd)
    assert [p[:7] for p in payloads[98:102]] == [b"old-098", b"old-099", b"new-100", b"new-101"]  # type: ignore[index]
    assert payloads[100:] == new


def pairs(runs: array[int]) -> list[tuple[int, int]]:
    """checked_frames' runs, (frames, payload length) one after the other, as pairs."""
    return list(zip(runs[0::2], runs[1::2], strict=True))


def frames_of(runs: array[int], data: bytes) -> list[tuple[int, bytes]]:
    """(sequence, payload) of each frame in checked_frames' bytes, cut as its runs say."""
    out, pos = [], 0
    for count, length in pairs(runs):
        for _ in range(count):
            size, sequence = struct.unpack_from("<IQ", data, pos)
            assert size == length
            out.append((sequence, data[pos + HEADER_SIZE : pos + HEADER_SIZE + length]))
            pos += HEADER_SIZE + length
    assert pos == len(data)
    return out


async def test_checked_frames_give_the_segments_bytes_for_records_read_before_run_by_run(tmp_path: Path) -> None:
    sizes = [90] * 300 + [40] * 200 + [90] * 300  # a run broken by another size
    store, offsets = await log_store(tmp_path, [b"%05d" % n + b"x" * k for n, k in enumerate(sizes)])
    try:
        assert store.checked_frames(offsets[0], 800, 1 << 30) == (
            array("I"),
            b"",
            800,
        )  # nothing read yet: none checked
        payloads = store.read_payloads(offsets)
        runs, data, _ = store.checked_frames(offsets[100], 600, 1 << 30)
        length90, length40 = len(payloads[0]), len(payloads[300])  # type: ignore[arg-type]
        assert pairs(runs) == [(200, length90), (200, length40), (200, length90)]  # to the count asked for, mid-run
        assert frames_of(runs, data) == list(zip(offsets[100:700], payloads[100:700], strict=True))
        # a budget in bytes stops it after the frame that reaches it
        assert pairs(store.checked_frames(offsets[1], 800, 10 * (HEADER_SIZE + length90) + 1)[0]) == [(11, length90)]
    finally:
        await store.close()


def damage_record_200(data_dir: Path) -> None:
    """Flip a byte of record 200's payload in the store's one segment: it no longer matches its checksum."""
    (segment_file,) = (data_dir / "segments").glob("*.seg")
    raw = bytearray(segment_file.read_bytes())
    raw[raw.index(b"00200")] ^= 0xFF
    segment_file.write_bytes(bytes(raw))


async def test_checked_frames_stop_before_a_record_that_failed_its_checks(tmp_path: Path) -> None:
    store, offsets = await log_store(tmp_path, [b"%05d" % n + b"y" * 90 for n in range(300)])
    try:
        store.read_payloads(offsets[:100])  # records 0 … 99 checked
        damage_record_200(tmp_path)
        payloads = store.read_payloads(offsets)
        assert payloads[200] is None
        runs, data, _ = store.checked_frames(offsets[1], 299, 1 << 30)  # (a read's first frame is checked alone)
        got = [sequence for sequence, _ in frames_of(runs, data)]
        assert got == offsets[1 : 1 + len(got)]
        assert 99 <= len(got) <= 199  # those read before, never the damaged one nor past it
        assert store.checked_frames(offsets[200], 100, 1 << 30)[:2] == (array("I"), b"")
    finally:
        await store.close()


def varied(count: int) -> list[bytes]:
    """Bodies of 80-400 bytes, no two neighbours of one size (as JSON events are)."""
    return [b"%05d" % n + b"v" * (75 + (n * 37) % 321) for n in range(count)]


async def test_checked_records_give_records_of_many_sizes_checked_as_read_joined(tmp_path: Path) -> None:
    store, offsets = await log_store(tmp_path, varied(600))
    try:
        calls, counting = counting_hashes()
        with counting:  # type: ignore[attr-defined]
            lengths, data = store.checked_records(offsets[50], 500, 1 << 30)
        assert calls[0] >= 500  # each one checked as it was read (none was read before)
        payloads = store.read_payloads(offsets[50:550])
        assert lengths == [len(p) for p in payloads]  # type: ignore[arg-type]
        assert data == b"".join(payloads)  # type: ignore[arg-type]
        # a budget in bytes stops it about there, never past the count asked for
        few, some = store.checked_records(offsets[0], 600, 2_000)
        assert 2_000 <= len(some) < 2_000 + 1_000 and len(few) < 600
        assert some == b"".join(store.read_payloads(offsets[: len(few)]))  # type: ignore[arg-type]
    finally:
        await store.close()


async def test_checked_records_never_give_a_record_damaged_on_disk_nor_any_after_it(tmp_path: Path) -> None:
    """The first read of stretches after the disk changed under them: one that ends before the damage comes
    whole (checked); one with the damaged record in it gives at most the records before it (the caller
    reads on from there one record at a time, which skips it), never its bytes nor any after it."""
    store, offsets = await log_store(tmp_path, varied(400))
    try:
        damage_record_200(tmp_path)
        assert store.checked_records(offsets[0], 200, 1 << 30)[0] == [
            len(p) for p in store.read_payloads(offsets[:200])
        ]  # type: ignore[arg-type]
        for first in (150, 190, 199, 200):
            for budget in (1_000, 10_000, 1 << 30):
                lengths, data = store.checked_records(offsets[first], 200, budget)
                assert first + len(lengths) <= 200
                assert data == b"".join(store.read_payloads(offsets[first : first + len(lengths)]))  # type: ignore[arg-type]
        assert store.checked_records(offsets[200], 200, 1 << 30) == ([], b"")
    finally:
        await store.close()


async def test_a_stretch_of_records_of_many_sizes_read_once_is_given_as_frames_without_hashing_again(
    tmp_path: Path,
) -> None:
    store, offsets = await log_store(tmp_path, varied(3000))
    calls, counting = counting_hashes()
    try:
        with counting:  # type: ignore[attr-defined]
            first = [p for i in range(0, 3000, 256) for p in store.read_payloads(offsets[i : i + 256])]
            hashed_first = calls[0]
            runs, data, _ = store.checked_frames(offsets[1], 2999, 1 << 30)
        assert hashed_first >= 3000 and calls[0] == hashed_first  # checked once, then not hashed again
        # every record but the segment's first (a read's first frame joins a stretch before it, if any)
        assert frames_of(runs, data) == list(zip(offsets[1:], first[1:], strict=True))
        # a budget in bytes stops it after the frame that reaches it
        few = store.checked_frames(offsets[10], 2000, 1_000)[0]
        assert sum(few[0::2]) == next(
            k
            for k in range(1, 2000)
            if sum(HEADER_SIZE + len(p) for p in first[10 : 10 + k]) >= 1_000  # type: ignore[arg-type]
        )
    finally:
        await store.close()


async def test_records_checked_before_a_restart_are_checked_again_after_it_and_damage_is_never_given(
    tmp_path: Path,
) -> None:
    """What a broker checked lives in its memory only: after a restart (recovery), a record damaged on
    disk meanwhile is found by the first read, and no stretch of frames holds it or anything after it."""
    store, offsets = await log_store(tmp_path, varied(400))
    assert None not in store.read_payloads(offsets)
    assert store.checked_frames(offsets[1], 399, 1 << 30)[0]  # a stretch before the restart
    await store.close()
    damage_record_200(tmp_path)
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    try:
        assert store.checked_frames(offsets[1], 399, 1 << 30)[:2] == (array("I"), b"")  # nothing trusted after recovery
        payloads = store.read_payloads(offsets)
        assert payloads[200] is None and None not in payloads[:200]
        for first in (1, 150, 199, 200, 201):
            runs, data, _ = store.checked_frames(offsets[first], 400 - first, 1 << 30)
            got = [sequence for sequence, _ in frames_of(runs, data)]
            assert offsets[200] not in got and got == offsets[first : first + len(got)]
            assert first + len(got) <= 200 or first > 200
    finally:
        await store.close()


def test_a_stretch_cut_back_with_its_segment_keeps_only_the_frames_before_the_cut() -> None:
    rng = random.Random(31)
    for _ in range(30):
        lengths = [rng.randrange(80, 400) for _ in range(rng.randrange(1, 5000))]
        starts = [100]
        for length in lengths:
            starts.append(starts[-1] + HEADER_SIZE + length)
        checked, at = CheckedRuns(), 0
        while at < len(lengths):  # read in steps: each continues the stretch before it
            k = rng.randrange(1, 3000)
            checked.add_stretch(starts[at], at, array("I", lengths[at : at + k]))
            at += k
        cut = rng.randrange(90, starts[-1] + 10)
        checked.drop_from(cut)
        kept = sum(1 for end in starts[1:] if end <= cut)
        for offset in range(len(lengths)):
            found = checked.stretch(offset)
            if offset < kept:
                assert found is not None and found[0] == starts[offset] and list(found[1]) == lengths[offset:kept]
            else:
                assert found is None


def test_stretches_are_bounded_in_records_over_every_segment_of_the_process() -> None:
    """A replay of many segments keeps at most MAX_STRETCH_RECORDS records' lengths in all: past that, reads
    check as before; a segment that goes gives its share back."""
    one, two = CheckedRuns(), CheckedRuns()
    lengths = array("I", [100] * 600)
    with patch.object(checked_runs, "MAX_STRETCH_RECORDS", checked_runs._stretched_in_all[0] + 1000):  # noqa: SLF001
        one.add_stretch(1_000, 0, lengths)
        two.add_stretch(1_000, 0, lengths)  # 1,200 would pass the bound: refused
        assert one.stretch(0) is not None and two.stretch(0) is None
        del one
        gc.collect()
        two.add_stretch(1_000, 0, lengths)
        assert two.stretch(599) is not None


@pytest.mark.parametrize(
    "bodies", [[b"%05d" % n + b"s" * 95 for n in range(3000)], varied(3000)], ids=["one size", "many sizes"]
)
async def test_records_this_store_wrote_are_read_the_first_time_without_hashing_each(
    tmp_path: Path, bodies: list[bytes]
) -> None:
    """What the writer wrote and fsynced is noted as checked when its batch is done: the first read of it
    by the same store cuts the payloads out (as a repeat read does) and gives them as checked frames."""
    store, offsets = await log_store(tmp_path, bodies, restart=False)
    calls, counting = counting_hashes()
    try:
        with counting:  # type: ignore[attr-defined]
            runs, data, _ = store.checked_frames(offsets[0], 3000, 1 << 30)
            payloads = [p for i in range(0, 3000, 256) for p in store.read_payloads(offsets[i : i + 256])]
    finally:
        await store.close()
    assert [decode_record(p)[2].body for p in payloads] == bodies  # type: ignore[arg-type]
    assert frames_of(runs, data) == list(zip(offsets, payloads, strict=True))
    assert calls[0] < 3000 // 50  # a frame or two per read (where the general walk starts), not each record


async def test_records_this_store_wrote_and_damaged_on_disk_before_a_restart_are_caught_after_it(
    tmp_path: Path,
) -> None:
    store, offsets = await log_store(tmp_path, varied(400), restart=False)
    assert store.checked_frames(offsets[0], 400, 1 << 30)[0]  # noted as checked when written
    await store.close()
    damage_record_200(tmp_path)
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    try:
        assert store.checked_frames(offsets[0], 400, 1 << 30)[:2] == (array("I"), b"")
        payloads = store.read_payloads(offsets)
        assert payloads[200] is None and None not in payloads[:200] and None not in payloads[201:]
    finally:
        await store.close()
