"""MessageStore: the broker's one interface to durable storage (see FORMAT.md for what lands on disk).

Threading model: every public method runs on the event loop. The synchronous ones (append, ack, catalogue
changes...) only update memory and buffer work in the pending `Batch`; `run()` is the group-commit loop that
seals the pending batch, writes and fsyncs it in a worker thread while the next one fills, and then fires
the batch's durability callbacks back on the loop. A callback therefore never fires before the fsync that
covers its message.

Disk faults: a batch whose write or fsync fails is never retried and never confirmed. Its records and those
appended while it was in flight fire their `on_failed` callbacks instead; they stay readable from memory
(the queues still hold them) but are not durable. The files go back to how they were before the batch and
the next record starts a new segment. ENOSPC sets `out_of_space` until `check_space()` sees room again.
The run() loop survives every I/O error. Appended bytes not yet written are bounded: past
`max_unwritten_bytes`, `on_pressure(True)`; at half of it, `on_pressure(False)`.

What is behind the interface: the queues' holdings and the commit loop here; the segments in memory and
the laying out of new records in segment_log.py; reads in record_reader.py; the catalogue's calls in
catalogue_calls.py; retention in retention_keeper.py; disk-fault state in disk_faults.py; checkpoint
snapshots in checkpoints.py; the files' side of a commit in commit.py and of recovery in recovery.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from store import ack_log
from store.catalog import (
    Catalog,
    CatalogOp,
    CatalogSnapshot,
    delete_delivery_count_op,
    delete_queue_ops,
    put_delivery_count_op,
    put_queue_ops,
)
from store.catalogue_calls import CatalogueCalls
from store.commit import FileIO, Writer
from store.disk_faults import DiskFaults
from store.disk_space import DiskSpace
from store.group_commit import GroupCommit
from store.queue_state import OffsetRuns, QueueState, hold_range
from store.read_ahead import ReadAhead
from store.record_reader import RecordReader
from store.records import MessageRecord, QueueEntry, Recovered, RecoveredMessage
from store.recovery import HoldsLog, RecoveryResult, recover_files
from store.retention import RetentionPolicy
from store.retention_keeper import RetentionKeeper
from store.segment import FILE_HEADER_SIZE, Layout
from store.segment_index import DEFAULT_INTERVAL, write_index_files
from store.segment_log import RECLAIM_ACTIVE_BYTES, SegmentLog

__all__ = ["RECLAIM_ACTIVE_BYTES", "MessageStore"]

FSYNC_POLICIES = ("always-batched", "none")
MAX_SEGMENT_SIZE = 1 << 31  # index positions are u32; leave room for one oversized record past the limit
DEFAULT_CHECKPOINT_BYTES = 64 << 20
RETENTION_IDLE_SECONDS = 1.0  # with a retention policy: how long the idle commit loop sleeps before applying it
DEFAULT_MAX_UNWRITTEN = 64 << 20  # appended bytes not yet written before publishers are asked to pause
T = TypeVar("T")


class MessageStore(CatalogueCalls):
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        segment_size: int = 1 << 30,
        fsync: str = "always-batched",
        index_interval: int = DEFAULT_INTERVAL,
        checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES,
        retention_max_age_ms: int | None = None,
        retention_max_bytes: int | None = None,
        clock: Callable[[], int] = time.time_ns,
        max_unwritten_bytes: int = DEFAULT_MAX_UNWRITTEN,
        io: FileIO | None = None,
        holds_log: HoldsLog | None = None,
        min_free_bytes: int = 0,
        reserve_bytes: int = 0,
    ) -> None:
        """`retention_*`: keep segments no queue needs for log readers, bounded by age and/or total log size
        (both None: delete them as soon as they are unneeded; see store/retention.py). `clock`: wall-clock
        nanoseconds (time.time_ns); message ids, checkpoint times, TTL at recovery and retention use it.
        `max_unwritten_bytes`: see on_pressure. `io`: the I/O seam the writer goes through (tests). `holds_log`:
        which queues (by their declared arguments) are logs, held as runs from recovery on (hold_as_runs).
        `min_free_bytes`, `reserve_bytes`: the free-space floor new message data must keep and the reserve file
        kept for what frees space (disk_space.py)."""
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, not {fsync!r}")
        if not FILE_HEADER_SIZE < segment_size <= MAX_SEGMENT_SIZE:
            raise ValueError(f"segment_size must be in ({FILE_HEADER_SIZE}, {MAX_SEGMENT_SIZE}]")
        self._layout = Layout(data_dir)
        self._interval = index_interval
        self._clock = clock
        self._catalog = Catalog(self._layout.catalog)
        self._io = io if io is not None else FileIO()
        self._holds_log = holds_log
        self._writer = Writer(self._layout, fsync == "always-batched", self._io)
        self._segments = segments = SegmentLog(
            self._layout, segment_size, index_interval, clock, self._io.open_for_reads
        )
        self._reader = RecordReader(segments, self._io.pread, self._io.map)
        self._space = DiskSpace(self._layout.root, min_free_bytes, reserve_bytes)
        self._faults = DiskFaults(self._layout.root, self._space)
        self._commit = GroupCommit(
            self._layout,
            self._io,
            self._writer,
            self._catalog,
            segments,
            self._faults,
            self._now_ms,
            checkpoint_bytes,
            max_unwritten_bytes,
        )
        segments.on_unneeded, segments.wake = self._commit.unneeded, self._commit.poke
        self._retention = RetentionPolicy(retention_max_age_ms, retention_max_bytes)
        self._keeper = RetentionKeeper(self._retention, segments, self._now_ms)
        if self._retention.enabled:
            self._commit.keeper = self._keeper
            segments.track_age = True
        # Catalogue state needed synchronously.
        self._queues: dict[int, QueueState] = {}
        self._counts: dict[int, dict[int, int]] = {}  # queue_id -> offset -> delivery count, when not 0
        # Both ways, so that deleting one queue touches only its own entries, however many queues exist.
        self._queue_ids: dict[tuple[str, str], int] = {}
        self._queue_keys: dict[int, tuple[str, str]] = {}
        self._next_queue_id = 1
        self._open = False
        # One thread for the broker's reads: they run in the order they were asked for, so their results
        # come back to the loop in that order too (a dead letter read back goes out before the next one).
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-read")
        self.reads_pending = 0  # asked of in_reader, not resolved yet
        self.stats = self._keeper.stats
        self.fault_stats = self._faults.stats

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def open(self, load_records: bool = True) -> Recovered:
        """Create the data directory on first use, recover what is on disk, and start a fresh ack-log file
        under a new checkpoint (so recovery's own decisions are never replayed twice).

        load_records=False: messages held since before the last checkpoint are verified but not decoded;
        their RecoveredMessage.record is None and `read_many` reads them when the caller needs them. A
        large backlog then costs neither restart time nor memory until it is consumed."""
        started = time.perf_counter()
        self._commit.start()
        self._layout.create_dirs()
        self._space.release()  # recovery writes (checkpoint, ack file, indexes) before it knows anything
        await self._catalog.open()
        try:
            snap = await self._catalog.load()
            result = await anyio.to_thread.run_sync(
                recover_files,
                self._layout,
                snap,
                self._interval,
                self._now_ms(),
                self._retention,
                load_records,
                self._holds_log or (lambda arguments: False),
                self._io,
            )
        except BaseException:
            await self._catalog.close()  # its worker thread would otherwise keep the process alive
            raise
        self._install(snap, result)
        await anyio.to_thread.run_sync(self._resume_files)
        self._open = True
        await self._commit.write_checkpoint(self._commit.checkpoint_data())
        await anyio.to_thread.run_sync(self._commit.delete_ack_files, result.stale_ack_files)
        await anyio.to_thread.run_sync(self._space.take)  # not held yet: new data keeps the reserve's room free
        result.stats["scan_seconds"] = result.stats["seconds"]
        result.stats["seconds"] = round(time.perf_counter() - started, 4)  # the whole open()
        self._keeper.due = self._retention.enabled  # the first commit may roll the active segment by age
        self._keeper.log_recovered(result.stats)
        return self._recovered(snap, result)

    async def run(self) -> None:
        """The group-commit loop: returns once close() has been called and everything is flushed."""
        await self._commit.run(RETENTION_IDLE_SECONDS)

    async def flush(self) -> None:
        """Wait until everything buffered before this call is durable (commits itself if run() isn't
        running). Not in the broker's interface; used by tests and tools."""
        await self._commit.flush()

    async def enforce_retention(self) -> None:
        """Apply the retention policy now and commit what it decided (run() does this by itself: after
        changes, and every RETENTION_CHECK_MS). For tests and tools."""
        self._commit.apply_retention(force=True)
        await self.flush()

    async def close(self) -> None:
        """Flush and fsync everything pending, fire callbacks, checkpoint, close files."""
        if not self._open:
            return
        await self._commit.stop()
        self._space.release()  # the last checkpoint and the clean-stop marker must find room
        await self._commit.commit_once(force_checkpoint=True)
        for _ in range(2):  # a batch refused for want of space hands its catalogue changes to the next
            if self._commit.pending.is_empty():
                break
            await self._commit.commit_once(force_checkpoint=True)
        await self._release_files()

    async def abort(self) -> None:
        """Close without flushing anything pending: what a crash leaves on disk. For tests."""
        if not self._open:
            return
        self._commit.drop_pending()
        await self._release_files()

    async def _release_files(self) -> None:
        self._open = False
        await anyio.to_thread.run_sync(self._reads.shutdown)  # reads still queued finish first
        await self._commit.writes.run(Writer.close, self._writer)  # after any write still under way
        self._commit.writes.stop()
        self._segments.close_read_fds()
        await self._catalog.close()

    # ---- queues -------------------------------------------------------------------------------------

    def put_queue(self, vhost: str, name: str, auto_delete: bool, arguments: dict[str, Any]) -> int:
        """The queue's id: existing for a known (vhost, name), else new; ids are never reused."""
        queue_id = self._queue_ids.get((vhost, name))
        if queue_id is None:
            queue_id = self._next_queue_id
            self._next_queue_id += 1
            self._queue_ids[(vhost, name)] = queue_id
            self._queue_keys[queue_id] = (vhost, name)
            self._queues[queue_id] = QueueState()
        self._catalog_op(put_queue_ops(queue_id, vhost, name, auto_delete, arguments))
        return queue_id

    def hold_as_runs(self, queue_id: int) -> None:
        """Keep what this queue holds as runs of consecutive offsets rather than one entry per message: for
        a queue that is a log (given every record in order, released oldest first), whose memory must not
        grow with its length. The same answers either way; idempotent."""
        state = self._queues.get(queue_id)
        if state is not None and not isinstance(state.live, OffsetRuns):
            state.live = OffsetRuns(state.live)

    def delete_queue(self, queue_id: int) -> None:
        state = self._queues.pop(queue_id, None)
        if state is None:
            return
        name = self._queue_keys.pop(queue_id, None)
        if name is not None:
            del self._queue_ids[name]
        pending = self._commit.pending
        for offset in state.live:
            self._segments.release(offset, pending)
        values = pending.queue_values
        for key in [key for key in values if key[0] == queue_id]:
            del values[key]  # set earlier in this batch: the queue's rows go with it
        self._counts.pop(queue_id, None)
        self._catalog_op(delete_queue_ops(queue_id))

    def set_queue_value(self, queue_id: int, key: str, value: bytes | None) -> None:
        """Keep a small value with a durable queue (None deletes it): durable with the next commit, before
        any record appended after the call is; the last value set for a key in a batch is the one written.
        Given back in QueueEntry.values at open and deleted with the queue. The store does not interpret it."""
        if queue_id not in self._queues:
            return
        self._commit.pending.queue_values[(queue_id, key)] = value
        if not self._commit.woken:
            self._commit.poke()

    def _catalog_op(self, ops: list[CatalogOp]) -> None:
        self._commit.catalog_op(ops)

    # ---- messages -----------------------------------------------------------------------------------

    def append(
        self,
        record: MessageRecord,
        queue_ids: list[int],
        on_durable: Callable[[], None] | None = None,
        on_failed: Callable[[], None] | None = None,
    ) -> int:
        """Buffer one record for the queues named; return its offset. `on_durable` fires on the loop once
        the fsync covering the record is done (after the write, with fsync "none"); if the write or fsync
        fails, `on_failed` fires instead (the record stays readable from memory, but is not durable)."""
        # one queue (the common case) without a call
        holders = queue_ids if len(queue_ids) == 1 and queue_ids[0] in self._queues else self._holders(queue_ids)
        offset = self._segments.next_offset
        commit = self._commit
        size = self._segments.append(record, holders, commit.pending)
        queues = self._queues
        for qid in holders:
            queues[qid].live[offset] = None
        commit.buffered(size, on_durable, on_failed)
        return offset

    def append_many(
        self,
        records: list[MessageRecord],
        queue_ids: list[int],
        on_durable: Callable[[], None] | None = None,
        on_failed: Callable[[], None] | None = None,
    ) -> int:
        """Buffer records for the same queues at consecutive offsets; return the first. They land in the
        pending batch together, so one `on_durable` (or `on_failed`) settles them all, as `append` does one."""
        holders = self._holders(queue_ids)
        first = self._segments.next_offset
        commit = self._commit
        size = self._segments.append_many(records, holders, commit.pending)
        queues = self._queues
        for qid in holders:
            hold_range(queues[qid].live, first, first + len(records))
        commit.buffered(size, on_durable, on_failed)
        return first

    def _holders(self, queue_ids: list[int]) -> list[int]:
        """The queues named that exist, each once (a queue named twice holds the message once)."""
        queues = self._queues
        if len(queue_ids) == 1:  # the common case, without building a list
            return queue_ids if queue_ids[0] in queues else []
        return list(dict.fromkeys(qid for qid in queue_ids if qid in queues))

    def mark_delivered(self, queue_id: int, offset: int) -> None:
        """Remember that the message went out, so that after a crash it comes back redelivered=True."""
        state = self._queues.get(queue_id)
        if state is None or offset not in state.live or offset in state.delivered:
            return
        state.delivered.add(offset)
        self._commit.ack_entry(ack_log.DELIVERED, queue_id, offset)

    def ack(self, queue_id: int, offset: int) -> None:
        """The queue no longer needs the message (acked, expired, dropped)."""
        state = self._queues.get(queue_id)
        if state is None or offset not in state.live:
            return  # unknown queue, or an offset the queue does not hold (already acked: idempotent)
        del state.live[offset]
        state.delivered.discard(offset)
        commit = self._commit
        commit.ack_entry(ack_log.ACKED, queue_id, offset)
        self._segments.release(offset, commit.pending)
        if self._counts and self._forget_count(queue_id, offset):
            self._catalog_op([delete_delivery_count_op(queue_id, offset)])

    def ack_many(self, queue_id: int, offsets: list[int]) -> None:
        """ack() of each offset (a multiple-ack, a purge), with the per-record bookkeeping in one pass."""
        state = self._queues.get(queue_id)
        if state is None:
            return
        live, delivered = state.live, state.delivered
        held = []
        for offset in offsets:
            if offset in live:  # else already acked (idempotent), as in ack()
                del live[offset]
                held.append(offset)
        if not held:
            return
        if delivered:
            delivered.difference_update(held)
        self._commit.ack_entries(ack_log.ACKED, queue_id, held)
        self._segments.release_many(held, self._commit.pending)
        if self._counts:
            forgotten = [offset for offset in held if self._forget_count(queue_id, offset)]
            if forgotten:
                self._catalog_op([delete_delivery_count_op(queue_id, offset) for offset in forgotten])

    def _forget_count(self, queue_id: int, offset: int) -> bool:
        counts = self._counts.get(queue_id)
        if counts is None or counts.pop(offset, None) is None:
            return False
        if not counts:
            del self._counts[queue_id]  # empty when no count is kept: ack() tests that first
        return True

    def set_delivery_count(self, queue_id: int, offset: int, count: int) -> None:
        """How many times the queue's message went back unacked (a delivery limit counts these), durable
        with the next commit; forgotten when the queue acks the message."""
        state = self._queues.get(queue_id)
        counts = self._counts.get(queue_id)
        if state is None or offset not in state.live or (counts is not None and counts.get(offset) == count):
            return
        self._counts.setdefault(queue_id, {})[offset] = count
        self._catalog_op([put_delivery_count_op(queue_id, offset, count)])

    def purge(self, queue_id: int, offsets: list[int]) -> None:
        for offset in offsets:
            self.ack(queue_id, offset)

    # ---- reads (record_reader.py) --------------------------------------------------------------------

    def in_reader(self, read: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run `read` (one of the read methods below, or a function calling them) in the store's read worker,
        so the event loop never waits on the disk: the future resolves on the loop. Reads run one at a time,
        in the order asked, and their futures resolve in that order. The caller keeps the records it reads
        held by a queue until the read is done (a segment nobody holds may be deleted under it)."""
        future = asyncio.get_running_loop().run_in_executor(self._reads, read, *args)
        self.reads_pending += 1
        future.add_done_callback(self._read_done)
        return future

    def _read_done(self, _future: asyncio.Future[Any]) -> None:
        self.reads_pending -= 1

    async def reads_done(self, rounds: int = 1000) -> None:
        """Wait until no read asked of in_reader is queued or running, nor asked again by what their results
        set off within a few loop turns. Not in the broker's interface; used by tests and tools."""
        for _ in range(rounds):
            for _turn in range(3):
                await asyncio.sleep(0)
            if not self.reads_pending:
                return
            await self.after_reads()

    def after_reads(self) -> asyncio.Future[None]:
        """A future that resolves once every read asked for before it has resolved: what must go out after
        something being read back waits for it this way, and keeps its order."""
        return self.in_reader(_nothing)

    def read(self, offset: int) -> MessageRecord:
        return self._reader.read(offset)

    def read_many(self, offsets: list[int], ahead: ReadAhead | None = None) -> list[MessageRecord | None]:
        return self._reader.read_many(offsets, ahead)

    def read_payloads(self, offsets: list[int]) -> list[bytes | None]:
        return self._reader.read_payloads(offsets)

    def checked_frames(self, offset: int, count: int, budget: int) -> tuple[array[int], bytes, int]:
        return self._reader.checked_frames(offset, count, budget)

    def checked_records(self, offset: int, count: int, budget: int) -> tuple[list[int], bytes]:
        return self._reader.checked_records(offset, count, budget)

    def read_ahead(self, offsets: list[int]) -> Callable[[], ReadAhead]:
        return self._reader.read_ahead(offsets)

    def read_range(self, from_offset: int, max_records: int) -> list[tuple[int, MessageRecord]]:
        return self._reader.read_range(from_offset, max_records)

    def records_from(self, from_offset: int) -> Iterator[tuple[int, MessageRecord]]:
        return self._reader.records_from(from_offset)

    def find_offset_by_time(self, timestamp_ms: int) -> int | None:
        return self._reader.find_offset_by_time(timestamp_ms)

    def durable_end(self) -> int:
        """Every record below this offset is on disk: what log readers may see (SegmentLog.durable_end)."""
        return self._segments.durable_end()

    def add_commit_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` on the loop after each commit, once its on_durable callbacks have fired: a log
        reader waiting at durable_end() learns there is more to read."""
        self._commit.listeners.append(listener)

    def remove_commit_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._commit.listeners:
            self._commit.listeners.remove(listener)

    # ---- backpressure and disk faults (group_commit.py, disk_faults.py) -------------------------------

    @property
    def pressure(self) -> bool:
        return self._commit.pressure

    @property
    def on_pressure(self) -> Callable[[bool], None] | None:
        return self._commit.on_pressure

    @on_pressure.setter
    def on_pressure(self, callback: Callable[[bool], None] | None) -> None:
        self._commit.on_pressure = callback

    @property
    def out_of_space(self) -> bool:
        return self._faults.out_of_space

    @property
    def on_disk_full(self) -> Callable[[bool], None] | None:
        return self._faults.on_disk_full

    @on_disk_full.setter
    def on_disk_full(self, callback: Callable[[bool], None] | None) -> None:
        self._faults.on_disk_full = callback

    def check_space(self) -> bool:
        """While out of space: whether there is room again for what failed (and then clear the state). The
        broker calls this with its disk alarm check; returns the current out_of_space."""
        return self._faults.check_space()

    def _now_ms(self) -> int:
        return self._clock() // 1_000_000

    # ---- internals: after recovery -------------------------------------------------------------------

    def _install(self, snap: CatalogSnapshot, result: RecoveryResult) -> None:
        self._queues = result.queues
        self._queue_ids = {(vhost, name): qid for qid, vhost, name, _, _ in snap.queues}
        self._queue_keys = {qid: key for key, qid in self._queue_ids.items()}
        self._next_queue_id = snap.next_queue_id
        self._commit.queues = self._queues
        self._segments.install(result, self._queues)
        self._commit.pending.first_offset = result.next_offset
        self._commit.ack_number = (
            max([snap.checkpoint.ack_number if snap.checkpoint else 0, *result.stale_ack_files]) + 1
        )

    def _resume_files(self) -> None:
        active = self._segments.active
        if active is not None:
            index = self._segments.indexes[active]
            write_index_files(self._layout.offset_index(active), self._layout.time_index(active), index, self._io)
            self._writer.open_segment(active)
        self._writer.start_ack_file(self._commit.ack_number)

    def _recovered(self, snap: CatalogSnapshot, result: RecoveryResult) -> Recovered:
        queues = []
        records = result.records
        for qid, vhost, name, auto_delete, arguments in snap.queues:
            state = self._queues[qid]
            entry = QueueEntry(qid, vhost, name, auto_delete, arguments, values=snap.queue_values.get(qid, {}))
            delivered = state.delivered
            if isinstance(state.live, OffsetRuns):
                _recovered_log(entry, state.live, records, delivered)
            elif all(offset in records for offset in state.live):
                entry.messages = [RecoveredMessage(o, records[o], o in delivered) for o in state.live]
            else:  # lazy: what recovery did not read comes first (it is older than the tail it read)
                entry.unloaded = [o for o in state.live if o not in records]
                entry.unloaded_delivered = {o for o in delivered if o not in records}
                entry.messages = [RecoveredMessage(o, records[o], o in delivered) for o in state.live if o in records]
            entry.delivery_counts = self._recovered_counts(qid, snap.delivery_counts.get(qid))
            queues.append(entry)
        return Recovered(
            snap.exchanges, queues, snap.bindings, result.stats, snap.access, snap.policies, snap.parameters
        )

    def _recovered_counts(self, queue_id: int, counts: dict[int, int] | None) -> dict[int, int]:
        """The queue's delivery counts for the messages it still holds; rows of the others (acked in a
        batch whose catalogue delete was lost) are deleted."""
        if not counts:
            return {}
        live = self._queues[queue_id].live
        stale = [offset for offset in counts if offset not in live]
        if stale:
            self._catalog_op([delete_delivery_count_op(queue_id, offset) for offset in stale])
        kept = {offset: n for offset, n in counts.items() if offset in live}
        if kept:
            self._counts[queue_id] = dict(kept)
        return kept


def _recovered_log(entry: QueueEntry, live: OffsetRuns, records: dict[int, MessageRecord], delivered: set[int]) -> None:
    """A log's recovered offsets stay runs: the records recovery read (its tail, after the checkpoint) as
    messages, every other offset in `unloaded_runs`, nothing built per offset of the rest."""
    entry.messages = [RecoveredMessage(o, r, o in delivered) for o, r in records.items() if o in live]
    unloaded = OffsetRuns.from_encoded(live.encoded())
    for message in entry.messages:
        del unloaded[message.offset]
    entry.unloaded_runs = unloaded
    entry.unloaded_delivered = {o for o in delivered if o not in records}


def _nothing() -> None:
    """A read of nothing: in_reader's queue keeps the order (after_reads)."""
