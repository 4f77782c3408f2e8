"""The event loop never reads the disk (issue 26): every path that reads a record back from the store does it
in the store's read worker. The store's I/O seam (store/file_io.py) records the thread of each read; each test
drives one path on a broker over a real store, checks that the client got what it should (so the read did
happen), and that none of the reads ran on the loop's thread."""

from __future__ import annotations

import datetime
import errno
import json
import mmap
import pathlib
import tempfile
import threading
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from unittest.mock import patch

import anyio
import pytest
from fakes import ClientChannel, Conn, decode_frames, messages
from pamqp import commands, frame

from amqpd.broker import store_reads
from amqpd.broker.broker import Broker
from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.queue import Queue
from amqpd.broker.recovery import restore
from amqpd.broker.streams.stream import StreamQueue
from amqpd.config import Settings
from amqpd.mgmt import operations
from store import MessageStore
from store.file_io import FileIO
from store.frame import HEADER_SIZE, ScanReport, scan_frames
from store.segment import FILE_HEADER_SIZE
from store.segment_log import SegmentLog


class RecordingIO(FileIO):
    """The store's seam, noting which thread each read ran on."""

    def __init__(self) -> None:
        self.read_threads: list[int] = []
        self.loop_thread = threading.get_ident()
        self.loop_stacks: list[str] = []  # where the loop read: the failure names the path
        self.failing = 0  # reads in a worker thread still to fail (EIO), once each

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        self._note()
        if self.failing and threading.get_ident() != self.loop_thread:
            self.failing -= 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        return super().pread(fd, size, pos)

    def map(self, fd: int, size: int) -> mmap.mmap:
        self._note()
        return super().map(fd, size)

    def _note(self) -> None:
        self.read_threads.append(threading.get_ident())
        if self.read_threads[-1] == self.loop_thread:
            self.loop_stacks.append("".join(traceback.format_stack(limit=12)))


class Setup:
    def __init__(self, broker: Broker, store: MessageStore, io: RecordingIO, data_dir: str = "") -> None:
        self.broker, self.store, self.io = broker, store, io
        self.data_dir = data_dir
        self.loop_thread = threading.get_ident()

    async def settle(self) -> None:
        """Everything published is on disk (and out of the store's memory), every read asked for is in; twice,
        as what a read sets off (a dead letter, a delayed release) publishes again."""
        for _ in range(2):
            await self.store.flush()
            await self.store.reads_done()

    async def settle_until(self, done: Callable[[], bool]) -> None:
        """settle() until `done()` (a read tried again after a failure is asked for on a later loop turn)."""
        for _ in range(200):
            await self.settle()
            if done():
                return
        raise AssertionError("still waiting after 200 rounds of reads")

    def start_counting(self) -> None:
        self.io.read_threads.clear()
        self.io.loop_stacks.clear()

    def assert_read_off_the_loop(self) -> None:
        assert self.io.read_threads, "nothing was read back from the disk: the test proves nothing"
        on_loop = self.io.read_threads.count(self.loop_thread)
        where = "\n".join(self.io.loop_stacks[:2])
        assert on_loop == 0, f"{on_loop} of {len(self.io.read_threads)} reads ran on the event loop's thread:\n{where}"


@asynccontextmanager
async def broker_on_disk() -> AsyncIterator[Setup]:
    with tempfile.TemporaryDirectory() as d:
        io = RecordingIO()
        store = MessageStore(d, fsync="none", io=io)
        await store.open()
        try:
            yield Setup(Broker(Settings(), store=store), store, io, d)
        finally:
            await store.close()


def run(scenario: Callable[[Setup], Awaitable[None]]) -> None:
    async def main() -> None:
        async with broker_on_disk() as setup:
            await scenario(setup)

    anyio.run(main)


def stream_with(setup: Setup, count: int, size: int = 100) -> ClientChannel:
    c = ClientChannel(setup.broker)
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    for n in range(count):
        c.publish("", "s", b"%05d" % n + b"z" * size)
    return c


def bodies(c: ClientChannel) -> list[bytes]:
    return [body for _method, body in c.deliveries()]


STREAM_CONSUMERS: dict[str, dict[str, Any]] = {
    "replay": {},
    "filtered": {"x-stream-filter": ["x"], "x-stream-match-unfiltered": True},
    "chunks": {"x-amqpd-chunk": 16},
    "chunks layout 3": {"x-amqpd-chunk": 16, "x-amqpd-chunk-layout": 3},
}


@pytest.mark.parametrize("kind", list(STREAM_CONSUMERS))
def test_a_stream_consumer_reads_the_stream_off_the_event_loop(kind: str) -> None:
    async def scenario(setup: Setup) -> None:
        c = stream_with(setup, 300)
        await setup.settle()
        setup.start_counting()
        c.call(commands_qos(1000))
        c.consume("s", "c", arguments={"x-stream-offset": "first", **STREAM_CONSUMERS[kind]})
        await setup.settle()
        got = bodies(c)
        if kind.startswith("chunks"):
            assert got, "no chunk came"
            assert sum(len(b) for b in got) >= 300 * 105
        else:
            assert got == [b"%05d" % n + b"z" * 100 for n in range(300)]
        setup.assert_read_off_the_loop()

    run(scenario)


def test_peeking_into_a_stream_reads_it_off_the_event_loop() -> None:
    async def scenario(setup: Setup) -> None:
        stream_with(setup, 50)
        await setup.settle()
        setup.start_counting()
        q = setup.broker.vhosts["/"].queues["s"]
        assert isinstance(q, StreamQueue)
        records = await q.log.read_async(10, 5)
        assert [bytes(r.body)[:5] for _, r in records] == [b"%05d" % n for n in range(10, 15)]
        setup.assert_read_off_the_loop()

    run(scenario)


QUEUES: dict[str, dict[str, Any]] = {
    "priority": {"x-max-priority": 5},
    "x-max-length-bytes": {"x-max-length-bytes": 10_000_000},
    "classic": {},
}
PAGED = 40  # messages published: Queue.PAGE_WINDOW is made smaller than this


def paged_queue(setup: Setup, kind: str) -> ClientChannel:
    """A durable queue of `kind` holding PAGED persistent messages, the deeper ones paged out to the store."""
    c = ClientChannel(setup.broker)
    c.declare_queue("q", durable=True, arguments=QUEUES[kind])
    for n in range(PAGED):
        c.publish("", "q", b"%05d" % n + b"b" * Queue.PAGE_MIN_BODY, delivery_mode=2)
    return c


def paged_bodies() -> list[bytes]:
    return [b"%05d" % n + b"b" * Queue.PAGE_MIN_BODY for n in range(PAGED)]


@pytest.mark.parametrize("kind", list(QUEUES))
def test_a_consumer_of_a_queue_gets_its_paged_out_bodies_read_off_the_event_loop(kind: str) -> None:
    async def scenario(setup: Setup) -> None:
        c = paged_queue(setup, kind)
        await setup.settle()
        setup.start_counting()
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("q", "c")
        await setup.settle()
        assert bodies(c) == paged_bodies()
        setup.assert_read_off_the_loop()

    with patch.object(Queue, "PAGE_WINDOW", 8):
        run(scenario)


def commands_qos(prefetch: int) -> Any:
    return commands.Basic.Qos(prefetch_count=prefetch)


def test_dead_lettering_a_paged_out_message_reads_its_body_off_the_event_loop_and_keeps_the_order() -> None:
    """A priority queue with a length limit: its high-priority messages are deep enough to be paged out, and
    each publish past the limit drops the head (one of them) to the dead-letter queue."""

    async def scenario(setup: Setup) -> None:
        c = ClientChannel(setup.broker)
        c.declare_queue("dlq", durable=True)
        arguments = {
            "x-max-priority": 5,
            "x-max-length": PAGED,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        }
        c.declare_queue("q", durable=True, arguments=arguments)
        body = paged_bodies()
        for n in range(PAGED):
            c.publish("", "q", body[n], delivery_mode=2, priority=0 if n < 8 else 5)
        await setup.settle()
        setup.start_counting()
        for n in range(10):
            c.publish("", "q", b"late-%d" % n, delivery_mode=2)
        await setup.settle()
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("dlq", "c")
        await setup.settle()
        assert bodies(c) == body[8:18]
        setup.assert_read_off_the_loop()

    with patch.object(Queue, "PAGE_WINDOW", 8):
        run(scenario)


@pytest.mark.parametrize("dead_letters", [False, True], ids=["dropped", "dead-lettered"])
@pytest.mark.parametrize("late", [10, 30])
def test_a_classic_queue_at_its_max_length_drops_its_head_without_reading_its_backlog_on_the_loop(
    late: int, dead_letters: bool
) -> None:
    """A durable classic queue at its x-max-length, deeper than its window: the publishes past the limit drop
    the head at once (the window's entries, then the messages only the store holds, in order), the count is
    right at once, and the window is refilled from what the read worker read. `late` past the window's 8
    takes drops through the batches in hand and the offsets behind them."""

    async def scenario(setup: Setup) -> None:
        c = ClientChannel(setup.broker)
        arguments: dict[str, Any] = {"x-max-length": PAGED}
        if dead_letters:
            c.declare_queue("dlq", durable=True)
            arguments |= {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
        c.declare_queue("q", durable=True, arguments=arguments)
        body = paged_bodies()
        for n in range(PAGED):
            c.publish("", "q", body[n], delivery_mode=2)
        q = setup.broker.vhosts["/"].queues["q"]
        assert isinstance(q.ready, Backlog), "the queue should hold its deeper messages as store offsets"
        await setup.settle()
        setup.start_counting()
        for n in range(late):
            c.publish("", "q", b"late-%d" % n, delivery_mode=2)
            assert q.message_count == PAGED  # the drop is at once
        await setup.settle()
        if dead_letters:
            c.consume("dlq", "d", no_ack=True)
            await setup.settle()
            assert bodies(c) == body[:late]
        c.consume("q", "c", no_ack=True)
        await setup.settle()
        assert bodies(c) == [*body[late:], *(b"late-%d" % n for n in range(late))]
        setup.assert_read_off_the_loop()
        await setup.store.close()  # a restart: what was dropped does not come back
        again = MessageStore(setup.data_dir, fsync="none")
        recovered = await again.open()
        await again.close()
        assert {e.name: len(e.messages) for e in recovered.queues} == {"q": 0, **({"dlq": 0} if dead_letters else {})}

    with patch.object(Queue, "PAGE_WINDOW", 8), patch.object(Backlog, "BATCH", 8):
        run(scenario)


def damage_record(data_dir: str, offset: int) -> None:
    """Flip a byte in the payload of the record at `offset` on disk: the store's first read of it fails its
    checks (store/FORMAT.md: every frame is checked the first time the process reads it, unless the process
    wrote it itself)."""
    for segment in pathlib.Path(data_dir, "segments").glob("*.seg"):
        data = segment.read_bytes()
        for pos, seq, _payload in scan_frames(data, FILE_HEADER_SIZE, len(data), ScanReport()):
            if seq == offset:
                with open(segment, "r+b") as f:
                    f.seek(pos + HEADER_SIZE + 10)
                    byte = f.read(1)[0]
                    f.seek(pos + HEADER_SIZE + 10)
                    f.write(bytes([byte ^ 0x5A]))
                return
    raise AssertionError(f"no record {offset} on disk")


DAMAGED = 20  # the message whose record is damaged on disk: deep enough to be paged out


@pytest.mark.parametrize("kind", ["priority", "x-max-length-bytes"])
@pytest.mark.parametrize("how", ["consume", "get"])
def test_a_paged_out_message_damaged_on_disk_is_dropped_without_a_read_on_the_loop(
    kind: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The read worker gives nothing back for a paged-out body whose record fails its checks: the message is
    dropped as the worker-read path drops such a record (logged, acked so that it does not come back), and
    the messages around it are delivered in order; nothing is read on the loop, nothing raises."""

    async def scenario(setup: Setup) -> None:
        c = paged_queue(setup, kind)
        q = setup.broker.vhosts["/"].queues["q"]
        damaged = [e.msg for e in q.ready if e.msg.body is None and e.msg.store_offset is not None]
        assert damaged, "nothing was paged out: the test proves nothing"
        target = next(m for m in damaged if m.store_offset == DAMAGED)  # published 21st
        await setup.settle()
        damage_record(setup.data_dir, target.store_offset)  # type: ignore[arg-type]
        setup.start_counting()
        expected = [b for n, b in enumerate(paged_bodies()) if n != DAMAGED]
        if how == "consume":
            c.call(commands.Basic.Qos(prefetch_count=1000))
            c.consume("q", "c")
            got: list[bytes] = []
            await setup.settle_until(lambda: bool(got.extend(bodies(c))) or len(got) >= len(expected))
        else:
            conn = Conn(setup.broker)
            gets = [frame.marshal(commands.Basic.Get(queue="q", no_ack=True), 1) for _ in range(PAGED)]
            conn.send(b"".join(gets))
            out: list[Any] = []
            await setup.settle_until(
                lambda: (
                    bool(out.extend(obj for _, obj in decode_frames(conn.session.take_output())))
                    or any(isinstance(obj, commands.Basic.GetEmpty) for obj in out)
                )
            )
            got = [body for _, body in messages(out)]
            assert not any(isinstance(obj, commands.Channel.Close) for obj in out)
        assert got == expected
        assert q.message_count == 0
        assert "could not be read back" in caplog.text
        setup.assert_read_off_the_loop()

    # SegmentLog.written off: the store has checked none of what it wrote, as after a restart (what a store
    # wrote itself counts as checked: store/checked_runs.py), so the damage made under it is found
    with patch.object(Queue, "PAGE_WINDOW", 8), patch.object(SegmentLog, "written", lambda self, batch: None):
        run(scenario)


async def payloads_shown(broker: Broker, vhost: Any, action: str) -> list[bytes]:
    """The payloads of the queue "q" as the HTTP API's get (requeued) or peek shows them."""
    if action == "get":
        fetched = await operations.get(broker, vhost, "q", PAGED, "ack_requeue_true")
        shown = [operations.message_json(broker, f.entry, f.message_count, "auto", None) for f in fetched]
    else:
        entries = await operations.peek(broker, vhost, "q", PAGED)
        shown = [operations.message_json(broker, e, PAGED, "auto", None) for e in entries]
    return [m["payload"].encode() for m in shown]


@pytest.mark.parametrize("kind", ["priority", "x-max-length-bytes"])
@pytest.mark.parametrize("action", ["get", "peek"])
def test_the_http_apis_get_and_peek_leave_out_a_paged_out_message_damaged_on_disk(kind: str, action: str) -> None:
    """The HTTP API's get and peek read paged-out bodies in the read worker: one it finds damaged is not
    shown (nor read on the loop); a get drops it from the queue, and the others go back in order."""

    async def scenario(setup: Setup) -> None:
        paged_queue(setup, kind)
        await setup.settle()
        damage_record(setup.data_dir, DAMAGED)
        setup.start_counting()
        broker, vhost = setup.broker, setup.broker.vhosts["/"]
        expected = [b for n, b in enumerate(paged_bodies()) if n != DAMAGED]
        assert await payloads_shown(broker, vhost, action) == expected
        setup.assert_read_off_the_loop()
        c = ClientChannel(broker)
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("q", "c")
        got: list[bytes] = []
        await setup.settle_until(lambda: bool(got.extend(bodies(c))) or len(got) >= len(expected))
        assert got == expected
        setup.assert_read_off_the_loop()

    # SegmentLog.written off: the store has checked none of what it wrote, as after a restart (what a store
    # wrote itself counts as checked: store/checked_runs.py), so the damage made under it is found
    with patch.object(Queue, "PAGE_WINDOW", 8), patch.object(SegmentLog, "written", lambda self, batch: None):
        run(scenario)


async def _stored_delayed_messages(setup: Setup) -> tuple[ClientChannel, list[int]]:
    """A durable delayed exchange "dx" bound to queue "q", holding 20 stored messages due 100-119 ms after the
    broker's (settable) delayed clock: the channel, and that clock."""
    broker = setup.broker
    clock = [1_000_000]
    broker.delayed.clock = lambda: clock[0]
    c = ClientChannel(broker)
    arguments = {"x-delayed-type": "direct"}
    c.call(
        commands.Exchange.Declare(exchange="dx", exchange_type="x-delayed-message", durable=True, arguments=arguments)
    )
    c.declare_queue("q", durable=True)
    c.call(commands.Queue.Bind(queue="q", exchange="dx", routing_key="k"))
    for n in range(20):
        c.publish("dx", "k", b"delayed-%02d" % n, headers={"x-delay": 100 + n}, delivery_mode=2)
    await setup.settle()
    return c, clock


def test_releasing_stored_delayed_messages_reads_them_off_the_event_loop_in_order() -> None:
    async def scenario(setup: Setup) -> None:
        broker = setup.broker
        c, clock = await _stored_delayed_messages(setup)
        setup.start_counting()
        clock[0] += 1_000
        ex = broker.vhosts["/"].exchanges["dx"]
        assert broker.delayed.release_due(ex) == 20  # type: ignore[arg-type]
        await setup.settle()
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("q", "c")
        await setup.settle()
        assert bodies(c) == [b"delayed-%02d" % n for n in range(20)]
        setup.assert_read_off_the_loop()

    run(scenario)


@pytest.mark.parametrize("kind", list(QUEUES))
@pytest.mark.parametrize("action", ["get", "peek"])
def test_the_http_apis_get_and_peek_read_paged_out_bodies_off_the_event_loop(kind: str, action: str) -> None:
    async def scenario(setup: Setup) -> None:
        paged_queue(setup, kind)
        await setup.settle()
        setup.start_counting()
        broker, vhost = setup.broker, setup.broker.vhosts["/"]
        assert await payloads_shown(broker, vhost, action) == paged_bodies()
        setup.assert_read_off_the_loop()

    with patch.object(Queue, "PAGE_WINDOW", 8):
        run(scenario)


def test_a_backlog_record_written_between_its_read_ahead_and_its_decoding_is_not_read_on_the_loop() -> None:
    """The interleaving a backlog can meet: its next batch's read-ahead is asked for (on the loop) while the
    batch's last records are still only in the store's memory; the worker reads the file stretches; the
    store writes those records; the batch is decoded on the loop. Written since, they were in no stretch."""

    async def scenario(setup: Setup) -> None:
        store = setup.store
        c = ClientChannel(setup.broker)
        c.declare_queue("q", durable=True)
        for n in range(30):
            if n == 20:
                await setup.settle()  # the first twenty on disk, the last ten appended but not written
            c.publish("", "q", b"body-%02d" % n, delivery_mode=2)
        q = setup.broker.vhosts["/"].queues["q"]
        offsets = sorted(e.msg.store_offset for e in q.ready)
        assert store.durable_end() == offsets[20], "the last ten should not be written yet"
        setup.start_counting()
        work = store.read_ahead(offsets)  # asked for on the loop, as Backlog._request does
        ahead = await store.in_reader(work)  # the worker reads what is on disk
        await store.flush()  # the last ten are written only now
        records = store.read_many(offsets, ahead)  # decoded on the loop, as Backlog._decode_slice does
        assert [bytes(r.body) for r in records if r is not None] == [b"body-%02d" % n for n in range(30)]
        setup.assert_read_off_the_loop()

    run(scenario)


FAILURES = 3  # worker reads that fail before the disk answers again


@pytest.mark.parametrize("kind", list(QUEUES))
def test_a_failed_worker_read_of_paged_out_bodies_is_tried_again_in_the_worker(kind: str) -> None:
    """The disk fails the read worker's first reads: the consumer still gets every body in order, read by
    the worker when it tries again, never by the loop as a last chance."""

    async def scenario(setup: Setup) -> None:
        c = paged_queue(setup, kind)
        await setup.settle()
        setup.start_counting()
        setup.io.failing = FAILURES
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("q", "c")
        got: list[bytes] = []
        await setup.settle_until(lambda: bool(got.extend(bodies(c))) or len(got) >= PAGED)
        assert got == paged_bodies()
        assert setup.io.failing == 0, "no read failed: the test proves nothing"
        setup.assert_read_off_the_loop()

    with patch.object(Queue, "PAGE_WINDOW", 8), patch.object(store_reads, "RETRY_S", 0):
        run(scenario)


def test_a_failed_worker_read_of_a_dead_letter_is_tried_again_in_the_worker() -> None:
    """As the dead-lettering case above, with the disk failing the read worker's first reads."""

    async def scenario(setup: Setup) -> None:
        c = ClientChannel(setup.broker)
        c.declare_queue("dlq", durable=True)
        arguments = {
            "x-max-priority": 5,
            "x-max-length": PAGED,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        }
        c.declare_queue("q", durable=True, arguments=arguments)
        body = paged_bodies()
        for n in range(PAGED):
            c.publish("", "q", body[n], delivery_mode=2, priority=0 if n < 8 else 5)
        await setup.settle()
        setup.start_counting()
        setup.io.failing = FAILURES
        for n in range(10):
            c.publish("", "q", b"late-%d" % n, delivery_mode=2)
        dlq = setup.broker.vhosts["/"].queues["dlq"]
        await setup.settle_until(lambda: len(dlq.ready) == 10)
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("dlq", "c")
        await setup.settle()
        assert bodies(c) == body[8:18]
        assert setup.io.failing == 0, "no read failed: the test proves nothing"
        setup.assert_read_off_the_loop()

    with patch.object(Queue, "PAGE_WINDOW", 8), patch.object(store_reads, "RETRY_S", 0):
        run(scenario)


def test_a_failed_worker_read_of_delayed_messages_is_tried_again_in_the_worker() -> None:
    async def scenario(setup: Setup) -> None:
        broker = setup.broker
        c, clock = await _stored_delayed_messages(setup)
        setup.start_counting()
        setup.io.failing = FAILURES
        clock[0] += 1_000
        ex = broker.vhosts["/"].exchanges["dx"]
        assert broker.delayed.release_due(ex) == 20  # type: ignore[arg-type]
        q = broker.vhosts["/"].queues["q"]
        await setup.settle_until(lambda: len(q.ready) == 20)
        c.call(commands.Basic.Qos(prefetch_count=1000))
        c.consume("q", "c")
        await setup.settle()
        assert bodies(c) == [b"delayed-%02d" % n for n in range(20)]
        assert setup.io.failing == 0, "no read failed: the test proves nothing"
        setup.assert_read_off_the_loop()

    with patch.object(store_reads, "RETRY_S", 0):
        run(scenario)


@pytest.mark.parametrize("kind", list(QUEUES))
def test_basic_get_reads_paged_out_messages_off_the_event_loop_and_answers_in_order(kind: str) -> None:
    """A client sends a get for every message and a purge in one write: each get-ok carries its message, in
    queue order, and the purge is answered after them (it finds nothing left), although the gets waited for
    the store's read worker."""

    async def scenario(setup: Setup) -> None:
        paged_queue(setup, kind)
        await setup.settle()
        setup.start_counting()
        conn = Conn(setup.broker)
        gets = [frame.marshal(commands.Basic.Get(queue="q", no_ack=True), 1) for _ in range(PAGED)]
        conn.send(b"".join([*gets, frame.marshal(commands.Queue.Purge(queue="q"), 1)]))
        out: list[Any] = []
        await setup.settle_until(
            lambda: (
                bool(out.extend(obj for _, obj in decode_frames(conn.session.take_output())))
                or any(isinstance(obj, commands.Queue.PurgeOk) for obj in out)
            )
        )
        assert [body for _, body in messages(out)] == paged_bodies()
        assert isinstance(out[-1], commands.Queue.PurgeOk) and out[-1].message_count == 0
        setup.assert_read_off_the_loop()

    with patch.object(Queue, "PAGE_WINDOW", 8):
        run(scenario)


def timed_stream(setup: Setup) -> ClientChannel:
    """A stream of 100 messages published a second apart, at seconds 1000 .. 1099 since the epoch."""
    clock = [1_000_000]
    setup.broker.now_ms = lambda: clock[0]
    c = ClientChannel(setup.broker)
    c.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    for n in range(100):
        c.publish("", "s", b"at-%04d" % (1000 + n))
        clock[0] += 1000
    return c


def test_subscribing_to_a_stream_by_timestamp_finds_the_offset_off_the_event_loop() -> None:
    async def scenario(setup: Setup) -> None:
        c = timed_stream(setup)
        await setup.settle()
        setup.start_counting()
        c.call(commands_qos(1000))
        at = datetime.datetime.fromtimestamp(1050, datetime.UTC)
        c.consume("s", "c", arguments={"x-stream-offset": at})
        await setup.settle()
        assert bodies(c) == [b"at-%04d" % n for n in range(1050, 1100)]
        setup.assert_read_off_the_loop()

    run(scenario)


def test_a_streams_first_timestamp_and_offset_at_a_time_are_read_off_the_event_loop() -> None:
    """What the info delivery and the HTTP API show: the first message's time, the offset at a time."""

    async def scenario(setup: Setup) -> None:
        c = timed_stream(setup)
        await setup.settle()
        setup.start_counting()
        c.call(commands_qos(10))
        arguments = {"x-amqpd-stream-info": True, "x-amqpd-offset-at": 1_050_000}
        c.call(commands.Basic.Consume(queue="s", consumer_tag="info", arguments=arguments))  # answered once read
        await setup.settle()
        ((_method, body),) = c.deliveries()
        facts = json.loads(body)
        assert (facts["first_timestamp"], facts["offset_at"]) == (1_000_000, 50)
        q = setup.broker.vhosts["/"].queues["s"]
        assert isinstance(q, StreamQueue)
        assert await q.read_times(1_098_500) == (1_000_000, 99)
        assert q.stream_stats()["first_timestamp"] == 1_000_000
        setup.assert_read_off_the_loop()

    run(scenario)


def test_recovery_reads_back_what_it_needs_off_the_event_loop() -> None:
    """A restart with a classic queue's backlog (its head slice is read back), a priority queue (all its
    messages are), and a delayed exchange's stored messages (its schedule): all read in the read worker."""

    async def publish(d: str) -> None:
        store = MessageStore(d, fsync="none")
        await store.open()
        c = ClientChannel(Broker(Settings(data_dir=d), store=store))
        c.declare_queue("c", durable=True)
        c.declare_queue("p", durable=True, arguments={"x-max-priority": 5})
        arguments = {"x-delayed-type": "direct"}
        c.call(
            commands.Exchange.Declare(
                exchange="dx", exchange_type="x-delayed-message", durable=True, arguments=arguments
            )
        )
        c.declare_queue("d", durable=True)
        c.call(commands.Queue.Bind(queue="d", exchange="dx", routing_key="k"))
        for n in range(PAGED):
            c.publish("", "c", paged_bodies()[n], delivery_mode=2)
            c.publish("", "p", paged_bodies()[n], delivery_mode=2)
            c.publish("dx", "k", paged_bodies()[n], headers={"x-delay": 100 + n}, delivery_mode=2)
        await store.close()

    async def main() -> None:
        with tempfile.TemporaryDirectory() as d:
            await publish(d)
            io = RecordingIO()
            store = MessageStore(d, fsync="none", io=io)
            recovered = await store.open(load_records=False)  # as the server opens it
            try:
                setup = Setup(Broker(Settings(data_dir=d), store=store), store, io)
                setup.start_counting()
                await restore(setup.broker, recovered)
                setup.assert_read_off_the_loop()
                broker = setup.broker
                broker.delayed.clock = lambda: 2**50  # every delayed message is due
                assert broker.delayed.release_due(broker.vhosts["/"].exchanges["dx"]) == PAGED  # type: ignore[arg-type]
                await setup.settle()
                c = ClientChannel(broker)
                c.call(commands.Basic.Qos(prefetch_count=1000))
                for name in ("c", "p", "d"):
                    c.consume(name, name)
                await setup.settle()
                got: dict[str, list[bytes]] = {"c": [], "p": [], "d": []}
                for method, body in c.deliveries():
                    got[method.consumer_tag].append(body)
                assert got == {"c": paged_bodies(), "p": paged_bodies(), "d": paged_bodies()}
            finally:
                await store.close()

    anyio.run(main)


def test_timers_asked_for_while_recovery_reads_start_once_it_is_done() -> None:
    """Recovery awaits the read worker between queues: a TTL or delayed release armed meanwhile must not fire
    into a broker whose bindings are not all back, nor fire later than it was due."""
    started: list[tuple[float, str]] = []
    broker = Broker(Settings(), scheduler=lambda delay, callback: started.append((delay, callback())))
    broker.hold_timers()
    broker.schedule(30.0, lambda: "ttl")
    broker.schedule(10.0, lambda: "cancelled").cancel()
    broker.schedule(0.0, lambda: "due")
    assert started == []
    broker.start_timers()
    assert [name for _, name in started] == ["ttl", "due"]
    assert 0.0 < started[0][0] <= 30.0 and started[1][0] == 0.0
    broker.schedule(5.0, lambda: "after")
    assert started[-1] == (5.0, "after")
