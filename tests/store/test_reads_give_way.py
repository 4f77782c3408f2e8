"""Reads give way to fsyncs (store/sync_gate.py): a publisher's confirm waits on the store's fsync, and that
fsync waited on the disk behind a replay's large reads. Through the store's I/O seam, with an fsync held open
by the test: a read asked for meanwhile waits until it returns, an fsync begun after the read does not hold
it, and a large read is read in pieces (each one giving way) that add up to the same bytes."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore, sync_gate
from store.file_io import READ_PIECE, FileIO

pytestmark = pytest.mark.anyio

WAIT = 10.0  # s: bound on every wait for another thread


class HeldSyncIO(FileIO):
    """The seam with fsyncs the test holds open once `hold` is set, and a log of the bare os calls."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.log: list[str] = []
        self.syncing = threading.Semaphore(0)  # released once per held fsync that has started
        self.releases: list[threading.Event] = []  # per held fsync, in the order they started: set to return
        self.lock = threading.Lock()
        self.piece_sizes: list[int] = []

    def read_at(self, fd: int, size: int, pos: int) -> bytes:
        self.log.append("read")
        self.piece_sizes.append(size)
        return super().read_at(fd, size, pos)

    def sync_file(self, fd: int) -> None:
        if self.hold:
            with self.lock:
                release = threading.Event()
                self.releases.append(release)
                self.log.append("sync started")
            self.syncing.release()
            assert release.wait(WAIT), "the test never let the fsync return"
            self.log.append("sync returned")
        super().sync_file(fd)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def start(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def a_file(path: Path, size: int) -> int:
    path.write_bytes(bytes(range(256)) * (size // 256))
    return os.open(path, os.O_RDWR)


def test_a_read_waits_for_the_fsync_under_way(tmp_path: Path) -> None:
    io = HeldSyncIO()
    fd = a_file(tmp_path / "f", 4096)
    io.hold = True
    syncer = start(lambda: io.fsync(fd))
    assert io.syncing.acquire(timeout=WAIT)
    got: list[bytes] = []
    reader = start(lambda: got.append(io.pread(fd, 100, 256)))
    wait_until(lambda: io.syncs.waiting == 1)
    assert io.log == ["sync started"]  # the read has not touched the disk
    io.releases[0].set()
    syncer.join(WAIT)
    reader.join(WAIT)
    assert io.log == ["sync started", "sync returned", "read"]
    assert got == [bytes(range(100))]
    os.close(fd)


def test_an_fsync_begun_after_a_read_does_not_hold_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_gate, "GIVE_WAY_MAX_SECONDS", 10 * WAIT)  # no reprieve by time: only by order
    io = HeldSyncIO()
    fd = a_file(tmp_path / "f", 4096)
    io.hold = True
    first = start(lambda: io.fsync(fd))
    assert io.syncing.acquire(timeout=WAIT)
    reader = start(lambda: io.pread(fd, 100, 0))
    wait_until(lambda: io.syncs.waiting == 1)
    second = start(lambda: io.fsync(fd))  # a commit that comes after the read was asked for
    assert io.syncing.acquire(timeout=WAIT)
    io.releases[0].set()
    reader.join(WAIT)
    assert io.log == ["sync started", "sync started", "sync returned", "read"]  # the second still under way
    io.releases[1].set()
    for thread in (first, second):
        thread.join(WAIT)
    os.close(fd)


def test_a_large_read_is_read_in_pieces_with_the_same_bytes(tmp_path: Path) -> None:
    io = HeldSyncIO()
    size = 3 * READ_PIECE + 1000
    fd = a_file(tmp_path / "f", size + 4096)
    assert io.pread(fd, size, 300) == os.pread(fd, size, 300)
    assert io.piece_sizes == [READ_PIECE, READ_PIECE, READ_PIECE, 1000]
    io.piece_sizes.clear()
    end = os.fstat(fd).st_size
    assert io.pread(fd, 2 * READ_PIECE, end - READ_PIECE - 5) == os.pread(fd, 2 * READ_PIECE, end - READ_PIECE - 5)
    os.close(fd)


async def test_the_store_read_worker_waits_for_a_commit_fsync(tmp_path: Path) -> None:
    io = HeldSyncIO()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    queue = store.put_queue("/", "q", False, {})
    written = store.append(MessageRecord("", "q", b"", b"on disk", 1), [queue])
    await store.flush()
    io.hold, io.log[:] = True, []
    store.append(MessageRecord("", "q", b"", b"being committed", 1), [queue])
    committing = asyncio.ensure_future(store.flush())
    assert await asyncio.to_thread(io.syncing.acquire, timeout=WAIT)
    reading = store.in_reader(store.read, written)
    await asyncio.to_thread(wait_until, lambda: io.syncs.waiting == 1)
    assert not reading.done() and "read" not in io.log
    io.hold = False
    io.releases[0].set()
    assert (await asyncio.wait_for(reading, WAIT)).body == b"on disk"
    await asyncio.wait_for(committing, WAIT)
    assert io.log.index("sync returned") < io.log.index("read")
    await store.close()
