"""Retention: how long the log keeps segments that no queue needs, for readers that are not queues.

Without a policy a segment goes as soon as no queue holds anything in it (disk comes back when queues are
drained). With one, such a segment stays readable (a later stream queue type, the Spark connector) until it
is older than `max_age_ms` or the log is over `max_bytes`. A segment a queue still needs is never deleted,
whatever the bounds: unlike a RabbitMQ stream, our queues were promised their confirmed messages.

`select_for_deletion` is the whole policy, a pure function used both by the running store and by recovery;
`load_retained` reads what the policy needs of a segment that recovery did not otherwise have to read.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from store.file_io import FileIO
from store.frame import ScanReport, header_at, scan_frames
from store.segment import FILE_HEADER_SIZE, SEGMENT_MAGIC, Layout, header_intact
from store.segment_index import SegmentIndex, load_index, write_index_files

AGE = "age"
SIZE = "size"


@dataclass(frozen=True)
class RetentionPolicy:
    max_age_ms: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_age_ms", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"retention {name} must be positive or None, not {value}")

    @property
    def enabled(self) -> bool:
        return self.max_age_ms is not None or self.max_bytes is not None


@dataclass
class SegmentInfo:
    base: int
    size: int  # bytes of the .seg file (indexes are not counted: they are small and derived)
    newest_ms: int  # highest record timestamp_ms in the segment
    needed: bool  # a queue holds an offset in it, or it is the segment being appended to


def select_for_deletion(segments: list[SegmentInfo], policy: RetentionPolicy, now_ms: int) -> list[tuple[int, str]]:
    """(base, AGE or SIZE) for each unneeded segment the policy no longer keeps. `segments` is the whole log
    in offset order, needed segments included: they count towards max_bytes but are never chosen."""
    doomed: dict[int, str] = {}
    total = sum(s.size for s in segments)
    if policy.max_age_ms is not None:
        for s in segments:
            if not s.needed and now_ms - s.newest_ms > policy.max_age_ms:
                doomed[s.base] = AGE
                total -= s.size
    if policy.max_bytes is not None:
        for s in segments:  # oldest first; a needed one is skipped, not waited for
            if total <= policy.max_bytes:
                break
            if not s.needed and s.base not in doomed:
                doomed[s.base] = SIZE
                total -= s.size
    return list(doomed.items())


def load_retained(layout: Layout, base: int, interval: int, io: FileIO) -> tuple[SegmentIndex, int, bool]:
    """(index, file size, rebuilt) of a segment recovery kept only for retention. Reads from the last index
    entry to the end (the index is sparse: its last entry need not be the newest record), or the whole
    segment when the index is missing or wrong. Damage is not repaired: nobody's messages depend on it."""
    fd = io.open(layout.segment(base), os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        header_intact(io.pread(fd, FILE_HEADER_SIZE, 0), SEGMENT_MAGIC, base)  # refuses another format version
        index = load_index(layout.offset_index(base), layout.time_index(base), base, size, interval)
        if size <= FILE_HEADER_SIZE:
            return index or SegmentIndex(base, interval), size, False
        with io.map(fd, size) as data:
            start = _last_entry_start(data, index, size) if index is not None else None
            rebuilt = start is None
            if index is None or start is None:
                index, start = SegmentIndex(base, interval), FILE_HEADER_SIZE
            entries_before = len(index.positions)
            for pos, offset, payload in scan_frames(data, start, size, ScanReport()):
                index.observe(offset, pos, int.from_bytes(payload[8:16], "little"))
    finally:
        io.close(fd)
    if rebuilt or len(index.positions) != entries_before:
        write_index_files(layout.offset_index(base), layout.time_index(base), index, io)
    return index, size, rebuilt


def _last_entry_start(data: mmap.mmap, index: SegmentIndex, size: int) -> int | None:
    """Position of the index's last entry if it points at its record (FILE_HEADER_SIZE for an empty index);
    None if it does not, and the index must be rebuilt."""
    if not index.positions:
        return FILE_HEADER_SIZE
    offset, position = index.base + index.rel_offsets[-1], index.positions[-1]
    header = header_at(data, position, size)
    return position if header is not None and header[0] == offset else None
