"""Group commit: a batch of buffered work, and the writer that puts it on disk off the event loop.

The event loop fills a `Batch` (frames, index entries, ack-log entries, catalogue statements, callbacks);
the commit loop seals it and hands it to `Writer.write` in a worker thread, while the next batch fills.
The writer owns every file descriptor it writes through; only one batch is ever in flight.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from store.catalog import CatalogOp, CheckpointData
from store.frame import append_frame
from store.segment import ACK_MAGIC, SEGMENT_MAGIC, Layout, file_header
from store.segment_index import OFFSET_ENTRY, OFFSET_MAGIC, TIME_ENTRY, TIME_MAGIC, index_header


@dataclass
class Batch:
    number: int
    first_offset: int  # offsets [first_offset, end_offset) were appended into this batch
    end_offset: int = 0
    chunks: list[tuple[int, bytearray]] = field(default_factory=list)  # (segment base, frames), in order
    new_segments: list[int] = field(default_factory=list)
    sealed_segments: list[int] = field(default_factory=list)  # rolled away from: close once synced
    segment_ends: dict[int, int] = field(default_factory=dict)  # expected file size after the batch
    index_writes: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    acks: bytearray = field(default_factory=bytearray)
    catalog_ops: list[CatalogOp] = field(default_factory=list)
    queue_values: dict[tuple[int, str], bytes | None] = field(default_factory=dict)  # last write wins
    callbacks: list[Callable[[], None]] = field(default_factory=list)
    delete_segments: list[int] = field(default_factory=list)  # no longer needed once this batch is synced
    checkpoint: CheckpointData | None = None
    rotate_ack_to: int | None = None  # start this ack-log file after the batch (the checkpoint covers it)

    def frames_for(self, base: int) -> bytearray:
        if not self.chunks or self.chunks[-1][0] != base:
            self.chunks.append((base, bytearray()))
        return self.chunks[-1][1]

    def is_empty(self) -> bool:
        return not (
            self.chunks
            or self.acks
            or self.catalog_ops
            or self.queue_values
            or self.callbacks
            or self.new_segments
            or self.delete_segments
        )


class Writer:
    """File-side half of the store. Methods run in a worker thread, never concurrently."""

    def __init__(self, layout: Layout, fsync: bool) -> None:
        self._layout = layout
        self._fsync = fsync
        self._segments: dict[int, int] = {}  # base -> fd, open for append
        self._indexes: dict[int, tuple[int, int]] = {}
        self._ack_fd: int | None = None
        self._ack_sequence = 0

    def open_segment(self, base: int) -> None:
        """Continue appending to an existing segment (after recovery)."""
        self._segments[base] = _open_append(self._layout.segment(base))
        self._indexes[base] = (
            _open_append(self._layout.offset_index(base)),
            _open_append(self._layout.time_index(base)),
        )

    def start_ack_file(self, number: int) -> None:
        if self._ack_fd is not None:
            os.close(self._ack_fd)
        fd = os.open(self._layout.ack_file(number), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        _write_all(fd, file_header(ACK_MAGIC, number))
        self._ack_fd, self._ack_sequence = fd, 0
        if self._fsync:
            os.fsync(fd)
            _fsync_dir(self._layout.acklog)

    def write(self, batch: Batch) -> None:
        for base in batch.new_segments:
            self._create_segment(base)
        touched = []
        for base, frames in batch.chunks:
            fd = self._segments[base]
            _write_all(fd, frames)
            touched.append(fd)
        self._check_ends(batch)
        for base, offsets, times in batch.index_writes:
            # Not fsync'd: indexes are rebuilt from the segment if they come back damaged.
            idx_fd, tix_fd = self._indexes[base]
            _write_all(idx_fd, offsets)
            _write_all(tix_fd, times)
        if batch.acks:
            touched.append(self._write_acks(batch.acks))
        if self._fsync:
            self._sync(touched, bool(batch.new_segments))
        for base in batch.sealed_segments:
            self._close_segment(base)
        if batch.rotate_ack_to is not None:
            self.start_ack_file(batch.rotate_ack_to)

    def close(self) -> None:
        for base in list(self._segments):
            self._close_segment(base)
        if self._ack_fd is not None:
            os.close(self._ack_fd)
            self._ack_fd = None

    def _create_segment(self, base: int) -> None:
        # O_EXCL: a segment with this base offset already on disk would be a bookkeeping bug; refuse.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        fd = os.open(self._layout.segment(base), flags, 0o644)
        _write_all(fd, file_header(SEGMENT_MAGIC, base))
        self._segments[base] = fd
        idx = os.open(self._layout.offset_index(base), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        tix = os.open(self._layout.time_index(base), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        _write_all(idx, index_header(OFFSET_MAGIC, OFFSET_ENTRY.size, base))
        _write_all(tix, index_header(TIME_MAGIC, TIME_ENTRY.size, base))
        self._indexes[base] = (idx, tix)

    def _check_ends(self, batch: Batch) -> None:
        # Offsets and index positions were computed on the loop from a virtual file size; if the real file
        # disagrees, every later position would be wrong, so stop here.
        for base, end in batch.segment_ends.items():
            actual = os.lseek(self._segments[base], 0, os.SEEK_END)
            if actual != end:
                raise RuntimeError(f"segment {base}: file size {actual}, expected {end}")

    def _write_acks(self, entries: bytearray) -> int:
        if self._ack_fd is None:
            raise RuntimeError("no ack-log file open")
        self._ack_sequence += 1
        frame = bytearray()
        append_frame(frame, self._ack_sequence, bytes(entries))
        _write_all(self._ack_fd, frame)
        return self._ack_fd

    def _sync(self, fds: list[int], new_files: bool) -> None:
        for fd in dict.fromkeys(fds):
            os.fsync(fd)
        if new_files:  # a new file's directory entry must be durable too
            _fsync_dir(self._layout.segments)

    def _close_segment(self, base: int) -> None:
        os.close(self._segments.pop(base))
        for fd in self._indexes.pop(base, ()):
            os.close(fd)


def _open_append(path: os.PathLike[str]) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
