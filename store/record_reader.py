"""Reading records back from the running store: from memory (appended, not written yet; or held after a
failed batch), else from the segment files through their indexes, every frame checked on its first read.

Reads are blocking preads and maps through the store's I/O seam (`FileIO.pread`, `FileIO.map`), on the
calling thread: the broker calls them in the store's read worker (MessageStore.in_reader), or a worker
thread for `read_ahead`'s work (then `read_many` decodes what it read on the loop, from memory). Segments
deleted meanwhile are never ones holding the offsets asked for.
"""

from __future__ import annotations

import mmap
import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from functools import partial

from store.frame import ScanReport, header_at, scan_frames
from store.read_ahead import ReadAhead, SegmentBytes, stretches_of
from store.record_codec import decode_record, encode_record
from store.records import MessageRecord
from store.segment import FILE_HEADER_SIZE, DamagedFrame, checked_frames, read_payload, read_payloads
from store.segment_index import SegmentIndex
from store.segment_log import SegmentLog

READ_BATCH = 256  # records per read_range() call when records_from() iterates
CHECKED_GUESS = 256  # a record's size in bytes, as checked_records guesses it before it has read any


class RecordReader:
    def __init__(
        self, log: SegmentLog, pread: Callable[[int, int, int], bytes], map_file: Callable[[int, int], mmap.mmap]
    ) -> None:
        self._log = log
        self._pread = pread
        self._map = map_file

    def read(self, offset: int) -> MessageRecord:
        """Read a record back (blocking pread; the broker uses it for bodies it paged out).
        Raises KeyError if the record is not in the store."""
        log = self._log
        record = log.unwritten.get(offset)
        if record is not None:
            return record
        if log.volatile and offset in log.volatile:
            return log.volatile[offset][0]  # type: ignore[no-any-return]
        bases = log.bases[:]  # see read_many: a worker thread may call this
        i = bisect_right(bases, offset) - 1
        if i < 0:
            raise KeyError(offset)
        base = bases[i]
        fd = log.read_fd(base)
        try:
            payload = read_payload(fd, log.indexes[base], offset, self._pread)
        except DamagedFrame:  # damage between the index entry and the record: check every frame
            payload = _scan_for(fd, offset, self._map)
        if payload is None:
            raise KeyError(offset)
        return decode_record(payload)[2]

    def read_many(self, offsets: list[int], ahead: ReadAhead | None = None) -> list[MessageRecord | None]:
        """Records for ascending offsets, None for one that is not in the store or fails its checks: from the
        bytes `ahead` holds (read_ahead), else with blocking preads, jumping through the offset index. This
        is how a recovered backlog comes back; it decodes, so it belongs on the loop (see read_ahead.py)."""
        found: list[MessageRecord | None] = []
        for base, run in self._by_segment(offsets):
            if base is None:
                found.extend([None] * len(run))
            elif ahead is not None and (ahead.held or self._in_memory(run)):
                found.extend(self._read_run_ahead(base, run, ahead))
            else:
                found.extend(self._read_run(base, run, ahead))
        return found

    def read_payloads(self, offsets: list[int]) -> list[bytes | None]:
        """As read_many, but each record's payload as stored (FORMAT.md's Record), not decoded: what a stream
        sends as it is in a chunk delivery. Where read_many goes one record at a time (a record still only in
        memory, a stretch with damage in it), each is encoded again with message id 0 and no queue ids."""
        found: list[bytes | None] = []
        for base, run in self._by_segment(offsets):
            found.extend([None] * len(run) if base is None else self._payload_run(base, run))
        return found

    def checked_frames(self, offset: int, count: int, budget: int) -> tuple[array[int], bytes, int]:
        """Consecutive records from `offset` (at most `count`, about `budget` bytes) as their frames lie in
        their segment, as far as earlier reads checked them (segment.checked_frames): (frames, payload
        length of each run, one after the other; the frames' bytes; 0); (empty, b"", how many are not) when
        the first is not in a checked run. Records only in memory are never in one (a checked run holds what
        its file holds)."""
        log = self._log
        s = bisect_right(log.bases, offset) - 1
        if s < 0 or (log.volatile and not log.volatile.keys().isdisjoint(range(offset, offset + count))):
            return array("I"), b"", count
        base = log.bases[s]  # (its checked runs end where it does)
        count = min(count, log.durable_end() - offset)
        if count <= 0:
            return array("I"), b"", 1
        return checked_frames(log.read_fd(base), log.indexes[base].checked, offset, count, budget, self._pread)

    def checked_records(self, offset: int, count: int, budget: int) -> tuple[list[int], bytes]:
        """Consecutive records from `offset` (at most `count`, about `budget` bytes, within one segment) as
        their payloads, each checked as it is read (read_payloads): (each one's length, the payloads joined).
        It stops before a record that is not in the file; ([], b"") when the first is not there, is only in
        memory, or a frame among the first ones fails its checks (read_payloads finds which)."""
        log = self._log
        s = bisect_right(log.bases, offset) - 1
        count = min(count, log.durable_end() - offset)
        if s + 1 < len(log.bases):
            count = min(count, log.bases[s + 1] - offset)
        if s < 0 or count <= 0 or self._in_memory(range(offset, offset + count)):
            return [], b""
        fd, index = log.read_fd(log.bases[s]), log.indexes[log.bases[s]]
        found: list[bytes] = []
        size = 0
        while len(found) < count and size < budget:
            mean = size // len(found) if found else CHECKED_GUESS
            step = min(count - len(found), max(1, (budget - size) // max(mean, 1)))
            first = offset + len(found)
            # the record before the first is read too: a read's first frame is only joined to a checked run
            # before it (read_payloads), so a run of one size starting at `offset` is remembered from there
            lead = 1 if first == offset and first > log.bases[s] else 0
            try:
                part = read_payloads(fd, index, list(range(first - lead, first + step)), pread=self._pread)[lead:]
            except DamagedFrame:
                break  # what was checked before it goes; the caller reads the rest one record at a time
            kept = part.index(None) if None in part else step
            found += part[:kept]  # type: ignore[arg-type]
            size += sum(map(len, found[-kept:])) if kept else 0
            if kept < step:
                break
        return list(map(len, found)), b"".join(found)

    def read_ahead(self, offsets: list[int]) -> Callable[[], ReadAhead]:
        """On the loop: the work, for a worker thread, of reading the file stretches that hold these ascending
        offsets into memory, for read_many to decode on the loop without waiting on the disk. Offsets not
        written yet are taken from memory now: written before read_many decodes, they would be in no stretch
        read, and read_many would read them from the file on the loop."""
        cut = bisect_left(offsets, self._log.durable_end())
        held = {}
        for offset in offsets[cut:]:
            record = self._memory_record(offset)
            if record is not None:
                held[offset] = record
        return partial(self._read_ahead, offsets[:cut], held)

    def read_range(self, from_offset: int, max_records: int) -> list[tuple[int, MessageRecord]]:
        """Up to `max_records` (offset, record) pairs at or after `from_offset`, in offset order, below
        durable_end(): the log reader's interface (a stream queue, the Spark connector). Offsets have gaps
        (records lost to damage, segments deleted by retention): resume from the last offset returned + 1.
        Reads retained and needed segments alike, with blocking I/O on the calling (loop) thread, like read().
        """
        out: list[tuple[int, MessageRecord]] = []
        end = self._log.durable_end()
        bases = self._log.bases
        for i in range(max(bisect_right(bases, from_offset) - 1, 0), len(bases)):
            if len(out) >= max_records or bases[i] >= end:
                break
            self._read_segment_range(bases[i], max(from_offset, bases[i]), end, max_records, out)
        return out

    def records_from(self, from_offset: int) -> Iterator[tuple[int, MessageRecord]]:
        """Every durable record at or after `from_offset`, in offset order, READ_BATCH at a time (so segments
        deleted between two steps are simply skipped); ends at durable_end() as of the last step. To start
        from a time: records_from(find_offset_by_time(t))."""
        while True:
            batch = self.read_range(from_offset, READ_BATCH)
            if not batch:
                return
            yield from batch
            from_offset = batch[-1][0] + 1

    def find_offset_by_time(self, timestamp_ms: int) -> int | None:
        """Offset of the first stored record with timestamp_ms >= the given time, using the time indexes."""
        log = self._log
        bases = list(log.bases)  # a copy, as in _by_segment: the broker asks for this in the read worker
        for i, base in enumerate(bases):
            index = log.indexes.get(base)
            if index is None or (index.max_timestamp < timestamp_ms and base != log.active):
                continue  # (None: deleted since the copy)
            end = bases[i + 1] if i + 1 < len(bases) else log.next_offset
            found = self._first_at_or_after(base, index, timestamp_ms, end)
            if found is not None:
                return found
        return None

    # ---- internals -----------------------------------------------------------------------------------

    def _payload_run(self, base: int, offsets: list[int]) -> list[bytes | None]:
        if self._in_memory(offsets):
            return [self._payload_or_none(offset) for offset in offsets]
        try:
            return read_payloads(self._log.read_fd(base), self._log.indexes[base], offsets, pread=self._pread)
        except DamagedFrame:  # damage somewhere in the stretch: one record at a time
            return [self._payload_or_none(offset) for offset in offsets]

    def _payload_or_none(self, offset: int) -> bytes | None:
        record = self._read_or_none(offset)
        return None if record is None else encode_record(0, record, [])

    def _read_ahead(self, offsets: list[int], held: dict[int, MessageRecord]) -> ReadAhead:
        """In a worker thread: only preads and the index lookups that place them."""
        ahead = ReadAhead(held)
        log = self._log
        for base, run in self._by_segment(offsets):
            index = log.indexes.get(base) if base is not None else None
            if base is None or index is None:
                continue
            fd = log.read_fd(base)
            segment = ahead.segments[base] = SegmentBytes(self._pread)
            size = os.fstat(fd).st_size
            segment.read(fd, stretches_of(index, run, size), size)
        return ahead

    def _by_segment(self, offsets: list[int]) -> Iterator[tuple[int | None, list[int]]]:
        """Ascending offsets in runs that share a segment: (its base, or None before the first one, run)."""
        # A copy: read-ahead calls this in a worker thread while the loop may delete segments nobody needs
        # (never one holding these offsets) and shift the list.
        bases = list(self._log.bases)
        i = 0
        while i < len(offsets):
            s = bisect_right(bases, offsets[i]) - 1
            end = bases[s + 1] if s + 1 < len(bases) else None
            j = len(offsets) if end is None else bisect_left(offsets, end, i)
            yield (bases[s] if s >= 0 else None), offsets[i:j]
            i = j

    def _read_run(self, base: int, offsets: list[int], ahead: ReadAhead | None = None) -> list[MessageRecord | None]:
        if self._in_memory(offsets):
            return [self._read_or_none(offset) for offset in offsets]
        fd = self._log.read_fd(base)
        pread = self._pread if ahead is None else ahead.pread_for(base, self._pread)
        try:
            payloads = read_payloads(fd, self._log.indexes[base], offsets, pread=pread)
        except DamagedFrame:  # damage somewhere in the stretch: fall back to one record at a time
            return [self._read_or_none(offset) for offset in offsets]
        return [decode_record(p)[2] if p is not None else None for p in payloads]

    def _read_run_ahead(self, base: int, offsets: list[int], ahead: ReadAhead) -> list[MessageRecord | None]:
        """A run some of whose records were (or are) in memory: those from there, the rest from what the
        worker read (never the whole run one record at a time from the file, as _read_run would)."""
        found: dict[int, MessageRecord | None] = {}
        on_disk = []
        for offset in offsets:
            record = ahead.held.get(offset) or self._memory_record(offset)
            if record is None:
                on_disk.append(offset)
            else:
                found[offset] = record
        if on_disk:
            found.update(zip(on_disk, self._read_run(base, on_disk, ahead), strict=True))
        return [found[offset] for offset in offsets]

    def _memory_record(self, offset: int) -> MessageRecord | None:
        """The record if the store still holds it in memory (not written yet, or kept after a failed batch)."""
        log = self._log
        record = log.unwritten.get(offset)
        if record is None and log.volatile and offset in log.volatile:
            record = log.volatile[offset][0]
        return record

    def _in_memory(self, offsets: Sequence[int]) -> bool:
        """The newest are not in the file yet (they are a suffix), or some never made it to disk."""
        log = self._log
        return offsets[-1] in log.unwritten or bool(log.volatile and not log.volatile.keys().isdisjoint(offsets))

    def _read_or_none(self, offset: int) -> MessageRecord | None:
        try:
            return self.read(offset)
        except (KeyError, DamagedFrame):
            return None

    def _first_at_or_after(self, base: int, index: SegmentIndex, timestamp_ms: int, end: int) -> int | None:
        entry = index.before_time(timestamp_ms)
        offset = entry[0] if entry is not None else base
        for candidate in range(offset, end):
            try:
                if self.read(candidate).timestamp_ms >= timestamp_ms:
                    return candidate
            except KeyError:
                continue
        return None

    def _read_segment_range(
        self, base: int, start: int, end: int, max_records: int, out: list[tuple[int, MessageRecord]]
    ) -> None:
        """Append records [start, end) of one segment to `out` until it holds max_records."""
        fd = self._log.read_fd(base)
        size = os.fstat(fd).st_size  # the active segment may have bytes past `end`: they are not returned
        if size <= FILE_HEADER_SIZE:
            return
        with self._map(fd, size) as data:
            pos = _start_for(data, self._log.indexes[base], start, size)
            for _, offset, payload in scan_frames(data, pos, size, ScanReport()):
                if offset >= end or len(out) >= max_records:
                    return
                if offset >= start:
                    out.append((offset, decode_record(payload)[2]))


def _start_for(data: mmap.mmap, index: SegmentIndex, offset: int, size: int) -> int:
    """Where a scan for `offset` starts: the index entry at or before it if that entry points at its record,
    else the segment's first frame (an index is derived data: never trusted unchecked, FORMAT.md)."""
    entry = index.floor(offset)
    if entry is None:
        return FILE_HEADER_SIZE
    header = header_at(data, entry[1], size)
    return entry[1] if header is not None and header[0] == entry[0] else FILE_HEADER_SIZE


def _scan_for(fd: int, offset: int, map_file: Callable[[int, int], mmap.mmap]) -> bytes | None:
    """Slow path for read(): check every frame of the segment."""
    size = os.fstat(fd).st_size
    if size <= FILE_HEADER_SIZE:
        return None
    with map_file(fd, size) as data:
        for _, sequence, payload in scan_frames(data, FILE_HEADER_SIZE, size, ScanReport()):
            if sequence >= offset:
                return payload if sequence == offset else None
    return None
