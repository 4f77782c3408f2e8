"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset (Kafka's layout).

An entry is added for the first record of a segment and then for the first record at least
`interval` bytes past the previous entry, so a lookup lands at most one interval before its target and
the reader walks forward from there. Both indexes are derived data: entries are appended without fsync,
a whole file is replaced durably (write_index_files), and an index is rebuilt from the segment when missing
or inconsistent (see FORMAT.md for the file layout and the rules).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import accumulate
from pathlib import Path

from store.checked_runs import CheckedRuns
from store.file_io import FileIO, fsync_dir, write_all

INDEX_HEADER = struct.Struct("<8sHHIQ")  # magic, version, entry size, reserved, base offset
OFFSET_MAGIC = b"AMQPDIDX"
TIME_MAGIC = b"AMQPDTIX"
INDEX_VERSION = 1
OFFSET_ENTRY = struct.Struct("<II")  # offset - base, position in the segment file
TIME_ENTRY = struct.Struct("<QI")  # highest timestamp_ms up to and including this record, offset - base
DEFAULT_INTERVAL = 4096


class SegmentIndex:
    """In-memory form of one segment's two indexes, plus the entries not yet written to their files."""

    def __init__(self, base: int, interval: int = DEFAULT_INTERVAL) -> None:
        self.base = base
        self.interval = interval
        self.rel_offsets = array("I")
        self.positions = array("I")
        self.max_timestamps = array("Q")
        self.max_timestamp = 0
        self.unsaved_offsets = bytearray()  # entries for the .idx file, taken by the next commit
        self.unsaved_times = bytearray()
        self.checked = CheckedRuns()  # runs of frames a read has checked (store/checked_runs.py)

    def observe(self, offset: int, position: int, timestamp_ms: int) -> None:
        """Called for every record of the segment, in order."""
        if timestamp_ms > self.max_timestamp:
            self.max_timestamp = timestamp_ms
        positions = self.positions
        if positions and position < positions[-1] + self.interval:
            return
        rel = offset - self.base
        self.rel_offsets.append(rel)
        positions.append(position)
        self.max_timestamps.append(self.max_timestamp)
        self.unsaved_offsets += OFFSET_ENTRY.pack(rel, position)
        self.unsaved_times += TIME_ENTRY.pack(self.max_timestamp, rel)

    def observe_run(self, first: int, position: int, sizes: list[int], timestamps: Iterable[int]) -> None:
        """observe() for consecutive records from offset `first` at `position` on, of these sizes on disk and
        timestamps: the same entries, with a Python step per entry instead of per record."""
        starts = list(accumulate(sizes, initial=position))  # each record's position, then the end
        newest = list(accumulate(timestamps, max, initial=self.max_timestamp))[1:]  # up to each record
        positions = self.positions
        count = len(sizes)
        i = 0 if not positions else bisect_left(starts, positions[-1] + self.interval, 0, count)
        while i < count:
            rel = first + i - self.base
            self.rel_offsets.append(rel)
            positions.append(starts[i])
            self.max_timestamps.append(newest[i])
            self.unsaved_offsets += OFFSET_ENTRY.pack(rel, starts[i])
            self.unsaved_times += TIME_ENTRY.pack(newest[i], rel)
            i = bisect_left(starts, starts[i] + self.interval, i + 1, count)
        if count:
            self.max_timestamp = newest[-1]

    def floor(self, offset: int) -> tuple[int, int] | None:
        """(offset, position) of the last entry at or before `offset`, or None if there is none."""
        i = bisect_right(self.rel_offsets, offset - self.base) - 1
        if i < 0:
            return None
        return self.base + self.rel_offsets[i], self.positions[i]

    def after(self, offset: int) -> int | None:
        """File position of the first entry past `offset` (a record at `offset` ends before it), or None."""
        i = bisect_right(self.rel_offsets, offset - self.base)
        return self.positions[i] if i < len(self.positions) else None

    def before_time(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, position) of the last entry whose records are all older than `timestamp_ms`: a record
        with timestamp >= timestamp_ms can only be at or after it. None: start at the segment's beginning."""
        i = bisect_left(self.max_timestamps, timestamp_ms) - 1
        if i < 0:
            return None
        return self.base + self.rel_offsets[i], self.positions[i]

    def drop_from(self, position: int) -> None:
        """Forget entries at or past `position` (the segment was truncated there)."""
        keep = bisect_left(self.positions, position)
        self.checked.drop_from(position)
        del self.rel_offsets[keep:], self.positions[keep:], self.max_timestamps[keep:]
        self.max_timestamp = self.max_timestamps[-1] if keep else 0

    def take_unsaved(self) -> tuple[bytes, bytes]:
        offsets, times = bytes(self.unsaved_offsets), bytes(self.unsaved_times)
        self.unsaved_offsets.clear()
        self.unsaved_times.clear()
        return offsets, times

    def file_contents(self) -> tuple[bytes, bytes]:
        """Whole .idx and .tix files for this index."""
        offsets = bytearray(index_header(OFFSET_MAGIC, OFFSET_ENTRY.size, self.base))
        times = bytearray(index_header(TIME_MAGIC, TIME_ENTRY.size, self.base))
        for rel, pos, ts in zip(self.rel_offsets, self.positions, self.max_timestamps, strict=True):
            offsets += OFFSET_ENTRY.pack(rel, pos)
            times += TIME_ENTRY.pack(ts, rel)
        return bytes(offsets), bytes(times)


def index_header(magic: bytes, entry_size: int, base: int) -> bytes:
    return INDEX_HEADER.pack(magic, INDEX_VERSION, entry_size, 0, base)


def load_index(idx_path: Path, tix_path: Path, base: int, file_size: int, interval: int) -> SegmentIndex | None:
    """The index as saved, or None if either file is missing or inconsistent (the caller rebuilds it).

    A trailing partial entry is dropped (the files are not fsync'd); entries must increase and point inside
    the segment. Whether an entry really points at its record is checked when it is used."""
    try:
        offsets = idx_path.read_bytes()
        times = tix_path.read_bytes()
    except FileNotFoundError:
        return None
    if not _header_ok(offsets, OFFSET_MAGIC, OFFSET_ENTRY.size, base):
        return None
    if not _header_ok(times, TIME_MAGIC, TIME_ENTRY.size, base):
        return None
    count = min(
        (len(offsets) - INDEX_HEADER.size) // OFFSET_ENTRY.size,
        (len(times) - INDEX_HEADER.size) // TIME_ENTRY.size,
    )
    index = SegmentIndex(base, interval)
    for i in range(count):
        rel, pos = OFFSET_ENTRY.unpack_from(offsets, INDEX_HEADER.size + i * OFFSET_ENTRY.size)
        ts, rel_t = TIME_ENTRY.unpack_from(times, INDEX_HEADER.size + i * TIME_ENTRY.size)
        if rel_t != rel or pos >= file_size or not _increases(index, rel, pos, ts):
            return None
        index.rel_offsets.append(rel)
        index.positions.append(pos)
        index.max_timestamps.append(ts)
    index.max_timestamp = index.max_timestamps[-1] if count else 0
    return index


def _header_ok(data: bytes, magic: bytes, entry_size: int, base: int) -> bool:
    if len(data) < INDEX_HEADER.size:
        return False
    got_magic, version, got_entry, _, got_base = INDEX_HEADER.unpack_from(data, 0)
    return got_magic == magic and version == INDEX_VERSION and got_entry == entry_size and got_base == base


def _increases(index: SegmentIndex, rel: int, pos: int, ts: int) -> bool:
    if not index.positions:
        return True
    return rel > index.rel_offsets[-1] and pos > index.positions[-1] and ts >= index.max_timestamps[-1]


def write_index_files(idx_path: Path, tix_path: Path, index: SegmentIndex, io: FileIO) -> None:
    """Replace both files with the whole index (unsaved entries included), durably, through the store's I/O
    seam: each written aside, fsync'd and renamed over the old one, then the directory fsync'd. The writer
    appends entries to these files afterwards without fsync: a power cut can cost such an appended tail,
    never bring back an older file whose entries the segment no longer matches (FORMAT.md, Indexes)."""
    offsets, times = index.file_contents()
    index.take_unsaved()
    for path, data in ((idx_path, offsets), (tix_path, times)):
        tmp = path.with_suffix(path.suffix + ".tmp")
        fd = io.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            write_all(io, fd, data)
            io.fsync(fd)
        finally:
            io.close(fd)
        io.replace(tmp, path)
    fsync_dir(io, idx_path.parent)
