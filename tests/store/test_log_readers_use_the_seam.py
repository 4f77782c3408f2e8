"""Readers of the log outside the store's own read path open and read segments through the I/O seam
(store/file_io.py) too: the reader for clients outside the broker (QueueLogReader, the Spark source) and
recovery's read of a segment kept only for retention (load_retained). A test's FileIO then sees every file
these read, as it does the store's own reads."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore, QueueLogReader
from store.file_io import FileIO
from store.retention import load_retained
from store.segment import Layout
from store.segment_index import DEFAULT_INTERVAL

pytestmark = pytest.mark.anyio


class OpenedFiles(FileIO):
    """Records the files opened through it, and the descriptors mapped or read."""

    def __init__(self) -> None:
        self.opened: dict[int, str] = {}  # fd -> path
        self.used: list[str] = []  # paths mapped or read, in order

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        fd = super().open(path, flags)
        self.opened[fd] = str(path)
        return fd

    def map(self, fd: int, size: int) -> mmap.mmap:
        self.used.append(self.opened[fd])
        return super().map(fd, size)

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        self.used.append(self.opened[fd])
        return super().pread(fd, size, pos)


async def stored(data_dir: Path, bodies: list[bytes]) -> None:
    store = MessageStore(data_dir)
    await store.open()
    try:
        queue = store.put_queue("/", "s", True, {"x-queue-type": "stream"})
        for body in bodies:
            store.append(MessageRecord("", "s", b"", body, 2), [queue])
        await store.flush()
    finally:
        await store.close()


async def test_a_reader_outside_the_broker_reads_segments_through_the_seam(tmp_path: Path) -> None:
    bodies = [b"m%d" % n for n in range(10)]
    await stored(tmp_path, bodies)
    io = OpenedFiles()
    read = QueueLogReader(tmp_path, "/", "s", io=io).read(0, 100)
    assert [record.body for _, record in read] == bodies
    segments = {str(Layout(tmp_path).segment(base)) for base in Layout(tmp_path).segment_bases()}
    assert set(io.used) & segments


async def test_a_segment_kept_for_retention_is_read_through_the_seam(tmp_path: Path) -> None:
    await stored(tmp_path, [b"m%d" % n for n in range(10)])
    layout = Layout(tmp_path)
    [base] = layout.segment_bases()
    io = OpenedFiles()
    index, size, _rebuilt = load_retained(layout, base, DEFAULT_INTERVAL, io)
    assert size == layout.segment(base).stat().st_size
    assert index.max_timestamp > 0
    assert io.used and set(io.used) == {str(layout.segment(base))}
