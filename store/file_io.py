"""The store's I/O seam: every os call that changes a store file (and reading records back) goes through a
`FileIO`, so tests can fail the Nth write or fsync, or record what a power cut would keep (tests/store)."""

from __future__ import annotations

import mmap
import os
from functools import cached_property

from store.sync_gate import SyncGate

# Bytes per read: what a commit's fsync may find queued on the disk ahead of it (store/sync_gate.py).
READ_PIECE = 1 << 20


class FileIO:
    """The store's I/O seam (os calls). Methods run in the writer's worker thread (and recovery's, at open),
    but for `pread` and `map`: reading records back, in the store's read worker (MessageStore.in_reader) or
    a read-ahead worker thread; the event loop never reads (tests/store/test_reads_off_loop.py).

    Reads give way to fsyncs (store/sync_gate.py): `pread` reads in pieces of at most READ_PIECE, each after
    the fsyncs under way when it is asked for. `read_at` and `sync_file` are the bare os calls."""

    @cached_property
    def syncs(self) -> SyncGate:
        """Made on first use, so that a seam subclass need not call FileIO.__init__."""
        return SyncGate()

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        """Up to `size` bytes at `pos` (fewer only at the end of the file)."""
        self.syncs.give_way()
        data = self.read_at(fd, min(size, READ_PIECE), pos)
        if size <= READ_PIECE or len(data) < READ_PIECE:
            return data
        pieces = [data]
        done = len(data)
        while done < size:
            self.syncs.give_way()
            piece = self.read_at(fd, min(size - done, READ_PIECE), pos + done)
            pieces.append(piece)
            done += len(piece)
            if len(piece) < READ_PIECE:
                break
        return b"".join(pieces)

    def read_at(self, fd: int, size: int, pos: int) -> bytes:
        return os.pread(fd, size, pos)

    def map(self, fd: int, size: int) -> mmap.mmap:
        """The file's first `size` bytes, mapped read-only (a scan: its pages are read where it is walked)."""
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        return os.open(path, flags, 0o644)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def writev(self, fd: int, buffers: list[memoryview]) -> int:
        """Write the buffers in order with one call (a large body with the frames around it, none copied);
        like write, it may write less than all of them."""
        return os.writev(fd, buffers)

    def pwrite(self, fd: int, data: bytes, pos: int) -> int:
        return os.pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        with self.syncs.syncing():
            self.sync_file(fd)

    def sync_file(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> None:
        """Rename over `target` (atomic; durable once the directory is fsync'd)."""
        os.replace(source, target)

    def unlink(self, path: os.PathLike[str] | str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def write_all(io: FileIO, fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = io.write(fd, view)
        view = view[written:]


def fsync_dir(io: FileIO, path: os.PathLike[str] | str) -> None:
    """Make the directory's entries (files created, renamed or removed in it) durable."""
    fd = io.open(path, os.O_RDONLY)
    try:
        io.fsync(fd)
    finally:
        io.close(fd)
