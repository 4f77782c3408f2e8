"""Group commit: a batch of buffered work, and the writer that puts it on disk off the event loop.

The event loop fills a `Batch` (frames, index entries, ack-log entries, catalogue statements, callbacks);
the commit loop seals it and hands it to `Writer.write` in a worker thread, while the next batch fills.
The writer owns every file descriptor it writes through; only one batch is ever in flight.

Every byte the writer puts in a file, every fsync, truncation and unlink, and every read of a record back
goes through `FileIO` (file_io.py), the store's I/O seam: tests replace it to fail the Nth write or fsync,
or to record what a power cut would keep.

A batch that fails (a write or fsync raising OSError: ENOSPC, EIO) is never retried: after a failed fsync
the page cache's state is unknown. `Writer.write` raises `WriteFailed` after putting the files back as they
were before the batch (segments truncated to their old size, segments the batch created removed, every
segment closed so the next record starts a new one, the ack-log file abandoned for a new one).
"""

from __future__ import annotations

import errno
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from store import ack_log
from store.catalog import CatalogOp, CheckpointData
from store.file_io import FileIO
from store.frame import Frames, append_frame
from store.segment import ACK_MAGIC, SEGMENT_MAGIC, Layout, file_header
from store.segment_index import OFFSET_ENTRY, OFFSET_MAGIC, TIME_ENTRY, TIME_MAGIC, index_header

IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers one writev takes


class WriteFailed(Exception):
    """A batch could not be made durable; nothing in it may be confirmed. `stage`: "write" or "fsync"."""

    def __init__(self, stage: str, cause: OSError) -> None:
        super().__init__(f"{stage} failed: {cause}")
        self.stage = stage
        self.cause = cause

    @property
    def out_of_space(self) -> bool:
        return self.cause.errno in (errno.ENOSPC, errno.EDQUOT)


@dataclass
class Batch:
    number: int
    first_offset: int  # offsets [first_offset, end_offset) were appended into this batch
    end_offset: int = 0
    chunks: list[tuple[int, Frames]] = field(default_factory=list)  # (segment base, frames), in order
    # each chunk's records: (segment base, position of the first frame, its offset, payload lengths)
    laid: list[tuple[int, int, int, array[int]]] = field(default_factory=list)
    new_segments: list[int] = field(default_factory=list)
    sealed_segments: list[int] = field(default_factory=list)  # rolled away from: close once synced
    segment_ends: dict[int, int] = field(default_factory=dict)  # expected file size after the batch
    index_writes: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    acks: bytearray = field(default_factory=bytearray)
    catalog_ops: list[CatalogOp] = field(default_factory=list)
    queue_values: dict[tuple[int, str], bytes | None] = field(default_factory=dict)  # last write wins
    callbacks: list[Callable[[], None]] = field(default_factory=list)
    failures: list[Callable[[], None]] = field(default_factory=list)  # fired instead if the batch fails
    delete_segments: list[int] = field(default_factory=list)  # no longer needed once this batch is synced
    checkpoint: CheckpointData | None = None
    rotate_ack_to: int | None = None  # start this ack-log file after the batch (the checkpoint covers it)
    start_ack: int | None = None  # start this ack-log file before the batch (the last one failed mid-frame)
    size: int = 0  # bytes of segment frames

    def frames_for(self, base: int) -> Frames:
        if not self.chunks or self.chunks[-1][0] != base:
            self.chunks.append((base, Frames()))
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

    def __init__(self, layout: Layout, fsync: bool, io: FileIO | None = None) -> None:
        self._layout = layout
        self._fsync = fsync
        self._io = io if io is not None else FileIO()
        self._segments: dict[int, int] = {}  # base -> fd, open for append
        self._indexes: dict[int, tuple[int, int]] = {}
        self._ack_fd: int | None = None
        self._ack_sequence = 0
        self._ack_wanted: int | None = None  # a rotation that failed after its batch was durable: retry it

    def open_segment(self, base: int) -> None:
        """Continue appending to an existing segment (after recovery)."""
        self._segments[base] = self._open_append(self._layout.segment(base))
        self._indexes[base] = (
            self._open_append(self._layout.offset_index(base)),
            self._open_append(self._layout.time_index(base)),
        )

    def start_ack_file(self, number: int) -> None:
        io = self._io
        if self._ack_fd is not None:
            io.close(self._ack_fd)
            self._ack_fd = None
        fd = io.open(self._layout.ack_file(number), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        self._ack_fd, self._ack_sequence, self._ack_wanted = fd, 0, number
        self._write_all(fd, file_header(ACK_MAGIC, number))
        if self._fsync:
            io.fsync(fd)
            self._fsync_dir(self._layout.acklog)

    def write(self, batch: Batch) -> None:
        """Write and fsync the batch; on an OSError raise WriteFailed with the files as they were before."""
        starts: dict[int, int] = {}  # segments appended to: their size before the batch
        stage = "write"
        try:
            if batch.start_ack is not None:
                self.start_ack_file(batch.start_ack)
            elif self._ack_fd is None and self._ack_wanted is not None:
                self.start_ack_file(self._ack_wanted)
            touched = []
            if batch.acks:  # before the records: see ack_log.py (recovery checks the batch's records arrived)
                touched.append(self._write_acks(batch))
            for base in batch.new_segments:
                self._create_segment(base)
            for base, frames in batch.chunks:
                fd = self._segments[base]
                if base not in batch.new_segments and base not in starts:
                    starts[base] = os.lseek(fd, 0, os.SEEK_END)
                self._write_frames(fd, frames)
                touched.append(fd)
            self._check_ends(batch)
            for base, offsets, times in batch.index_writes:
                # Not fsync'd: indexes are rebuilt from the segment if they come back damaged.
                idx_fd, tix_fd = self._indexes[base]
                self._write_all(idx_fd, offsets)
                self._write_all(tix_fd, times)
            if self._fsync:
                stage = "fsync"
                self._sync(touched, bool(batch.new_segments))
        except OSError as exc:
            self._undo(batch, starts)
            raise WriteFailed(stage, exc) from exc
        for base in batch.sealed_segments:
            self._close_segment(base)
        if batch.rotate_ack_to is not None:
            try:
                self.start_ack_file(batch.rotate_ack_to)
            except OSError:  # the batch is durable; the next batch starts this ack file again
                self._drop_ack_file()
                self._ack_wanted = batch.rotate_ack_to

    def refuse(self, batch: Batch) -> None:
        """The batch will not be written (no room above the floor): as after a failed one, the next record
        starts a new segment and the ack log a new file."""
        self._undo(batch, {})

    def close(self) -> None:
        for base in list(self._segments):
            self._close_segment(base)
        self._drop_ack_file()

    def _undo(self, batch: Batch, starts: dict[int, int]) -> None:
        """After a failed batch: truncate what it appended (a later fsync must not make half of it durable),
        remove the segments it created, close every segment (the store starts a new one) and the ack file.
        Best effort: a file that cannot be cut back is left to recovery's checks."""
        io = self._io
        for base, size in starts.items():
            try:
                io.truncate(self._segments[base], size)
            except OSError:
                pass
        for base in batch.new_segments:
            for path in (self._layout.segment(base), self._layout.offset_index(base), self._layout.time_index(base)):
                try:
                    io.unlink(path)
                except OSError:
                    pass
        for base in list(self._segments):
            self._close_segment(base)
        self._drop_ack_file()

    def _drop_ack_file(self) -> None:
        if self._ack_fd is not None:
            try:
                self._io.close(self._ack_fd)
            except OSError:
                pass
            self._ack_fd = None

    def _create_segment(self, base: int) -> None:
        # O_EXCL: a segment with this base offset already on disk would be a bookkeeping bug; refuse.
        io = self._io
        fd = io.open(self._layout.segment(base), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        self._segments[base] = fd
        self._write_all(fd, file_header(SEGMENT_MAGIC, base))
        trunc = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        idx = io.open(self._layout.offset_index(base), trunc)
        tix = io.open(self._layout.time_index(base), trunc)
        self._indexes[base] = (idx, tix)
        self._write_all(idx, index_header(OFFSET_MAGIC, OFFSET_ENTRY.size, base))
        self._write_all(tix, index_header(TIME_MAGIC, TIME_ENTRY.size, base))

    def _check_ends(self, batch: Batch) -> None:
        # Offsets and index positions were computed on the loop from a virtual file size; if the real file
        # disagrees, every later position would be wrong, so stop here.
        for base, end in batch.segment_ends.items():
            actual = os.lseek(self._segments[base], 0, os.SEEK_END)
            if actual != end:
                raise OSError(errno.EIO, f"segment {base}: file size {actual}, expected {end}")

    def _write_acks(self, batch: Batch) -> int:
        if self._ack_fd is None:
            raise OSError(errno.EBADF, "no ack-log file open")
        self._ack_sequence += 1
        entries = bytes(batch.acks)
        if batch.end_offset > batch.first_offset:
            entries = ack_log.batch_entry(batch.first_offset, batch.end_offset) + entries
        frame = bytearray()
        append_frame(frame, self._ack_sequence, entries)
        self._write_all(self._ack_fd, frame)
        return self._ack_fd

    def _sync(self, fds: list[int], new_files: bool) -> None:
        for fd in dict.fromkeys(fds):
            self._io.fsync(fd)
        if new_files:  # a new file's directory entry must be durable too
            self._fsync_dir(self._layout.segments)

    def _close_segment(self, base: int) -> None:
        fds = [self._segments.pop(base), *self._indexes.pop(base, ())]
        for fd in fds:
            try:
                self._io.close(fd)
            except OSError:
                pass

    def _open_append(self, path: os.PathLike[str]) -> int:
        return self._io.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def _write_all(self, fd: int, data: bytes | bytearray) -> None:
        view = memoryview(data)
        while view:
            written = self._io.write(fd, view)
            view = view[written:]

    def _write_frames(self, fd: int, frames: Frames) -> None:
        """A segment's frames: one write when they are packed in one buffer, else writev over the buffers (a
        large body kept apart), as many calls as IOV_MAX and partial writes take."""
        buffers = frames.buffers
        if len(buffers) == 1:
            self._write_all(fd, buffers[0])
            return
        views = [memoryview(b) for b in buffers if b]
        while views:
            written = self._io.writev(fd, views[:IOV_MAX])
            while views and written >= len(views[0]):
                written -= len(views.pop(0))
            if written:
                views[0] = views[0][written:]

    def _fsync_dir(self, path: os.PathLike[str]) -> None:
        io = self._io
        fd = io.open(path, os.O_RDONLY)
        try:
            io.fsync(fd)
        finally:
            io.close(fd)
