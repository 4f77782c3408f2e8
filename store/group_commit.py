"""The pending batch and the group-commit loop that puts it on disk (FORMAT.md, Commit, durability and the
checkpoint; Disk faults).

Everything the store buffers on the event loop goes into `pending`: frames (laid out by SegmentLog), ack-log
entries, catalogue statements, queue values and callbacks. `run()` seals it, commits its catalogue
statements, has the Writer write and fsync it in a worker thread while the next one fills, then fires its
callbacks on the loop; after that, segments nobody needs are deleted and a checkpoint may be written. A
batch that fails is never retried: its records and those of the batch filling behind it fail instead.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from collections.abc import Callable
from itertools import repeat

import anyio
import anyio.to_thread

from store import ack_log
from store.catalog import Catalog, CatalogOp, CheckpointData, queue_value_ops
from store.checkpoints import checkpoint_data, encode_queue_rows
from store.commit import Batch, FileIO, WriteFailed, Writer
from store.disk_faults import DiskFaults
from store.held_acks import HeldAcks
from store.queue_state import QueueState
from store.retention_keeper import RetentionKeeper
from store.segment import Layout
from store.segment_log import SegmentLog
from store.writer_thread import WriterThread

log = logging.getLogger(__name__)

FAILURE_BACKOFF_S = 0.1  # after a failed batch, before the next attempt (a full disk fails them all)


class GroupCommit:
    def __init__(
        self,
        layout: Layout,
        io: FileIO,
        writer: Writer,
        catalog: Catalog,
        segments: SegmentLog,
        faults: DiskFaults,
        now_ms: Callable[[], int],
        checkpoint_bytes: int,
        max_unwritten_bytes: int,
    ) -> None:
        self._layout = layout
        self._io = io
        self._writer = writer
        self.writes = WriterThread()  # runs the writer's write() of each batch
        self._catalog = catalog
        self._segments = segments
        self._faults = faults
        self._now_ms = now_ms
        self._checkpoint_bytes = checkpoint_bytes
        self.keeper: RetentionKeeper | None = None  # set by the store when it has a retention policy
        self.queues: dict[int, QueueState] = {}  # the store's, for checkpoints and failed batches
        self.held = HeldAcks()  # acks of failed batches, written once their failure's records are gone
        self.pending = Batch(number=1, first_offset=0)
        self.ack_number = 0
        self.since_checkpoint = 0
        self.woken = False
        self._durable_number = 0
        self.closing = False
        self.running = False
        self.listeners: list[Callable[[], None]] = []
        # Backpressure: bytes of frames appended and not yet written (pending and in flight).
        self._max_unwritten = max_unwritten_bytes
        self._unwritten_bytes = 0
        self.pressure = False
        self.on_pressure: Callable[[bool], None] | None = None

    def start(self) -> None:
        """On the loop, before run(): the loop's events."""
        self._wake = anyio.Event()
        self._committed = anyio.Event()
        self._stopped = anyio.Event()
        self._lock = anyio.Lock()

    # ---- filling the pending batch (on the loop) -----------------------------------------------------

    def buffered(self, size: int, on_durable: Callable[[], None] | None, on_failed: Callable[[], None] | None) -> None:
        """What was just buffered (`size` bytes of frames) settles with the pending batch; past
        max_unwritten_bytes publishers are asked to pause."""
        batch = self.pending
        if on_durable is not None:
            batch.callbacks.append(on_durable)
        if on_failed is not None:
            batch.failures.append(on_failed)
        batch.size += size
        self._unwritten_bytes += size
        if self._unwritten_bytes > self._max_unwritten and not self.pressure:
            self._set_pressure(True)
        self.since_checkpoint += size
        if not self.woken:
            self.poke()

    def ack_entry(self, kind: int, queue_id: int, offset: int) -> None:
        self.pending.acks += ack_log.ENTRY.pack(kind, queue_id, offset)
        self.since_checkpoint += ack_log.ENTRY.size
        if not self.woken:
            self.poke()

    def ack_entries(self, kind: int, queue_id: int, offsets: list[int]) -> None:
        """ack_entry() of each offset, in order."""
        # map calls pack from C: no Python step per offset
        self.pending.acks += b"".join(map(ack_log.ENTRY.pack, repeat(kind), repeat(queue_id), offsets))
        self.since_checkpoint += ack_log.ENTRY.size * len(offsets)
        if not self.woken:
            self.poke()

    def catalog_op(self, ops: list[CatalogOp]) -> None:
        self.pending.catalog_ops.extend(ops)
        self.poke()

    def poke(self) -> None:
        """Wake the commit loop (once per wait: setting an already-set event still costs a call)."""
        self.woken = True
        self._wake.set()

    def unneeded(self, base: int) -> None:
        """No queue holds anything in sealed segment `base`: delete it after the next fsync (which covers the
        acks that freed it), or leave it to the retention policy."""
        if self.keeper is not None:
            self.keeper.due = True
        else:
            self.pending.delete_segments.append(base)
        self.poke()

    def apply_retention(self, force: bool = False) -> None:
        if self.keeper is not None and self.keeper.apply(self.pending, force):
            self.poke()

    # ---- the loop ------------------------------------------------------------------------------------

    async def run(self, idle_seconds: float) -> None:
        """Commit until closing and nothing is pending. With a retention policy, an idle loop applies it
        every `idle_seconds`."""
        self.running = True
        try:
            while True:
                if self.pending.is_empty():
                    if self.closing:
                        return
                    if self.keeper is not None and not await self._woken_within(idle_seconds):
                        self.apply_retention(force=True)  # an idle log must age out too
                        continue
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    self.woken = False
                    continue
                await self.commit_once()
        finally:
            self.running = False
            self._stopped.set()

    async def _woken_within(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        return self._wake.is_set()

    async def flush(self) -> None:
        """Wait until everything buffered before this call is durable (commits itself if run() isn't)."""
        target = self.pending.number - (1 if self.pending.is_empty() else 0)
        while self._durable_number < target:
            if self.running:
                await self._committed.wait()
            else:
                await self.commit_once()

    async def stop(self) -> None:
        """run() returns once nothing is pending; wait for that."""
        self.closing = True
        self._wake.set()
        if self.running:
            await self._stopped.wait()

    def drop_pending(self) -> None:
        """Forget what is pending (a simulated crash) and let an idle run() return."""
        self.closing = True
        self.pending = Batch(number=self.pending.number, first_offset=self._segments.next_offset)
        self._segments.frames = None
        self._wake.set()

    async def commit_once(self, force_checkpoint: bool = False) -> None:
        async with self._lock:
            batch = self._seal(force_checkpoint)
            if batch.queue_values:
                batch.catalog_ops.extend(queue_value_ops(batch.queue_values))
            if batch.chunks and not self._faults.space.room_for(batch.size):
                await self._refuse(batch)
                return
            try:
                if batch.catalog_ops:  # before the fsync: a confirmed message never names a lost queue
                    await self._catalog.apply(batch.catalog_ops)
                await self.writes.run(self._writer.write, batch)
            except (WriteFailed, sqlite3.Error) as exc:
                self._batch_failed(batch, exc)
                self._batch_done(batch)
                await anyio.sleep(FAILURE_BACKOFF_S)
                return
            self._segments.drop_unwritten(batch)
            self._segments.written(batch)  # its frames count as checked (store/checked_runs.py)
            if self.held.failures:
                self.held.written(batch.number)
            self._batch_done(batch)
            fire(batch.callbacks)
            if self.listeners and batch.end_offset > batch.first_offset:
                fire(list(self.listeners))
            try:
                if batch.delete_segments:
                    await self._delete_segments(batch.delete_segments)
                if batch.checkpoint is not None:
                    await self.write_checkpoint(batch.checkpoint)
                    stale = [n for n in self._layout.ack_numbers() if n < batch.checkpoint.checkpoint.ack_number]
                    await anyio.to_thread.run_sync(self.delete_ack_files, stale)
            except (OSError, sqlite3.Error) as exc:
                # Nothing is lost: the old checkpoint and its ack-log files stay valid, an undeleted segment
                # is deleted at the next open. The checkpoint is tried again after the next batch.
                self.since_checkpoint = self._checkpoint_bytes
                self._faults.cleanup_failed(exc)

    async def _refuse(self, batch: Batch) -> None:
        """New message data would take the free space below the floor: the batch's records fail as if the
        disk were full (nothing of the batch is written); its acks and catalogue changes go with the next."""
        await anyio.to_thread.run_sync(self._writer.refuse, batch)
        floor = self._faults.space.floor()
        cause = OSError(errno.ENOSPC, f"{batch.size} bytes of messages would leave under {floor} bytes free")
        self._batch_failed(batch, WriteFailed("write", cause), attempted=False)
        self._batch_done(batch)
        await anyio.sleep(FAILURE_BACKOFF_S)

    def _seal(self, force_checkpoint: bool) -> Batch:
        self.apply_retention()
        if self.held.failures:
            self._release_held()
        batch = self.pending
        segments = self._segments
        batch.end_offset = segments.next_offset
        if segments.active is not None and batch.chunks:
            batch.segment_ends[segments.active] = segments.tail
        self.pending = Batch(number=batch.number + 1, first_offset=segments.next_offset)
        segments.frames = None
        batch.index_writes = [(base, *segments.indexes[base].take_unsaved()) for base, _ in batch.chunks]
        if force_checkpoint or batch.new_segments or self.since_checkpoint >= self._checkpoint_bytes:
            # The snapshot reflects exactly this batch and those before it; it is committed only after the
            # batch is synced, and the ack-log file switches with it.
            self.ack_number += 1
            batch.rotate_ack_to = self.ack_number
            batch.checkpoint = self.checkpoint_data()
            self.since_checkpoint = 0
        return batch

    def _release_held(self) -> None:
        """Acks held back since a failed batch whose records no queue holds any more go in this batch."""
        batch = self.pending
        for queue_id, offset in self.held.due(self._segments.volatile, batch.number):
            batch.acks += ack_log.ENTRY.pack(ack_log.ACKED, queue_id, offset)
            self._segments.release(offset, batch)

    def _batch_done(self, batch: Batch) -> None:
        self._durable_number = batch.number
        self._unwritten_bytes -= batch.size
        if self.pressure and self._unwritten_bytes <= self._max_unwritten // 2:
            self._set_pressure(False)
        self._committed.set()
        self._committed = anyio.Event()

    def _set_pressure(self, on: bool) -> None:
        self.pressure = on
        if self.on_pressure is not None:
            self.on_pressure(on)

    def _batch_failed(self, batch: Batch, exc: Exception, attempted: bool = True) -> None:
        """The batch is not on disk and never will be: its records, and those of the pending batch (laid out
        after them, in a segment that now ends before them), fail. Their queues keep them, from memory.
        `attempted=False`: nothing of the batch was tried, so its catalogue changes are applied later. The
        acks of both batches are held back until no queue holds those records (held_acks.py: a batch that
        moves a message must not leave the old holder's ack without the new record)."""
        pending = self.pending
        segments = self._segments
        self.pending = fresh = Batch(number=pending.number, first_offset=segments.next_offset)
        fresh.catalog_ops = pending.catalog_ops
        fresh.queue_values = pending.queue_values
        if isinstance(exc, sqlite3.Error) or not attempted:
            fresh.catalog_ops = batch.catalog_ops + fresh.catalog_ops  # SQLite rolled back: apply them later
        fresh.delete_segments = (
            pending.delete_segments if attempted else batch.delete_segments + pending.delete_segments
        )
        self._unwritten_bytes -= pending.size
        failed = segments.forget_records([*batch.chunks, *pending.chunks], self.queues)
        volatile = [o for o in range(batch.first_offset, segments.next_offset) if o in segments.volatile]
        entries = bytes(batch.acks + pending.acks)
        held, marks = self.held.hold(entries, batch.first_offset, segments.next_offset, volatile)
        for _, offset in held:
            segments.hold(offset)  # its segment stays while the ack waits
        fresh.acks = bytearray(marks)
        for base in segments.drop_failed(batch, pending):
            if self.keeper is not None:
                self.keeper.forget(base)
        # The ack-log file may end in a torn frame: continue in a fresh one (a file only this batch wrote
        # to is reused, so a long outage does not leave a file per attempt).
        if batch.start_ack is None:
            self.ack_number += 1
        fresh.start_ack = batch.start_ack if batch.start_ack is not None else self.ack_number
        self.since_checkpoint = self._checkpoint_bytes  # checkpoint once writing works again
        self._faults.batch_failed(exc, failed, batch.size + pending.size)
        fire([*batch.failures, *pending.failures])
        if not fresh.is_empty():
            self.poke()

    async def _delete_segments(self, bases: list[int]) -> None:
        gone = self._segments.deletable(bases)
        for base in gone:
            if self.keeper is not None:
                self.keeper.count_deletion(base)
            self._segments.remove(base)
        await anyio.to_thread.run_sync(self._unlink_segments, gone)

    def _unlink_segments(self, bases: list[int]) -> None:
        layout = self._layout
        for base in bases:
            for path in (layout.segment(base), layout.offset_index(base), layout.time_index(base)):
                self._io.unlink(path)

    def delete_ack_files(self, numbers: list[int]) -> None:
        for number in numbers:
            self._io.unlink(self._layout.ack_file(number))

    def checkpoint_data(self) -> CheckpointData:
        held = self.held.by_queue() if self.held.failures else None
        return checkpoint_data(self._segments, self.queues, self.ack_number, self._now_ms(), held)

    async def write_checkpoint(self, data: CheckpointData) -> None:
        data.queue_rows = await anyio.to_thread.run_sync(encode_queue_rows, data.queue_rows)
        await self._catalog.write_checkpoint(data)


def fire(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:
            # One broken callback must not stop confirms for the rest of the batch or the loop.
            log.exception("on_durable callback failed")
