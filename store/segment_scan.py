"""Recovery's read of the segment files: for each segment, the records queues still hold and the tail written
since the checkpoint (enqueued to the queues it names), the segment's index checked or rebuilt, and the torn
tail of the last segment cut off."""

from __future__ import annotations

import mmap
import os
from bisect import bisect_left

from store.file_io import FileIO
from store.frame import ScanReport, header_at, scan_frames
from store.record_codec import decode_record
from store.recovered_state import RecoveredState
from store.segment import FILE_HEADER_SIZE, SEGMENT_MAGIC, Layout, file_header, header_intact
from store.segment_index import SegmentIndex, load_index, write_index_files


class SegmentScan:
    def __init__(
        self,
        layout: Layout,
        io: FileIO,
        index_interval: int,
        checkpoint_next: int,
        load_checkpointed: bool,
        state: RecoveredState,
    ) -> None:
        self.layout = layout
        self.io = io
        self.interval = index_interval
        self.cp_next = checkpoint_next  # offsets from here on are the tail: scanned and enqueued
        self.load_checkpointed = load_checkpointed
        self.state = state

    def all(self, bases: list[int]) -> None:
        for i, base in enumerate(bases):
            upper = bases[i + 1] if i + 1 < len(bases) else None
            self.segment(base, upper)

    def segment(self, base: int, upper: int | None) -> None:
        """Read what is needed from one segment: the offsets queues hold, and the tail."""
        first_wanted = self.state.wanted.first_at_or_after(base)
        if first_wanted is not None and upper is not None and first_wanted >= upper:
            first_wanted = None
        has_tail = upper is None or upper > self.cp_next
        if first_wanted is None and not has_tail:
            return  # nothing in it is needed: deleted by the pruning
        fd = self.io.open(self.layout.segment(base), os.O_RDWR)
        try:
            self._scan(fd, base, first_wanted, has_tail, is_last=upper is None)
        finally:
            self.io.close(fd)

    def _scan(self, fd: int, base: int, first_wanted: int | None, has_tail: bool, is_last: bool) -> None:
        state = self.state
        size = self._checked_header(fd, base, is_last)
        if size <= FILE_HEADER_SIZE:  # no records: nothing to read or index
            state.indexes[base] = SegmentIndex(base, self.interval)
            state.sizes[base] = FILE_HEADER_SIZE
            return
        index = load_index(self.layout.offset_index(base), self.layout.time_index(base), base, size, self.interval)
        if not self.load_checkpointed:
            first_wanted = None  # checkpointed records are read later, when wanted
            if not has_tail and index is not None:
                state.indexes[base] = index
                state.sizes[base] = size
                return
        targets = [t for t in (first_wanted, self.cp_next if has_tail else None) if t is not None]
        start = FILE_HEADER_SIZE
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
            if index is not None:
                verified = verified_start(data, index, min(targets, default=FILE_HEADER_SIZE), size)
                index = index if verified is not None else None
                start = verified or FILE_HEADER_SIZE
            rebuilt = index is None
            if index is None:
                index = SegmentIndex(base, self.interval)
                state.stats["indexes_rebuilt"] += 1
            report = ScanReport()
            entries_before = len(index.positions)
            self._read_frames(data, start, size, index, report)
        cut = self._account_damage(fd, index, report, is_last)
        # The files must hold exactly this index before the writer appends to them: entries added, or some
        # dropped with a torn tail (the same count either way is no proof that nothing changed).
        if rebuilt or cut or len(index.positions) != entries_before:
            write_index_files(self.layout.offset_index(base), self.layout.time_index(base), index, self.io)
        state.indexes[base] = index
        state.sizes[base] = report.valid_end if is_last else size

    def _checked_header(self, fd: int, base: int, is_last: bool) -> int:
        """The segment's size, after making the last segment's header whole again (we will append to it)."""
        size = os.fstat(fd).st_size
        head = os.pread(fd, FILE_HEADER_SIZE, 0)
        if not header_intact(head, SEGMENT_MAGIC, base):
            self.state.stats["damaged_headers"] += size > 0
            if is_last:
                self.io.pwrite(fd, file_header(SEGMENT_MAGIC, base), 0)
                size = max(size, FILE_HEADER_SIZE)
        return size

    def _read_frames(self, data: mmap.mmap, start: int, size: int, index: SegmentIndex, report: ScanReport) -> None:
        cp_next = self.cp_next
        state = self.state
        wanted, records, queues = state.wanted, state.records, state.queues
        observe = index.observe
        load = self.load_checkpointed
        runs = state.tail_runs
        run = runs[-1] if runs else [-1, -1]
        scanned = tail = 0
        message_id = offset = -1
        for pos, offset, payload in scan_frames(data, start, size, report):
            scanned += 1
            if offset < cp_next:
                observe(offset, pos, int.from_bytes(payload[8:16], "little"))
                if load and offset in wanted:
                    records[offset] = decode_record(payload)[2]
                continue
            tail += 1
            if offset == run[1]:
                run[1] += 1
            else:
                run = [offset, offset + 1]
                runs.append(run)
            message_id, queue_ids, record = decode_record(payload)
            observe(offset, pos, record.timestamp_ms)
            for qid in queue_ids:
                queue = queues.get(qid)
                if queue is not None:  # else a queue deleted since: nobody needs the record for it
                    queue.live[offset] = None
                    records[offset] = record
        # Offsets and message ids increase through the log: the last ones seen are the largest.
        state.max_offset = max(state.max_offset, offset)
        state.last_message_id = max(state.last_message_id, message_id)
        state.stats["records_scanned"] += scanned
        state.stats["tail_records"] += tail

    def _account_damage(self, fd: int, index: SegmentIndex, report: ScanReport, is_last: bool) -> bool:
        """Count the damage the scan met; cut a torn tail off the last segment. Whether it was cut."""
        stats = self.state.stats
        stats["corrupt_records_skipped"] += report.corrupt_frames
        stats["corrupt_bytes_skipped"] += report.corrupt_bytes
        if not report.torn_bytes:
            return False
        if is_last:
            # The torn tail of the segment we append to: cut it so new records follow the last good one.
            self.io.truncate(fd, report.valid_end)
            self.io.fsync(fd)
            index.drop_from(report.valid_end)
            stats["torn_bytes_truncated"] += report.torn_bytes
            return True
        stats["corrupt_records_skipped"] += 1
        stats["corrupt_bytes_skipped"] += report.torn_bytes
        return False


def verified_start(data: mmap.mmap, index: SegmentIndex, target: int, size: int) -> int | None:
    """Where to start reading for `target`: the index entry at or before it, if that entry and every entry
    after it (the stretch the scan reads; the store appends entries after them) point at their records.
    None: the index is stale or torn and must be rebuilt (an entry for a record a torn tail cut short also
    counts: rare, and the full scan finds where the tail starts). One header check per entry, on pages
    the scan reads anyway."""
    entry = index.floor(target)
    first = 0 if entry is None else bisect_left(index.positions, entry[1])
    base = index.base
    for rel, position in zip(index.rel_offsets[first:], index.positions[first:], strict=True):
        header = header_at(data, position, size)
        if header is None or header[0] != base + rel:
            return None
    return FILE_HEADER_SIZE if entry is None else entry[1]
