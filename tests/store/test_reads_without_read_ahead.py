"""Reading records back asks the disk for the bytes the store reads and no more (FileIO.open_for_reads): the
kernel's read-ahead would queue megabytes past them on the device in front of every commit's fsync, and a
stream replayed from a cold page cache slowed publishers' confirms several times over (issue 26).

What is observable without a clock: after the store read part of a segment from a cold page cache, the only
pages of the segment in memory are those its preads asked for (mincore). Read-ahead would bring pages past
them in too."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from store.file_io import FileIO
from store.record_codec import decode_record

pytestmark = pytest.mark.anyio

BODY = 16 << 10
RECORDS = 512  # 8 MiB of records, one segment
WINDOW = 64  # records per read, as a stream replays them (about 1 MiB)
WINDOWS_READ = 3


class RecordedReads(FileIO):
    """Records where each pread of a file asked for bytes."""

    def __init__(self) -> None:
        self.preads: list[tuple[int, int, int]] = []  # (fd, position, size)

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        self.preads.append((fd, pos, size))
        return super().pread(fd, size, pos)


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: Path) -> set[int]:
    """The numbers of the file's pages that are in the page cache (mincore on a mapping that touches none)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return {n for n in range(pages) if vector[n] & 1}
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (written back first: only clean pages can go)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def pages_of(pos: int, size: int) -> range:
    return range(pos // mmap.PAGESIZE, (pos + size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)


async def test_a_replay_from_a_cold_page_cache_brings_in_only_the_pages_it_reads(tmp_path: Path) -> None:
    io = RecordedReads()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    try:
        stream = store.put_queue("/", "replayed", False, {})
        bodies = [b"%08d" % n * (BODY // 8) for n in range(RECORDS)]
        offsets = [store.append(MessageRecord("", "replayed", b"", body, 1), [stream]) for body in bodies]
        await store.flush()
        [segment] = (tmp_path / "segments").glob("*.seg")
        evict(segment)
        if resident_pages(segment):
            pytest.skip(f"this filesystem keeps {segment.parent}'s pages in memory (tmpfs?): nothing to observe")
        io.preads.clear()
        for w in range(WINDOWS_READ):  # from the first record on, one window after the other
            window = slice(w * WINDOW, (w + 1) * WINDOW)
            payloads = store.read_payloads(offsets[window])
            assert [decode_record(p)[2].body for p in payloads if p is not None] == bodies[window]
        asked = {page for _, pos, size in io.preads for page in pages_of(pos, size)}
        resident = resident_pages(segment)
        assert resident  # (the reads went to this file)
        assert sorted(resident - asked) == []
    finally:
        await store.close()
