"""The store's I/O seam: every os call that changes a store file (and reading records back) goes through a
`FileIO`, so tests can fail the Nth write or fsync, or record what a power cut would keep (tests/store)."""

from __future__ import annotations

import mmap
import os


class FileIO:
    """The store's I/O seam (os calls). Methods run in the writer's worker thread (and recovery's, at open),
    but for `pread`, `map` and `open_for_reads`: reading records back, in the store's read worker
    (MessageStore.in_reader) or a read-ahead worker thread; the event loop never reads
    (tests/store/test_reads_off_loop.py). Readers of a data directory outside the store (QueueLogReader,
    recovery's load_retained) open, map and read through it too."""

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        return os.pread(fd, size, pos)

    def open_for_reads(self, path: os.PathLike[str] | str) -> int:
        """A segment opened to read records back, with the kernel's read-ahead off for this descriptor
        (POSIX_FADV_RANDOM): a pread then sends the device only the bytes it asks for. With read-ahead on,
        a reader going through a file (a stream replayed from a cold page cache) keeps megabytes of reads
        queued on the disk, and each commit's fsync waits behind them: the publishers' confirms slowed
        several times over (issue 26, bench.loop_reads). The store's reads ask for large pieces (a window,
        a stretch, a chunk), so they go as fast without it."""
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):  # (not on macOS)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return fd

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
