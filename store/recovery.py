"""Rebuilding the store's state from disk after a restart or a crash.

Order matters: (1) per-queue state from the last checkpoint; (2) segments: records below the checkpoint's
next_offset are read only if a queue still needs them, records at or after it (the tail) are scanned and
enqueued to the queues they name; a torn tail of the last segment is truncated; (3) the ack log written
since the checkpoint is replayed; (4) records that were lost or have expired are dropped. Runs in a worker
thread: it is all blocking file I/O.
"""

from __future__ import annotations

import mmap
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from store import ack_log
from store.catalog import CatalogSnapshot, Checkpoint
from store.file_io import FileIO
from store.frame import ScanReport, header_at, scan_frames
from store.queue_state import OffsetRuns, QueueState, decode_runs
from store.record_codec import decode_record
from store.records import MessageRecord
from store.retention import RetentionPolicy, SegmentInfo, load_retained, select_for_deletion
from store.segment import FILE_HEADER_SIZE, SEGMENT_MAGIC, Layout, file_header, header_intact
from store.segment_index import SegmentIndex, load_index, write_index_files

HoldsLog = Callable[[Mapping[str, Any]], bool]  # from a queue's declared arguments: is it a log?


def _holds_no_log(arguments: Mapping[str, Any]) -> bool:
    return False


class MissingCatalogue(Exception):
    """Segment files without the catalogue that describes them: refuse to open rather than lose them."""


@dataclass
class RecoveryResult:
    queues: dict[int, QueueState]
    records: dict[int, MessageRecord]  # every offset some queue still holds (lazy: only the tail's)
    indexes: dict[int, SegmentIndex]  # base offset -> index, for the segments kept
    sizes: dict[int, int]  # base offset -> file size, for the segments kept
    next_offset: int
    last_message_id: int
    stats: dict[str, Any]
    stale_ack_files: list[int] = field(default_factory=list)


def new_stats() -> dict[str, Any]:
    return {
        "records_scanned": 0,
        "tail_records": 0,
        "torn_bytes_truncated": 0,
        "corrupt_records_skipped": 0,
        "corrupt_bytes_skipped": 0,
        "expired_dropped": 0,
        "lost_records": 0,
        "indexes_rebuilt": 0,
        "damaged_headers": 0,
        "segments_deleted": 0,
        "segments_retained": 0,  # nobody needs them; kept for log readers by the retention policy
        "retention_deleted_age": 0,  # counted in segments_deleted too
        "retention_deleted_size": 0,
        "segments_missing": 0,
        "ack_entries_replayed": 0,
        "torn_batches": 0,  # a crash cut them between their ack-log frame and their last record: undone
        "torn_batch_records_dropped": 0,
        "seconds": 0.0,
    }


class _Recovery:
    def __init__(
        self,
        layout: Layout,
        snap: CatalogSnapshot,
        index_interval: int,
        now_ms: int,
        retention: RetentionPolicy,
        load_checkpointed: bool = True,
        holds_log: HoldsLog = _holds_no_log,
        io: FileIO | None = None,
    ) -> None:
        self.layout = layout
        self.io = io if io is not None else FileIO()
        self.retention = retention
        self.load_checkpointed = load_checkpointed
        self.interval = index_interval
        self.now_ms = now_ms
        self.cp = snap.checkpoint or Checkpoint()
        self.no_checkpoint = snap.checkpoint is None
        self.registry = snap.segments
        self.stats = new_stats()
        self.queues = {}
        for qid, _vhost, _name, _auto_delete, arguments in snap.queues:
            state = self.queues[qid] = QueueState()
            if holds_log(arguments):
                state.live = OffsetRuns()  # a log's offsets stay runs all through recovery, never one per message
        for qid, (live, delivered) in snap.queue_state.items():
            if qid in self.queues:
                state = self.queues[qid]
                runs = isinstance(state.live, OffsetRuns)
                state.live = OffsetRuns.from_encoded(live) if runs else dict.fromkeys(decode_runs(live))
                state.delivered = set(decode_runs(delivered))
        self.wanted = _Wanted(list(self.queues.values()))
        self.records: dict[int, MessageRecord] = {}
        self.on_disk: set[int] = set()
        self.indexes: dict[int, SegmentIndex] = {}
        self.sizes: dict[int, int] = {}
        self.max_offset = self.cp.next_offset - 1
        self.last_message_id = self.cp.last_message_id
        self.tail_runs: list[list[int]] = []  # [start, stop) of the offsets scanned in the tail, in order

    def run(self) -> RecoveryResult:
        started = time.perf_counter()
        bases = self.layout.segment_bases()
        self.on_disk = set(bases)
        if bases and self.no_checkpoint:
            # Every store writes a checkpoint before its first segment exists, so the catalogue here is not
            # the one these segments belong to. Guessing would mean deleting them all as unneeded.
            raise MissingCatalogue(f"{self.layout.segments} holds segments but {self.layout.catalog} has no checkpoint")
        self._note_missing_segments(bases)
        for i, base in enumerate(bases):
            upper = bases[i + 1] if i + 1 < len(bases) else None
            self._segment(base, upper)
        stale = self._replay_ack_log()
        self._drop_unavailable()
        next_offset = max(self.max_offset + 1, bases[-1] if bases else 0)
        self._delete_unneeded_segments(bases)
        self.stats["seconds"] = round(time.perf_counter() - started, 4)
        return RecoveryResult(
            self.queues,
            self.records,
            self.indexes,
            self.sizes,
            next_offset,
            self.last_message_id,
            self.stats,
            stale,
        )

    def _note_missing_segments(self, bases: list[int]) -> None:
        """Registered segments that held checkpointed messages but are gone from disk: the usual cause of
        `lost_records`, worth naming in the stats."""
        on_disk = set(bases)
        for base, (end_offset, _, _) in self.registry.items():
            first = self.wanted.first_at_or_after(base)
            if base not in on_disk and first is not None and first < end_offset:
                self.stats["segments_missing"] += 1

    def _segment(self, base: int, upper: int | None) -> None:
        """Read what is needed from one segment: the offsets queues hold, and the tail."""
        cp_next = self.cp.next_offset
        first_wanted = self.wanted.first_at_or_after(base)
        if first_wanted is not None and upper is not None and first_wanted >= upper:
            first_wanted = None
        has_tail = upper is None or upper > cp_next
        if first_wanted is None and not has_tail:
            return  # nothing in it is needed: deleted below
        fd = self.io.open(self.layout.segment(base), os.O_RDWR)
        try:
            self._scan_segment(fd, base, first_wanted, has_tail, is_last=upper is None)
        finally:
            self.io.close(fd)

    def _scan_segment(self, fd: int, base: int, first_wanted: int | None, has_tail: bool, is_last: bool) -> None:
        size = os.fstat(fd).st_size
        head = os.pread(fd, FILE_HEADER_SIZE, 0)
        if not header_intact(head, SEGMENT_MAGIC, base):
            self.stats["damaged_headers"] += size > 0
            if is_last:  # we will append to it: make it a proper segment again
                self.io.pwrite(fd, file_header(SEGMENT_MAGIC, base), 0)
                size = max(size, FILE_HEADER_SIZE)
        if size <= FILE_HEADER_SIZE:  # no records: nothing to read or index
            self.indexes[base] = SegmentIndex(base, self.interval)
            self.sizes[base] = FILE_HEADER_SIZE
            return
        index = load_index(self.layout.offset_index(base), self.layout.time_index(base), base, size, self.interval)
        if not self.load_checkpointed:
            first_wanted = None  # checkpointed records are read later, when wanted
            if not has_tail and index is not None:
                self.indexes[base] = index
                self.sizes[base] = size
                return
        targets = [t for t in (first_wanted, self.cp.next_offset if has_tail else None) if t is not None]
        start = FILE_HEADER_SIZE
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
            if index is not None:
                verified = _verified_start(data, index, min(targets, default=FILE_HEADER_SIZE), size)
                index = index if verified is not None else None
                start = verified or FILE_HEADER_SIZE
            rebuilt = index is None
            if index is None:
                index = SegmentIndex(base, self.interval)
                self.stats["indexes_rebuilt"] += 1
            report = ScanReport()
            entries_before = len(index.positions)
            self._read_frames(data, start, size, index, report)
        cut = self._account_damage(fd, base, index, report, size, is_last)
        # The files must hold exactly this index before the writer appends to them: entries added, or some
        # dropped with a torn tail (the same count either way is no proof that nothing changed).
        if rebuilt or cut or len(index.positions) != entries_before:
            write_index_files(self.layout.offset_index(base), self.layout.time_index(base), index, self.io)
        self.indexes[base] = index
        self.sizes[base] = report.valid_end if is_last else size

    def _read_frames(self, data: mmap.mmap, start: int, size: int, index: SegmentIndex, report: ScanReport) -> None:
        cp_next = self.cp.next_offset
        wanted, records, queues = self.wanted, self.records, self.queues
        observe = index.observe
        load = self.load_checkpointed
        runs = self.tail_runs
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
                state = queues.get(qid)
                if state is not None:  # else a queue deleted since: nobody needs the record for it
                    state.live[offset] = None
                    records[offset] = record
        # Offsets and message ids increase through the log: the last ones seen are the largest.
        self.max_offset = max(self.max_offset, offset)
        self.last_message_id = max(self.last_message_id, message_id)
        self.stats["records_scanned"] += scanned
        self.stats["tail_records"] += tail

    def _account_damage(
        self, fd: int, base: int, index: SegmentIndex, report: ScanReport, size: int, is_last: bool
    ) -> bool:
        """Count the damage the scan met; cut a torn tail off the last segment. Whether it was cut."""
        self.stats["corrupt_records_skipped"] += report.corrupt_frames
        self.stats["corrupt_bytes_skipped"] += report.corrupt_bytes
        if not report.torn_bytes:
            return False
        if is_last:
            # The torn tail of the segment we append to: cut it so new records follow the last good one.
            self.io.truncate(fd, report.valid_end)
            self.io.fsync(fd)
            index.drop_from(report.valid_end)
            self.stats["torn_bytes_truncated"] += report.torn_bytes
            return True
        self.stats["corrupt_records_skipped"] += 1
        self.stats["corrupt_bytes_skipped"] += report.torn_bytes
        return False

    def _replay_ack_log(self) -> list[int]:
        """Apply ack-log entries written since the checkpoint; return the numbers of files it covers."""
        stale = []
        for number in self.layout.ack_numbers():
            if number < self.cp.ack_number:
                stale.append(number)
                continue
            data = self.layout.ack_file(number).read_bytes()
            report = ScanReport()
            for first, end, entries in ack_log.batches(data, number, report):
                if end > first and not self._scanned(end - 1):
                    self._undo_torn_batch(first, end)
                    continue
                for kind, qid, offset in entries:
                    self._apply_ack_entry(kind, qid, offset)
            self.stats["corrupt_records_skipped"] += report.corrupt_frames
            stale.append(number)  # after recovery's own checkpoint, every existing file is covered
        return stale

    def _scanned(self, offset: int) -> bool:
        """Whether the tail scan met this offset's record."""
        runs = self.tail_runs
        i = bisect_left(runs, [offset + 1]) - 1
        return i >= 0 and runs[i][0] <= offset < runs[i][1]

    def _undo_torn_batch(self, first: int, end: int) -> None:
        """A batch whose last record never reached the log: its ack-log entries are not applied, and if it was
        the log's last batch (a crash cut it: nothing after it was written) the records of it that did arrive
        are dropped too, so a moved message stays where it was. None of them was confirmed: that waits for
        the whole batch. A batch in the middle of the log lost its end to damage or to a failed write (the
        writer cut its records off): its surviving records stay, they may have been confirmed."""
        self.stats["torn_batches"] += 1
        last_scanned = self.tail_runs[-1][1] - 1 if self.tail_runs else -1
        self.max_offset = max(self.max_offset, end - 1)  # never hand its offsets out again
        if last_scanned >= end:
            return
        dropped: set[int] = set()
        for state in self.queues.values():
            live = state.live
            if isinstance(live, OffsetRuns):
                held = list(live.between(first, end))
            else:
                assert isinstance(live, dict)  # recovery's own states
                held = [offset for offset in _newest_from(live, first) if offset < end]
            for offset in held:
                live.pop(offset, None)
                state.delivered.discard(offset)
            dropped.update(held)
        for offset in dropped:
            self.records.pop(offset, None)
        self.stats["torn_batch_records_dropped"] += len(dropped)

    def _apply_ack_entry(self, kind: int, qid: int, offset: int) -> None:
        self.stats["ack_entries_replayed"] += 1
        self.max_offset = max(self.max_offset, offset)  # never hand out an offset an entry mentions
        state = self.queues.get(qid)
        if state is None:
            return
        if kind == ack_log.ACKED:
            state.live.pop(offset, None)
            state.delivered.discard(offset)
        elif kind == ack_log.DELIVERED and offset in state.live:
            state.delivered.add(offset)

    def _drop_unavailable(self) -> None:
        """Forget offsets whose record was lost to damage, and messages whose TTL has passed, except in a
        log: a stream keeps every message until retention drops it (RabbitMQ's streams ignore message TTL),
        and dropping one would renumber the offsets after it.

        A lazy open reads no record from before the checkpoint: one of those counts as lost here only when
        its segment is gone (damage inside a segment shows when the record is read)."""
        lost: set[int] = set()
        expired: set[int] = set()
        cp_next, now, records = self.cp.next_offset, self.now_ms, self.records
        gone_ranges = self._missing_ranges()
        for state in self.queues.values():
            live = state.live
            if self.load_checkpointed:
                candidates: Iterable[int] = live
            elif isinstance(live, OffsetRuns):
                candidates = list(live.between(cp_next, self.max_offset + 1))
                for lo, hi in gone_ranges:
                    lost.update(live.between(lo, min(hi, cp_next)))
            else:
                assert isinstance(live, dict)  # recovery's own states
                candidates = _newest_from(live, cp_next)  # the tail; the rest only if a segment is gone
                if gone_ranges:
                    lost.update(o for o in live if o < cp_next and _in_ranges(o, gone_ranges))
            ages = not isinstance(live, OffsetRuns)
            for offset in candidates:
                record = records.get(offset)
                if record is None:
                    lost.add(offset)
                elif ages and record.expires_at_ms is not None and record.expires_at_ms <= now:
                    expired.add(offset)
        logs = [state.live for state in self.queues.values() if isinstance(state.live, OffsetRuns)]
        for offset in lost | expired:
            kept = offset not in lost and any(offset in log for log in logs)
            if not kept:
                self.records.pop(offset, None)
            for state in self.queues.values():
                if not (kept and isinstance(state.live, OffsetRuns)):
                    state.live.pop(offset, None)
                    state.delivered.discard(offset)
        self.stats["lost_records"] = len(lost)
        self.stats["expired_dropped"] = len(expired)

    def _missing_ranges(self) -> list[tuple[int, int]]:
        """[base, end) of registered segments gone from disk."""
        return [(base, end) for base, (end, _, _) in self.registry.items() if base not in self.on_disk]

    def _delete_unneeded_segments(self, bases: list[int]) -> None:
        keep = {bases[-1]} if bases else set()
        for state in self.queues.values():
            live = state.live
            if isinstance(live, OffsetRuns):
                for start, stop in live.runs():
                    # every segment from the one holding the run's first offset to the one holding its last
                    keep.update(bases[bisect_left(bases, start + 1) - 1 : bisect_left(bases, stop)])
                continue
            for offset in live:
                keep.add(bases[bisect_left(bases, offset + 1) - 1])
        unneeded = [base for base in bases if base not in keep]
        if self.retention.enabled:
            unneeded = self._outside_retention(bases, keep, unneeded)
        for base in unneeded:
            for path in (self.layout.segment(base), self.layout.offset_index(base), self.layout.time_index(base)):
                self.io.unlink(path)
            self.stats["segments_deleted"] += 1
            self.indexes.pop(base, None)
            self.sizes.pop(base, None)

    def _outside_retention(self, bases: list[int], keep: set[int], unneeded: list[int]) -> list[int]:
        """The unneeded segments the retention policy no longer covers. The others stay, with their indexes
        (read now if the scan above skipped them), for log readers."""
        for base in bases:
            if base not in self.indexes:
                index, size, rebuilt = load_retained(self.layout, base, self.interval, self.io)
                self.indexes[base], self.sizes[base] = index, size
                self.stats["indexes_rebuilt"] += rebuilt
        infos = [SegmentInfo(b, self.sizes[b], self.indexes[b].max_timestamp, b in keep) for b in bases]
        doomed = select_for_deletion(infos, self.retention, self.now_ms)
        for _, reason in doomed:
            self.stats[f"retention_deleted_{reason}"] += 1
        self.stats["segments_retained"] = len(unneeded) - len(doomed)
        return [base for base, _ in doomed]


class _Wanted:
    """The offsets some queue held at the checkpoint, to know which segments to read: a sorted list for
    queues holding offsets one by one, and a copy of the runs of the queues that hold a log."""

    def __init__(self, states: list[QueueState]) -> None:
        self.runs = [OffsetRuns.from_encoded(s.live.encoded()) for s in states if isinstance(s.live, OffsetRuns)]
        self.sorted = sorted({o for s in states if not isinstance(s.live, OffsetRuns) for o in s.live})
        self._set = set(self.sorted)

    def first_at_or_after(self, offset: int) -> int | None:
        found = [first for runs in self.runs if (first := runs.first_at_or_after(offset)) is not None]
        i = bisect_left(self.sorted, offset)
        if i < len(self.sorted):
            found.append(self.sorted[i])
        return min(found, default=None)

    def __contains__(self, offset: int) -> bool:
        return offset in self._set or any(offset in runs for runs in self.runs)


def _newest_from(live: dict[int, None], first: int) -> list[int]:
    """The held offsets >= first: they are the newest, so they sit at the end of the insertion-ordered dict."""
    found = []
    for offset in reversed(live):
        if offset < first:
            break
        found.append(offset)
    return found


def _in_ranges(offset: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= offset < hi for lo, hi in ranges)


def _verified_start(data: mmap.mmap, index: SegmentIndex, target: int, size: int) -> int | None:
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


def recover_files(
    layout: Layout,
    snap: CatalogSnapshot,
    index_interval: int,
    now_ms: int,
    retention: RetentionPolicy | None = None,
    load_checkpointed: bool = True,
    holds_log: HoldsLog = _holds_no_log,
    io: FileIO | None = None,
) -> RecoveryResult:
    """load_checkpointed=False (a lazy open): records held since before the last checkpoint are not read;
        the caller reads them when it needs them (`MessageStore.read_many`). holds_log: which queues are logs
        (their offsets are kept as runs, never one by one: MessageStore.hold_as_runs). io: the store's I/O seam, for
    every change recovery makes to a file (a torn tail cut, a header rewritten, indexes replaced, files deleted)."""
    policy = retention or RetentionPolicy()
    return _Recovery(layout, snap, index_interval, now_ms, policy, load_checkpointed, holds_log, io).run()
