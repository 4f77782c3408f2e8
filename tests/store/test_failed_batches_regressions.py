"""Failed batches, as explicit steps (the fault model in test_fault_model.py finds such sequences at random).

A message moved twice, each move in a batch that failed: the second move's ack of the first move's
record (only in memory since the first failure) is buffered behind a batch that is in its fsync, and that
fsync fails too. The first failure's held-back ack (of the message's record on disk) must wait for the
second failure's records: written as soon as the first failure's own record is acked, it left the
confirmed message in no queue after a restart (found by the fault model with two batches in flight on
branch pipe30c; main's store does the same with one batch in flight and the next one filling).
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import run_sync
from anyio.lowlevel import EventLoopToken, current_token

from store import MessageRecord, MessageStore
from store.file_io import FileIO

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FsyncFailsAfter(FileIO):
    """Fails the next fsync of a segment file after `arm(work)`, once; just before failing, runs `work` on
    the event loop: what the broker buffers while the batch is in its fsync (the batch filling behind it)."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.work: Callable[[], None] | None = None
        self.token: EventLoopToken | None = None

    def arm(self, work: Callable[[], None]) -> None:
        self.work, self.token = work, current_token()

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        fd = super().open(path, flags)
        self.paths[fd] = str(path)
        return fd

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)

    def fsync(self, fd: int) -> None:
        work = self.work
        if work is not None and self.paths.get(fd, "").endswith(".seg"):
            self.work = None
            run_sync(work, token=self.token)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


def _record(name: str) -> MessageRecord:
    return MessageRecord("", "rk", b"", name.encode(), 1_700_000_000_000)


async def _bodies(root: Path, io: FileIO) -> Counter[bytes]:
    store = MessageStore(root, io=io)
    recovered = await store.open()
    await store.close()
    return Counter(m.record.body for q in recovered.queues for m in q.messages)


async def test_a_message_moved_twice_by_failed_batches_is_not_lost(tmp_path: Path) -> None:
    io = FsyncFailsAfter()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    a, b = store.put_queue("/", "a", False, {}), store.put_queue("/", "b", False, {})
    confirmed: list[bool] = []
    on_disk = store.append(_record("m"), [a], lambda: confirmed.append(True))
    await store.flush()
    assert confirmed == [True]

    # Move 1 (dead-lettering a -> b) in a batch whose fsync fails: the ack of the record on disk is held back.
    store.ack(a, on_disk)
    moved_once = store.append(_record("m"), [b])
    io.arm(lambda: None)
    await store.flush()
    assert store.fault_stats["fsync_failures"] == 1

    # Move 2 (b -> a), buffered while the next batch is in its fsync; that fsync fails too.
    store.append(_record("other"), [a])

    def move_again() -> None:
        store.ack(b, moved_once)
        store.append(_record("m"), [a])

    io.arm(move_again)
    await store.flush()
    assert store.fault_stats["fsync_failures"] == 2

    # Writing works again; a batch is written, then the broker restarts.
    store.append(_record("later"), [b])
    await store.flush()
    await store.close()

    bodies = await _bodies(tmp_path, FileIO())
    assert bodies[b"m"] >= 1, f"a confirmed message is in no queue after the restart: {dict(bodies)}"
    assert bodies[b"later"] == 1


async def test_the_fsync_hook_runs_behind_the_batch(tmp_path: Path) -> None:
    """The seam does what the test above relies on: the work runs while the batch is in its fsync, so it
    lands in the batch behind, which fails with it."""
    io = FsyncFailsAfter()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    a = store.put_queue("/", "a", False, {})
    outcomes: list[str] = []
    store.append(_record("first"), [a], lambda: outcomes.append("first durable"), lambda: outcomes.append("first failed"))

    def behind() -> None:
        store.append(_record("behind"), [a], lambda: outcomes.append("behind durable"), lambda: outcomes.append("behind failed"))

    io.arm(behind)
    await store.flush()
    with anyio.fail_after(30):
        while len(outcomes) < 2:
            await anyio.sleep(0)
            await store.flush()
    assert sorted(outcomes) == ["behind failed", "first failed"]
    await store.close()
