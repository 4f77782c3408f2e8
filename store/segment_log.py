"""The log's segments as the running store keeps them in memory: which segments exist (base offsets in order),
each one's index, size once sealed and how many queue references point into it, the segment being appended
to, and the records appended but not yet written (or never written: a failed batch's, still held).

`SegmentLog` lays new records into the pending batch's frames (rolling the active segment when it is full)
and counts references as queues take and release offsets; it is the only writer of this state, on the event
loop. Readers (record_reader.py) look it up, some in a worker thread (see `bases` copies there).
"""

from __future__ import annotations

import itertools
import os
from array import array
from bisect import bisect_right
from collections.abc import Callable, MutableMapping
from operator import attrgetter
from pathlib import Path
from typing import Any

from store.commit import Batch
from store.frame import HEADER_SIZE, Frames, ScanReport, append_frame, append_frame_apart, append_frames, scan_frames
from store.queue_state import OffsetRuns, QueueState
from store.record_codec import decode_record, encode_record, encode_record_head, encode_records
from store.records import MessageRecord
from store.recovery import RecoveryResult
from store.retention import SegmentInfo
from store.segment import FILE_HEADER_SIZE, Layout
from store.segment_index import SegmentIndex

_timestamp_of = attrgetter("timestamp_ms")
_body_of = attrgetter("body")

# A body at least this big is written as it is, after its record's other fields, not copied into the batch's
# frames (Frames.keep); below it, one copy costs less than a buffer of its own.
BODY_APART = 64 * 1024

RECLAIM_ACTIVE_BYTES = 16 * 1024 * 1024  # an emptied active segment at least this big is rolled and deleted


class SegmentLog:
    def __init__(
        self,
        layout: Layout,
        segment_size: int,
        interval: int,
        clock: Callable[[], int],
        open_for_reads: Callable[[Path], int],
    ) -> None:
        """`clock`: wall-clock nanoseconds (message ids, segment creation times). `open_for_reads`: the I/O
        seam's (FileIO.open_for_reads), for the descriptors records are read back through."""
        self.layout = layout
        self._open_for_reads = open_for_reads
        self.segment_size = segment_size
        self.interval = interval
        self._clock = clock
        # Set by the store: no queue holds anything in sealed segment `base` any more; the pending batch has
        # new work (a roll).
        self.on_unneeded: Callable[[int], None] = _nothing
        self.wake: Callable[[], None] = _nothing
        self.track_age = False  # a retention policy by age: remember when the active segment was created
        self.bases: list[int] = []
        self.indexes: dict[int, SegmentIndex] = {}
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.active: int | None = None
        self.active_created_ms = 0  # 0: unknown (after recovery)
        self.tail = 0  # size the active segment will have once everything buffered is written
        self.next_offset = 0
        self.last_message_id = 0
        self.unwritten: dict[int, MessageRecord] = {}  # appended but not yet written: reads serve these
        # Records a failed batch held, still held by some queue, with how many queues hold each.
        self.volatile: dict[int, list[Any]] = {}
        self.frames: Frames | None = None  # the pending batch's frames for the active segment
        self.laid = array("I")  # the payload lengths of those frames (Batch.laid)
        self.read_fds: dict[int, int] = {}

    # ---- appending (the publish path) ---------------------------------------------------------------

    def append(self, record: MessageRecord, holders: list[int], batch: Batch) -> int:
        """Lay one record for these queues into `batch` at next_offset; its size on disk."""
        offset = self.next_offset
        self.last_message_id = message_id = max(self.last_message_id + 1, self._clock() // 1_000_000 << 16)
        if len(record.body) >= BODY_APART:
            head = encode_record_head(message_id, record, holders)
            size = self._buffer(offset, record, head, len(holders), batch, record.body)
        else:
            size = self._buffer(offset, record, encode_record(message_id, record, holders), len(holders), batch)
        self.next_offset = offset + 1
        return size

    def append_many(self, records: list[MessageRecord], holders: list[int], batch: Batch) -> int:
        """Records for the same queues at consecutive offsets from next_offset; their size on disk."""
        if max(map(len, map(_body_of, records))) >= BODY_APART:  # large bodies: each written apart
            return sum(self.append(record, holders, batch) for record in records)
        first = self.next_offset
        # Ids are time-ordered and unique: one clock read for the records buffered together.
        first_id = max(self.last_message_id + 1, self._clock() // 1_000_000 << 16)
        size = self._buffer_run(first, records, encode_records(first_id, records, holders), len(holders), batch)
        self.next_offset = first + len(records)
        self.last_message_id = first_id + len(records) - 1
        return size

    def _buffer(
        self, offset: int, record: MessageRecord, payload: bytes, holders: int, batch: Batch, body: bytes = b""
    ) -> int:
        """Lay one encoded record into the batch at `offset`, in the active segment (rolled when full); its
        size on disk. `body`: the record's body when `payload` is the rest of it (encode_record_head)."""
        size = HEADER_SIZE + len(payload) + len(body)
        if self.active is None or (self.tail + size > self.segment_size and self.tail > FILE_HEADER_SIZE):
            self.roll(offset, batch)
        active = self.active
        assert active is not None
        frames = self.frames
        if frames is None:  # first record of this batch in this segment
            frames = self._start_frames(active, offset, batch)
        self.laid.append(size - HEADER_SIZE)
        if body:
            append_frame_apart(frames, offset, payload, body)
        else:
            append_frame(frames, offset, payload)
        self.indexes[active].observe(offset, self.tail, record.timestamp_ms)
        self.tail += size
        self.refs[active] += holders
        self.unwritten[offset] = record
        return size

    def _buffer_run(
        self, first: int, records: list[MessageRecord], payloads: list[bytes], holders: int, batch: Batch
    ) -> int:
        """_buffer for consecutive records from offset `first`; in one step when they all fit in the active
        segment (append_frames, SegmentIndex.observe_run), else one by one (a roll among them). Their size on
        disk."""
        active = self.active
        size = HEADER_SIZE * len(payloads) + sum(map(len, payloads))
        if active is None or self.tail + size > self.segment_size:
            return sum(
                map(
                    self._buffer,
                    itertools.count(first),
                    records,
                    payloads,
                    itertools.repeat(holders),
                    itertools.repeat(batch),
                )
            )
        frames = self.frames
        if frames is None:  # first records of this batch in this segment
            frames = self._start_frames(active, first, batch)
        self.laid.extend(map(len, payloads))
        append_frames(frames, first, payloads)
        sizes = list(map(HEADER_SIZE.__add__, map(len, payloads)))
        self.indexes[active].observe_run(first, self.tail, sizes, map(_timestamp_of, records))
        self.tail += size
        self.refs[active] += holders * len(payloads)
        self.unwritten.update(zip(itertools.count(first), records))
        return size

    def _start_frames(self, active: int, offset: int, batch: Batch) -> Frames:
        """The batch's frames for the active segment, from record `offset` on at the tail."""
        self.laid = array("I")
        batch.laid.append((active, self.tail, offset, self.laid))
        self.frames = batch.frames_for(active)
        return self.frames

    def drop_unwritten(self, batch: Batch) -> None:
        """The writer wrote and fsynced `batch`: its records leave `unwritten` (reads find them on disk now).
        They are its oldest entries (records are added in offset order, and those after the batch's were
        appended since it was sealed), so the rest are copied into a new mapping in one C loop rather than
        the batch's deleted with a Python step each: a record is copied once, by the commit before its own."""
        unwritten = self.unwritten
        count = batch.end_offset - batch.first_offset
        if not count:  # acks only
            return
        if len(unwritten) == count:
            unwritten.clear()
        elif next(iter(unwritten), None) == batch.first_offset:
            self.unwritten = dict(itertools.islice(unwritten.items(), count, None))
        else:  # not the oldest (never seen): one by one, as a KeyError would say if they were not there
            for offset in range(batch.first_offset, batch.end_offset):
                del unwritten[offset]

    def written(self, batch: Batch) -> None:
        """The writer wrote and fsynced `batch`: its frames are noted as checked (store/checked_runs.py), so
        that a first read of them cuts the payloads out as a repeat read does. They are the bytes this
        process laid out; damage on disk after a restart is still found, as the notes are in memory only."""
        for base, position, first, lengths in batch.laid:
            index = self.indexes.get(base)
            end = position + HEADER_SIZE * len(lengths) + sum(lengths)
            if index is not None and lengths and batch.segment_ends.get(base, self.tail) >= end:
                index.checked.add_written(position, first, lengths)

    def roll(self, base: int, batch: Batch) -> None:
        """Seal the active segment (if any) and start a new one at `base`, in `batch`."""
        old = self.active
        if old is not None:
            self.sizes[old] = self.tail
            batch.segment_ends[old] = self.tail
            batch.sealed_segments.append(old)
            if self.refs[old] == 0:
                self.on_unneeded(old)
        self.active = base
        self.active_created_ms = self._clock() // 1_000_000 if self.track_age else 0
        self.frames = None
        self.bases.append(base)
        self.indexes[base] = SegmentIndex(base, self.interval)
        self.refs[base] = 0
        self.tail = FILE_HEADER_SIZE
        batch.new_segments.append(base)

    def release(self, offset: int, batch: Batch) -> None:
        """One queue stopped holding `offset`; a segment nobody holds anything in goes once this is synced."""
        volatile = self.volatile
        if volatile and offset in volatile:
            held = volatile[offset]
            held[1] -= 1
            if held[1] <= 0:
                del volatile[offset]
            return  # a record that never reached its segment (a failed batch) counts in none
        self._unref(self.bases[bisect_right(self.bases, offset) - 1], 1, batch)

    def release_many(self, offsets: list[int], batch: Batch) -> None:
        """release() of each offset: one count per segment rather than one per offset."""
        if self.volatile:
            for offset in offsets:
                self.release(offset, batch)
            return
        bases = self.bases
        base, end, n = -1, -1, 0  # the segment being counted: [base, end)
        for offset in offsets:
            if not base <= offset < end:
                if n:
                    self._unref(base, n, batch)
                i = bisect_right(bases, offset)
                base, end, n = bases[i - 1], bases[i] if i < len(bases) else self.next_offset, 0
            n += 1
        if n:
            self._unref(base, n, batch)

    def _unref(self, base: int, n: int, batch: Batch) -> None:
        self.refs[base] -= n
        if self.refs[base] == 0 and base != self.active:
            self.on_unneeded(base)
        elif self.refs[base] == 0 and self.tail >= min(RECLAIM_ACTIVE_BYTES, self.segment_size):
            # A drained queue must give its disk back without waiting for the (large) segment to fill:
            # roll now, and the old segment, needed by nobody, goes with the next commit (or, with a
            # retention policy, once the policy lets it go).
            self.roll(self.next_offset, batch)
            self.wake()

    def hold(self, offset: int) -> None:
        """Reference the segment of `offset` again (its ack is held back after a failed batch)."""
        self.refs[self.bases[bisect_right(self.bases, offset) - 1]] += 1

    # ---- looking things up ---------------------------------------------------------------------------

    def durable_end(self) -> int:
        """Every record below this offset is on disk (fsync'd, under always-batched): what log readers may
        see. Records at or past it may still be lost in a crash."""
        if not self.unwritten:  # mostly, when reading: iter() would walk every slot its deletions left (after a
            return self.next_offset  # large fill, slow per call; a chunk read asks several times)
        return next(iter(self.unwritten))  # insertion order: the oldest unwritten first

    def read_fd(self, base: int) -> int:
        fd = self.read_fds.get(base)
        if fd is None:  # read_many may run in a worker thread (read-ahead): one fd per segment all the same
            new = self._open_for_reads(self.layout.segment(base))
            fd = self.read_fds.setdefault(base, new)
            if fd != new:
                os.close(new)
        return fd

    def close_read_fds(self) -> None:
        for fd in self.read_fds.values():
            os.close(fd)
        self.read_fds.clear()

    def info(self, base: int) -> SegmentInfo:
        """What the retention policy looks at."""
        if base == self.active:
            return SegmentInfo(base, self.tail, self.indexes[base].max_timestamp, needed=True)
        return SegmentInfo(base, self.sizes[base], self.indexes[base].max_timestamp, needed=self.refs[base] > 0)

    def rows(self) -> list[tuple[int, int, int, bool]]:
        """The segment registry for a checkpoint: (base, end offset, size, sealed) of each segment."""
        rows = []
        for i, base in enumerate(self.bases):
            sealed = base != self.active
            end = self.bases[i + 1] if i + 1 < len(self.bases) else self.next_offset
            rows.append((base, end, self.sizes.get(base, self.tail) if sealed else self.tail, sealed))
        return rows

    def deletable(self, bases: list[int]) -> list[int]:
        """Of these, each once, the segments nobody holds anything in and not being appended to."""
        return [base for base in dict.fromkeys(bases) if self.refs.get(base) == 0 and base != self.active]

    def remove(self, base: int) -> None:
        """Forget a segment whose files the caller deletes."""
        fd = self.read_fds.pop(base, None)
        if fd is not None:
            os.close(fd)
        self._forget(base)

    def _forget(self, base: int) -> None:
        self.bases.remove(base)
        del self.indexes[base], self.refs[base]
        self.sizes.pop(base, None)

    # ---- after recovery ------------------------------------------------------------------------------

    def install(self, result: RecoveryResult, queues: dict[int, QueueState]) -> None:
        self.bases = sorted(result.indexes)
        self.indexes = result.indexes
        self.sizes = dict(result.sizes)
        self.refs = dict.fromkeys(self.bases, 0)
        for state in queues.values():
            self._count_refs(state.live)
        self.active = self.bases[-1] if self.bases else None
        self.tail = self.sizes[self.active] if self.active is not None else 0
        self.next_offset = result.next_offset
        self.last_message_id = result.last_message_id

    def _count_refs(self, live: MutableMapping[int, None]) -> None:
        bases, refs = self.bases, self.refs
        if not isinstance(live, OffsetRuns):
            for offset in live:
                refs[bases[bisect_right(bases, offset) - 1]] += 1
            return
        for start, stop in live.runs():  # a log: by run, split at segment bases, never offset by offset
            i = bisect_right(bases, start) - 1
            while start < stop:
                upper = bases[i + 1] if i + 1 < len(bases) else stop
                refs[bases[i]] += min(stop, upper) - start
                start = min(stop, upper)
                i += 1

    # ---- after a failed batch (disk faults) -----------------------------------------------------------

    def forget_records(self, chunks: list[tuple[int, Frames]], queues: dict[int, QueueState]) -> int:
        """Move the records of these frames from `unwritten` to `volatile` (if a queue still holds them),
        taking them out of their segment's reference count. Returns how many there were."""
        count = 0
        for base, frames in chunks:
            data = frames.joined()
            for _, offset, payload in scan_frames(data, 0, len(data), ScanReport()):
                count += 1
                record = self.unwritten.pop(offset)
                holders = sum(1 for qid in decode_record(payload)[1] if qid in queues and offset in queues[qid].live)
                if holders:
                    self.refs[base] -= holders
                    self.volatile[offset] = [record, holders]
        return count

    def drop_failed(self, batch: Batch, pending: Batch) -> list[int]:
        """The writer removed the segments these batches created and cut back the one appended to; the next
        record starts a new segment. Returns the segments forgotten (they never reached the disk)."""
        self.frames = None
        dropped = [base for base in [*batch.new_segments, *pending.new_segments] if base in self.indexes]
        for base in dropped:
            self._forget(base)
        for base in [base for base, _ in batch.chunks + pending.chunks if base in self.indexes]:
            size = self._size_on_disk(base)
            self.sizes[base] = size
            self.indexes[base].drop_from(size)
        old = self.active
        self.active, self.tail = None, 0
        if old is not None and old in self.indexes:
            self.sizes.setdefault(old, self._size_on_disk(old))
            if self.refs[old] == 0:
                self.on_unneeded(old)
        for base, _ in batch.chunks + pending.chunks:
            if base in self.refs and base != old and self.refs[base] == 0:
                self.on_unneeded(base)
        return dropped

    def _size_on_disk(self, base: int) -> int:
        try:
            return os.stat(self.layout.segment(base)).st_size
        except OSError:
            return FILE_HEADER_SIZE


def _nothing(*args: object) -> None:
    pass
