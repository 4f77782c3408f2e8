"""A recovered durable backlog read back from a real store, in process: the store's reads (every pread goes
through its I/O seam, store.commit.FileIO) happen in a worker thread ahead of need, not on the event loop's
thread, and a truthiness check reads nothing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from fakes import publish_frames
from pamqp import commands

from amqpd.broker.broker import Broker
from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.queue import Queue
from amqpd.broker.recovery import restore
from amqpd.config import Settings
from store import MessageStore
from store.commit import FileIO
from tests.unit.test_store_faults import Client

pytestmark = pytest.mark.anyio
COUNT = 3 * Backlog.BATCH + 700


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ThreadRecordingIO(FileIO):
    """Records which thread made each pread (a read of a record back)."""

    def __init__(self) -> None:
        self.pread_threads: list[int] = []

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        self.pread_threads.append(threading.get_ident())
        return super().pread(fd, size, pos)


async def recovered_backlog(tmp_path: Path, io: FileIO) -> tuple[MessageStore, Queue]:
    """COUNT persistent messages published to a durable queue, then the broker restarted on `io`."""
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    pub = Client(Broker(Settings(data_dir=str(tmp_path)), store=store))
    pub.method(1, commands.Queue.Declare(queue="q", durable=True))
    for n in range(COUNT):
        pub.send(publish_frames(1, "", "q", b"m%d" % n + b"." * 600, delivery_mode=2))
    await store.close()
    store = MessageStore(tmp_path, fsync="none", io=io)
    recovered = await store.open(load_records=False)
    broker = Broker(Settings(data_dir=str(tmp_path)), store=store)
    await restore(broker, recovered)
    q = broker.vhosts["/"].queues["q"]
    assert isinstance(q.ready, Backlog) and q.message_count == COUNT
    return store, q


async def worker_done(q: Queue) -> None:
    """Let the worker thread finish the read it has in hand (as a consumer's pace would)."""
    ready = q.ready
    assert isinstance(ready, Backlog)
    for batch in (ready._current, ready._ahead):  # noqa: SLF001 - waiting for exactly what is in flight
        while batch is not None and batch.reading:
            await asyncio.sleep(0.001)


async def test_a_refill_reads_in_a_worker_thread_not_on_the_event_loop(tmp_path: Path) -> None:
    io = ThreadRecordingIO()
    store, q = await recovered_backlog(tmp_path, io)
    loop_thread = threading.get_ident()
    at_recovery = len(io.pread_threads)  # the head's slice, read before the broker serves anyone
    bodies = []
    while q.ready:
        await worker_done(q)
        entry = q.get()
        assert entry is not None and entry.msg.body is not None
        bodies.append(bytes(entry.msg.body[: entry.msg.body.index(b".")]))
    assert bodies == [b"m%d" % n for n in range(COUNT)]
    drained = io.pread_threads[at_recovery:]
    assert [t for t in drained if t == loop_thread] == []  # not one read on the loop while draining
    assert any(t != loop_thread for t in drained)  # the worker did read them
    await store.close()


async def test_a_truthiness_check_reads_nothing_from_the_store(tmp_path: Path) -> None:
    io = ThreadRecordingIO()
    store, q = await recovered_backlog(tmp_path, io)
    taken = 0
    loop_thread = threading.get_ident()

    def loop_reads() -> int:  # a read-ahead under way in the worker reads meanwhile: not truthiness's
        return io.pread_threads.count(loop_thread)

    while True:
        reads = loop_reads()
        nonempty = bool(q.ready)
        assert loop_reads() == reads
        if not nonempty:
            break
        q.get()  # no waiting for the worker: refills may read for themselves, truthiness never
        taken += 1
    assert taken == COUNT
    await store.close()
