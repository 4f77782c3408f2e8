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
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import sqlite3
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, MutableMapping
from functools import partial
from operator import attrgetter
from typing import Any

import anyio
import anyio.to_thread

from store import ack_log
from store.catalog import (
    ACCESS_SEEDED_OP,
    Catalog,
    CatalogSnapshot,
    Checkpoint,
    CheckpointData,
    binding_key,
    delete_binding_op,
    delete_delivery_count_op,
    delete_exchange_op,
    delete_parameter_op,
    delete_permission_op,
    delete_policy_op,
    delete_queue_ops,
    delete_topic_permission_op,
    delete_user_ops,
    delete_vhost_ops,
    put_binding_op,
    put_delivery_count_op,
    put_exchange_op,
    put_parameter_op,
    put_permission_op,
    put_policy_op,
    put_queue_ops,
    put_topic_permission_op,
    put_user_op,
    put_vhost_op,
    queue_value_ops,
)
from store.commit import Batch, FileIO, WriteFailed, Writer
from store.frame import HEADER_SIZE, ScanReport, append_frame, append_frames, scan_frames
from store.queue_state import OffsetRuns, QueueState, encode_runs, hold_range
from store.read_ahead import ReadAhead, SegmentBytes, stretches_of
from store.record_codec import decode_record, encode_record, encode_records
from store.records import MessageRecord, QueueEntry, Recovered, RecoveredMessage
from store.recovery import HoldsLog, RecoveryResult, recover_files
from store.retention import AGE, RetentionPolicy, SegmentInfo, select_for_deletion
from store.segment import FILE_HEADER_SIZE, DamagedFrame, Layout, checked_frames, read_payload, read_payloads
from store.segment_index import DEFAULT_INTERVAL, SegmentIndex, write_index_files

log = logging.getLogger(__name__)
_timestamp_of = attrgetter("timestamp_ms")

FSYNC_POLICIES = ("always-batched", "none")
MAX_SEGMENT_SIZE = 1 << 31  # index positions are u32; leave room for one oversized record past the limit
DEFAULT_CHECKPOINT_BYTES = 64 << 20


RECLAIM_ACTIVE_BYTES = 16 * 1024 * 1024  # an emptied active segment at least this big is rolled and deleted
# With a retention policy: how often (store clock, ms) the policy is applied even if no segment changed,
# and how long (real seconds) the idle commit loop sleeps before applying it.
RETENTION_CHECK_MS = 1000
RETENTION_IDLE_SECONDS = 1.0
READ_BATCH = 256  # records per read_range() call when records_from() iterates
DEFAULT_MAX_UNWRITTEN = 64 << 20  # appended bytes not yet written before publishers are asked to pause
FAILURE_BACKOFF_S = 0.1  # after a failed batch, before the next attempt (a full disk fails them all)
FAILURE_LOG_S = 10.0  # a run of failures logs its first, then at most one summary per this many seconds


class MessageStore:
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
    ) -> None:
        """`retention_*`: keep segments no queue needs for log readers, bounded by age and/or total log size
        (both None: delete them as soon as they are unneeded; see store/retention.py). `clock`: wall-clock
        nanoseconds (time.time_ns); message ids, checkpoint times, TTL at recovery and retention use it.
        `max_unwritten_bytes`: see on_pressure. `io`: the I/O seam the writer goes through (tests). `holds_log`:
        which queues (by their declared arguments) are logs, held as runs from recovery on (hold_as_runs)."""
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, not {fsync!r}")
        if not FILE_HEADER_SIZE < segment_size <= MAX_SEGMENT_SIZE:
            raise ValueError(f"segment_size must be in ({FILE_HEADER_SIZE}, {MAX_SEGMENT_SIZE}]")
        self._layout = Layout(data_dir)
        self._segment_size = segment_size
        self._fsync = fsync == "always-batched"
        self._interval = index_interval
        self._checkpoint_bytes = checkpoint_bytes
        self._retention = RetentionPolicy(retention_max_age_ms, retention_max_bytes)
        self._clock = clock
        self._catalog = Catalog(self._layout.catalog)
        self._io = io if io is not None else FileIO()
        self._holds_log = holds_log
        self._writer = Writer(self._layout, self._fsync, self._io)
        # Catalogue state needed synchronously.
        self._queues: dict[int, QueueState] = {}
        self._counts: dict[tuple[int, int], int] = {}  # (queue_id, offset) -> delivery count, when not 0
        self._queue_ids: dict[tuple[str, str], int] = {}
        self._next_queue_id = 1
        # Segments: base offsets in order, their indexes, live references, and sizes once sealed.
        self._bases: list[int] = []
        self._indexes: dict[int, SegmentIndex] = {}
        self._refs: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self._active: int | None = None
        self._tail = 0  # size the active segment will have once everything buffered is written
        self._next_offset = 0
        self._last_message_id = 0
        self._unwritten: dict[int, MessageRecord] = {}  # appended but not yet written: read() serves these
        self._read_fds: dict[int, int] = {}
        self._ack_number = 0
        self._since_checkpoint = 0
        self._pending = Batch(number=1, first_offset=0)
        self._frames: bytearray | None = None  # the pending batch's frames for the active segment
        self._woken = False
        self._durable_number = 0
        self._open = False
        self._closing = False
        self._running = False
        # Retention: unneeded segments chosen for deletion (base -> AGE/SIZE) until a commit deletes them;
        # whether something changed that the policy should look at; when it last did; when the active
        # segment was created (0: unknown, after recovery).
        self._doomed: dict[int, str] = {}
        self._retention_due = False
        self._retention_checked_ms = 0
        self._active_created_ms = 0
        self.stats = {"retention_deleted_age": 0, "retention_deleted_size": 0}
        self._commit_listeners: list[Callable[[], None]] = []
        self.fault_stats = {"write_failures": 0, "fsync_failures": 0, "records_failed": 0}
        # Disk faults (see the module docstring): records a failed batch held, still held by some queue,
        # with how many queues hold each; whether the disk ran out of space, and how much a batch needs.
        self._volatile: dict[int, list[Any]] = {}
        self.out_of_space = False
        self.on_disk_full: Callable[[bool], None] | None = None
        self._space_needed = 0
        self._failures_logged_at = 0.0
        self._failures_unlogged = 0
        # Backpressure: bytes of frames appended and not yet written (pending and in flight).
        self._max_unwritten = max_unwritten_bytes
        self._unwritten_bytes = 0
        self.pressure = False
        self.on_pressure: Callable[[bool], None] | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def open(self, load_records: bool = True) -> Recovered:
        """Create the data directory on first use, recover what is on disk, and start a fresh ack-log file
        under a new checkpoint (so recovery's own decisions are never replayed twice).

        load_records=False: messages held since before the last checkpoint are verified but not decoded;
        their RecoveredMessage.record is None and `read_many` reads them when the caller needs them. A
        large backlog then costs neither restart time nor memory until it is consumed."""
        started = time.perf_counter()
        self._wake = anyio.Event()
        self._committed = anyio.Event()
        self._stopped = anyio.Event()
        self._commit_lock = anyio.Lock()
        self._layout.create_dirs()
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
            )
        except BaseException:
            await self._catalog.close()  # its worker thread would otherwise keep the process alive
            raise
        self._install(snap, result)
        await anyio.to_thread.run_sync(self._resume_files, result)
        self._open = True
        await self._write_checkpoint(self._checkpoint_data(self._ack_number))
        await anyio.to_thread.run_sync(self._delete_ack_files, result.stale_ack_files)
        result.stats["scan_seconds"] = result.stats["seconds"]
        result.stats["seconds"] = round(time.perf_counter() - started, 4)  # the whole open()
        self._retention_due = self._retention.enabled  # the first commit may roll the active segment by age
        self._log_recovered_retention(result.stats)
        return self._recovered(snap, result)

    async def run(self) -> None:
        """The group-commit loop: returns once close() has been called and everything is flushed."""
        self._running = True
        try:
            while True:
                if self._pending.is_empty():
                    if self._closing:
                        return
                    if self._retention.enabled and not await self._woken_within(RETENTION_IDLE_SECONDS):
                        self._apply_retention(force=True)  # an idle log must age out too
                        continue
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    self._woken = False
                    continue
                await self._commit_once()
        finally:
            self._running = False
            self._stopped.set()

    async def _woken_within(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        return self._wake.is_set()

    async def flush(self) -> None:
        """Wait until everything buffered before this call is durable (commits itself if run() isn't
        running). Not in the broker's interface; used by tests and tools."""
        target = self._pending.number - (1 if self._pending.is_empty() else 0)
        while self._durable_number < target:
            if self._running:
                await self._committed.wait()
            else:
                await self._commit_once()

    async def enforce_retention(self) -> None:
        """Apply the retention policy now and commit what it decided (run() does this by itself: after
        changes, and every RETENTION_CHECK_MS). For tests and tools."""
        self._apply_retention(force=True)
        await self.flush()

    async def close(self) -> None:
        """Flush and fsync everything pending, fire callbacks, checkpoint, close files."""
        if not self._open:
            return
        self._closing = True
        self._wake.set()
        if self._running:
            await self._stopped.wait()
        await self._commit_once(force_checkpoint=True)
        await self._release_files()

    async def abort(self) -> None:
        """Close without flushing anything pending: what a crash leaves on disk. For tests."""
        if not self._open:
            return
        self._closing = True
        self._pending = Batch(number=self._pending.number, first_offset=self._next_offset)
        self._frames = None
        self._wake.set()  # an idle run() waits for work: it must see that there is none and return
        await self._release_files()

    async def _release_files(self) -> None:
        self._open = False
        await anyio.to_thread.run_sync(self._writer.close)
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        await self._catalog.close()

    # ---- catalogue ----------------------------------------------------------------------------------

    def put_exchange(
        self, vhost: str, name: str, type: str, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> None:
        self._catalog_op([put_exchange_op(vhost, name, type, auto_delete, internal, arguments)])

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._catalog_op([delete_exchange_op(vhost, name)])

    def put_queue(self, vhost: str, name: str, auto_delete: bool, arguments: dict[str, Any]) -> int:
        """The queue's id: existing for a known (vhost, name), else new; ids are never reused."""
        queue_id = self._queue_ids.get((vhost, name))
        if queue_id is None:
            queue_id = self._next_queue_id
            self._next_queue_id += 1
            self._queue_ids[(vhost, name)] = queue_id
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
        self._queue_ids = {key: qid for key, qid in self._queue_ids.items() if qid != queue_id}
        for offset in state.live:
            self._release(offset)
        values = self._pending.queue_values
        for key in [key for key in values if key[0] == queue_id]:
            del values[key]  # set earlier in this batch: the queue's rows go with it
        if self._counts:
            self._counts = {key: n for key, n in self._counts.items() if key[0] != queue_id}
        self._catalog_op(delete_queue_ops(queue_id))

    def set_queue_value(self, queue_id: int, key: str, value: bytes | None) -> None:
        """Keep a small value with a durable queue (None deletes it): durable with the next commit, before
        any record appended after the call is; the last value set for a key in a batch is the one written.
        Given back in QueueEntry.values at open and deleted with the queue. The store does not interpret it."""
        if queue_id not in self._queues:
            return
        self._pending.queue_values[(queue_id, key)] = value
        if not self._woken:
            self._poke()

    def put_binding(
        self,
        vhost: str,
        source: str,
        destination: str,
        destination_kind: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        key = binding_key(vhost, source, destination, destination_kind, routing_key, arguments)
        self._catalog_op([put_binding_op(key)])

    def delete_binding(
        self,
        vhost: str,
        source: str,
        destination: str,
        destination_kind: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        key = binding_key(vhost, source, destination, destination_kind, routing_key, arguments)
        self._catalog_op([delete_binding_op(key)])

    # Users, vhosts and permissions: written with the next group commit, as the rest of the catalogue.

    def put_user(self, name: str, password_hash: str, hashing_algorithm: str, tags: str, limits: str = "{}") -> None:
        self._catalog_op([put_user_op(name, password_hash, hashing_algorithm, tags, limits)])

    def delete_user(self, name: str) -> None:
        """The user and every permission it held."""
        self._catalog_op(delete_user_ops(name))

    def put_vhost(self, name: str, description: str, tags: str, limits: str, message_ids: bool = False) -> None:
        self._catalog_op([put_vhost_op(name, description, tags, limits, message_ids)])

    def delete_vhost(self, name: str) -> None:
        """The vhost, its permissions, exchanges and bindings; delete its queues first (delete_queue)."""
        self._catalog_op(delete_vhost_ops(name))

    def put_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        self._catalog_op([put_permission_op(user, vhost, configure, write, read)])

    def delete_permission(self, user: str, vhost: str) -> None:
        self._catalog_op([delete_permission_op(user, vhost)])

    def put_topic_permission(self, user: str, vhost: str, exchange: str, write: str, read: str) -> None:
        self._catalog_op([put_topic_permission_op(user, vhost, exchange, write, read)])

    def delete_topic_permission(self, user: str, vhost: str, exchange: str | None) -> None:
        """One exchange's topic permission, or (exchange None) all of the user's in the vhost."""
        self._catalog_op([delete_topic_permission_op(user, vhost, exchange)])

    def mark_access_seeded(self) -> None:
        self._catalog_op([ACCESS_SEEDED_OP])

    # Policies: one JSON document each, opaque to the store.
    def put_policy(self, vhost: str, name: str, document: str) -> None:
        self._catalog_op([put_policy_op(vhost, name, document)])

    def delete_policy(self, vhost: str, name: str) -> None:
        self._catalog_op([delete_policy_op(vhost, name)])

    # Runtime parameters (a global one has component and vhost ""): one JSON document each, opaque too.
    def put_parameter(self, component: str, vhost: str, name: str, document: str) -> None:
        self._catalog_op([put_parameter_op(component, vhost, name, document)])

    def delete_parameter(self, component: str, vhost: str, name: str) -> None:
        self._catalog_op([delete_parameter_op(component, vhost, name)])

    def _catalog_op(self, ops: list[Any]) -> None:
        self._pending.catalog_ops.extend(ops)
        self._poke()

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
        offset = self._next_offset
        self._last_message_id = message_id = max(self._last_message_id + 1, self._clock() // 1_000_000 << 16)
        size = self._buffer(offset, record, encode_record(message_id, record, holders), len(holders))
        self._next_offset = offset + 1
        queues = self._queues
        for qid in holders:
            queues[qid].live[offset] = None
        self._buffered(size, on_durable, on_failed)
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
        first = offset = self._next_offset
        # Ids are time-ordered and unique: one clock read for the records buffered together.
        first_id = max(self._last_message_id + 1, self._clock() // 1_000_000 << 16)
        size = self._buffer_run(first, records, encode_records(first_id, records, holders), len(holders))
        offset += len(records)
        self._next_offset = offset
        self._last_message_id = first_id + len(records) - 1
        queues = self._queues
        for qid in holders:
            hold_range(queues[qid].live, first, offset)
        self._buffered(size, on_durable, on_failed)
        return first

    def _holders(self, queue_ids: list[int]) -> list[int]:
        """The queues named that exist, each once (a queue named twice holds the message once)."""
        queues = self._queues
        if len(queue_ids) == 1:  # the common case, without building a list
            return queue_ids if queue_ids[0] in queues else []
        return list(dict.fromkeys(qid for qid in queue_ids if qid in queues))

    def _buffer(self, offset: int, record: MessageRecord, payload: bytes, holders: int) -> int:
        """Lay one encoded record into the pending batch at `offset`, in the active segment (rolled when full);
        its size on disk."""
        size = HEADER_SIZE + len(payload)
        if self._active is None or (self._tail + size > self._segment_size and self._tail > FILE_HEADER_SIZE):
            self._roll(offset)
        active = self._active
        assert active is not None
        frames = self._frames
        if frames is None:  # first record of this batch in this segment
            frames = self._frames = self._pending.frames_for(active)
        append_frame(frames, offset, payload)
        self._indexes[active].observe(offset, self._tail, record.timestamp_ms)
        self._tail += size
        self._refs[active] += holders
        self._unwritten[offset] = record
        return size

    def _buffer_run(self, first: int, records: list[MessageRecord], payloads: list[bytes], holders: int) -> int:
        """_buffer for consecutive records from offset `first`; in one step when they all fit in the active
        segment (append_frames, SegmentIndex.observe_run), else one by one (a roll among them). Their size on
        disk."""
        active = self._active
        size = HEADER_SIZE * len(payloads) + sum(map(len, payloads))
        if active is None or self._tail + size > self._segment_size:
            return sum(map(self._buffer, itertools.count(first), records, payloads, itertools.repeat(holders)))
        frames = self._frames
        if frames is None:  # first records of this batch in this segment
            frames = self._frames = self._pending.frames_for(active)
        append_frames(frames, first, payloads)
        sizes = list(map(HEADER_SIZE.__add__, map(len, payloads)))
        self._indexes[active].observe_run(first, self._tail, sizes, map(_timestamp_of, records))
        self._tail += size
        self._refs[active] += holders * len(payloads)
        self._unwritten.update(zip(itertools.count(first), records))
        return size

    def _buffered(self, size: int, on_durable: Callable[[], None] | None, on_failed: Callable[[], None] | None) -> None:
        """What was just buffered (`size` bytes of frames) settles with the pending batch; past
        max_unwritten_bytes publishers are asked to pause."""
        batch = self._pending
        if on_durable is not None:
            batch.callbacks.append(on_durable)
        if on_failed is not None:
            batch.failures.append(on_failed)
        batch.size += size
        self._unwritten_bytes += size
        if self._unwritten_bytes > self._max_unwritten and not self.pressure:
            self._set_pressure(True)
        self._since_checkpoint += size
        if not self._woken:
            self._poke()

    def mark_delivered(self, queue_id: int, offset: int) -> None:
        """Remember that the message went out, so that after a crash it comes back redelivered=True."""
        state = self._queues.get(queue_id)
        if state is None or offset not in state.live or offset in state.delivered:
            return
        state.delivered.add(offset)
        self._ack_entry(ack_log.DELIVERED, queue_id, offset)

    def ack(self, queue_id: int, offset: int) -> None:
        """The queue no longer needs the message (acked, expired, dropped)."""
        state = self._queues.get(queue_id)
        if state is None or offset not in state.live:
            return  # unknown queue, or an offset the queue does not hold (already acked: idempotent)
        del state.live[offset]
        state.delivered.discard(offset)
        self._ack_entry(ack_log.ACKED, queue_id, offset)
        self._release(offset)
        if self._counts and self._counts.pop((queue_id, offset), None) is not None:
            self._catalog_op([delete_delivery_count_op(queue_id, offset)])

    def set_delivery_count(self, queue_id: int, offset: int, count: int) -> None:
        """How many times the queue's message went back unacked (a delivery limit counts these), durable
        with the next commit; forgotten when the queue acks the message."""
        state = self._queues.get(queue_id)
        if state is None or offset not in state.live or self._counts.get((queue_id, offset)) == count:
            return
        self._counts[(queue_id, offset)] = count
        self._catalog_op([put_delivery_count_op(queue_id, offset, count)])

    def purge(self, queue_id: int, offsets: list[int]) -> None:
        for offset in offsets:
            self.ack(queue_id, offset)

    def read(self, offset: int) -> MessageRecord:
        """Read a record back (blocking pread; the broker uses it for bodies it paged out).
        Raises KeyError if the record is not in the store."""
        record = self._unwritten.get(offset)
        if record is not None:
            return record
        if self._volatile and offset in self._volatile:
            return self._volatile[offset][0]  # type: ignore[no-any-return]
        bases = self._bases[:]  # see read_many: a worker thread may call this
        i = bisect_right(bases, offset) - 1
        if i < 0:
            raise KeyError(offset)
        base = bases[i]
        fd = self._read_fd(base)
        try:
            payload = read_payload(fd, self._indexes[base], offset, self._io.pread)
        except DamagedFrame:  # damage between the index entry and the record: check every frame
            payload = _scan_for(fd, offset)
        if payload is None:
            raise KeyError(offset)
        return decode_record(payload)[2]

    def read_many(self, offsets: list[int], ahead: ReadAhead | None = None) -> list[MessageRecord | None]:
        """Records for ascending offsets, None for one that is not in the store or fails its checks: from the
        bytes `ahead` holds (read_ahead), else with blocking preads, jumping through the offset index. This
        is how a recovered backlog comes back; it decodes, so it belongs on the loop (see read_ahead.py)."""
        found: list[MessageRecord | None] = []
        for base, run in self._by_segment(offsets):
            found.extend([None] * len(run) if base is None else self._read_run(base, run, ahead))
        return found

    def read_payloads(self, offsets: list[int]) -> list[bytes | None]:
        """As read_many, but each record's payload as stored (FORMAT.md's Record), not decoded: what a stream
        sends as it is in a chunk delivery. Where read_many goes one record at a time (a record still only in
        memory, a stretch with damage in it), each is encoded again with message id 0 and no queue ids."""
        found: list[bytes | None] = []
        for base, run in self._by_segment(offsets):
            found.extend([None] * len(run) if base is None else self._payload_run(base, run))
        return found

    def checked_frames(self, offset: int, count: int, budget: int) -> tuple[list[tuple[int, int]], bytes, int]:
        """Consecutive records from `offset` (at most `count`, about `budget` bytes) as their frames lie in
        their segment, as far as earlier reads checked them (segment.checked_frames): ([(frames, payload
        length) of each run], the frames' bytes, 0); ([], b"", how many are not) when the first is not in a
        checked run. Records only in memory are never in one (a checked run holds what was read back from
        its file)."""
        s = bisect_right(self._bases, offset) - 1
        if s < 0 or (self._volatile and not self._volatile.keys().isdisjoint(range(offset, offset + count))):
            return [], b"", count
        base = self._bases[s]  # (its checked runs end where it does)
        count = min(count, self.durable_end() - offset)
        if count <= 0:
            return [], b"", 1
        return checked_frames(self._read_fd(base), self._indexes[base].checked, offset, count, budget, self._io.pread)

    def _payload_run(self, base: int, offsets: list[int]) -> list[bytes | None]:
        if self._in_memory(offsets):
            return [self._payload_or_none(offset) for offset in offsets]
        try:
            return read_payloads(self._read_fd(base), self._indexes[base], offsets, pread=self._io.pread)
        except DamagedFrame:  # damage somewhere in the stretch: one record at a time
            return [self._payload_or_none(offset) for offset in offsets]

    def _payload_or_none(self, offset: int) -> bytes | None:
        record = self._read_or_none(offset)
        return None if record is None else encode_record(0, record, [])

    def read_ahead(self, offsets: list[int]) -> Callable[[], ReadAhead]:
        """On the loop: the work, for a worker thread, of reading the file stretches that hold these ascending
        offsets into memory, for read_many to decode on the loop without waiting on the disk. Offsets not
        written yet are left out (read_many finds them in memory)."""
        return partial(self._read_ahead, offsets[: bisect_left(offsets, self.durable_end())])

    def _read_ahead(self, offsets: list[int]) -> ReadAhead:
        """In a worker thread: only preads and the index lookups that place them."""
        ahead = ReadAhead()
        for base, run in self._by_segment(offsets):
            index = self._indexes.get(base) if base is not None else None
            if base is None or index is None:
                continue
            fd = self._read_fd(base)
            segment = ahead.segments[base] = SegmentBytes(self._io.pread)
            size = os.fstat(fd).st_size
            segment.read(fd, stretches_of(index, run, size), size)
        return ahead

    def _by_segment(self, offsets: list[int]) -> Iterator[tuple[int | None, list[int]]]:
        """Ascending offsets in runs that share a segment: (its base, or None before the first one, run)."""
        # A copy: read-ahead calls this in a worker thread while the loop may delete segments nobody needs
        # (never one holding these offsets) and shift the list.
        bases = list(self._bases)
        i = 0
        while i < len(offsets):
            s = bisect_right(bases, offsets[i]) - 1
            end = bases[s + 1] if s + 1 < len(bases) else None
            j = len(offsets) if end is None else bisect_left(offsets, end, i)
            yield (bases[s] if s >= 0 else None), offsets[i:j]
            i = j

    def _read_run(self, base: int, offsets: list[int], ahead: ReadAhead | None = None) -> list[MessageRecord | None]:
        if self._in_memory(offsets):
            return [self._read_or_none(offset) for offset in offsets]
        fd = self._read_fd(base)
        pread = self._io.pread if ahead is None else ahead.pread_for(base, self._io.pread)
        try:
            payloads = read_payloads(fd, self._indexes[base], offsets, pread=pread)
        except DamagedFrame:  # damage somewhere in the stretch: fall back to one record at a time
            return [self._read_or_none(offset) for offset in offsets]
        return [decode_record(p)[2] if p is not None else None for p in payloads]

    def _in_memory(self, offsets: list[int]) -> bool:
        """The newest are not in the file yet (they are a suffix), or some never made it to disk."""
        return offsets[-1] in self._unwritten or bool(self._volatile and not self._volatile.keys().isdisjoint(offsets))

    def _read_or_none(self, offset: int) -> MessageRecord | None:
        try:
            return self.read(offset)
        except (KeyError, DamagedFrame):
            return None

    def add_commit_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` on the loop after each commit, once its on_durable callbacks have fired: a log
        reader waiting at durable_end() learns there is more to read."""
        self._commit_listeners.append(listener)

    def remove_commit_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._commit_listeners:
            self._commit_listeners.remove(listener)

    def durable_end(self) -> int:
        """Every record below this offset is on disk (fsync'd, under always-batched): what log readers may
        see. Records at or past it may still be lost in a crash."""
        if not self._unwritten:  # mostly, when reading: iter() would walk every slot its deletions left (after a
            return self._next_offset  # 1M fill, ~80 µs a call; a chunk read asks several times)
        return next(iter(self._unwritten))  # insertion order: the oldest unwritten first

    def read_range(self, from_offset: int, max_records: int) -> list[tuple[int, MessageRecord]]:
        """Up to `max_records` (offset, record) pairs at or after `from_offset`, in offset order, below
        durable_end(): the log reader's interface (a stream queue, the Spark connector). Offsets have gaps
        (records lost to damage, segments deleted by retention): resume from the last offset returned + 1.
        Reads retained and needed segments alike, with blocking I/O on the calling (loop) thread, like read().
        """
        out: list[tuple[int, MessageRecord]] = []
        end = self.durable_end()
        bases = self._bases
        for i in range(max(bisect_right(bases, from_offset) - 1, 0), len(bases)):
            if len(out) >= max_records or bases[i] >= end:
                break
            self._read_segment_range(bases[i], max(from_offset, bases[i]), end, max_records, out)
        return out

    def records_from(self, from_offset: int) -> Iterator[tuple[int, MessageRecord]]:
        """Every durable record at or after `from_offset`, in offset order, READ_BATCH at a time (so segments
        deleted between two steps are simply skipped); ends at durable_end() as of the last step. To start
        from a time: records_from(find_offset_by_time(t))."""
        while True:
            batch = self.read_range(from_offset, READ_BATCH)
            if not batch:
                return
            yield from batch
            from_offset = batch[-1][0] + 1

    def find_offset_by_time(self, timestamp_ms: int) -> int | None:
        """Offset of the first stored record with timestamp_ms >= the given time, using the time indexes."""
        for base in self._bases:
            index = self._indexes[base]
            if index.max_timestamp < timestamp_ms and base != self._active:
                continue
            found = self._first_at_or_after(base, index, timestamp_ms)
            if found is not None:
                return found
        return None

    # ---- internals: bookkeeping on the loop ----------------------------------------------------------

    def _poke(self) -> None:
        """Wake the commit loop (once per wait: setting an already-set event still costs a call)."""
        self._woken = True
        self._wake.set()

    def _ack_entry(self, kind: int, queue_id: int, offset: int) -> None:
        self._pending.acks += ack_log.ENTRY.pack(kind, queue_id, offset)
        self._since_checkpoint += ack_log.ENTRY.size
        if not self._woken:
            self._poke()

    def _release(self, offset: int) -> None:
        """One queue stopped holding `offset`; a segment nobody holds anything in goes once this is synced."""
        if self._volatile and offset in self._volatile:
            held = self._volatile[offset]
            held[1] -= 1
            if held[1] <= 0:
                del self._volatile[offset]
            return  # a record that never reached its segment (a failed batch) counts in none
        base = self._bases[bisect_right(self._bases, offset) - 1]
        self._refs[base] -= 1
        if self._refs[base] == 0 and base != self._active:
            self._unneeded(base)
        elif self._refs[base] == 0 and self._tail >= min(RECLAIM_ACTIVE_BYTES, self._segment_size):
            # A drained queue must give its disk back without waiting for the (large) segment to fill:
            # roll now, and the old segment, needed by nobody, goes with the next commit (or, with a
            # retention policy, once the policy lets it go).
            self._roll(self._next_offset)
            self._poke()

    def _unneeded(self, base: int) -> None:
        """No queue holds anything in sealed segment `base`: delete it after the next fsync (which covers the
        acks that freed it), or leave it to the retention policy."""
        if self._retention.enabled:
            self._retention_due = True
        else:
            self._pending.delete_segments.append(base)
        self._poke()

    def _roll(self, base: int) -> None:
        old = self._active
        if old is not None:
            self._sizes[old] = self._tail
            self._pending.segment_ends[old] = self._tail
            self._pending.sealed_segments.append(old)
            if self._refs[old] == 0:
                self._unneeded(old)
        self._active = base
        self._active_created_ms = self._now_ms() if self._retention.enabled else 0
        self._frames = None
        self._bases.append(base)
        self._indexes[base] = SegmentIndex(base, self._interval)
        self._refs[base] = 0
        self._tail = FILE_HEADER_SIZE
        self._pending.new_segments.append(base)

    def _now_ms(self) -> int:
        return self._clock() // 1_000_000

    # ---- internals: retention ------------------------------------------------------------------------

    def _apply_retention(self, force: bool = False) -> None:
        """Roll the active segment if it is too old, and choose the unneeded segments the policy no longer
        keeps; the commit of the pending batch deletes them. Cheap unless something changed or
        RETENTION_CHECK_MS has passed (it runs on every commit)."""
        if not self._retention.enabled:
            return
        now = self._now_ms()
        if not (force or self._retention_due or now - self._retention_checked_ms >= RETENTION_CHECK_MS):
            return
        self._retention_due = False
        self._retention_checked_ms = now
        self._roll_by_age(now)
        segments = [self._segment_info(base) for base in self._bases if base not in self._doomed]
        chosen = select_for_deletion(segments, self._retention, now)
        for base, reason in chosen:
            self._doomed[base] = reason
            self._pending.delete_segments.append(base)
        if chosen:
            self._poke()

    def _segment_info(self, base: int) -> SegmentInfo:
        if base == self._active:
            return SegmentInfo(base, self._tail, self._indexes[base].max_timestamp, needed=True)
        return SegmentInfo(base, self._sizes[base], self._indexes[base].max_timestamp, needed=self._refs[base] > 0)

    def _roll_by_age(self, now: int) -> None:
        """A segment is deleted by age only once sealed, so a slow log must roll on time too. The clock starts
        at the later of the segment's creation and its first record: a record published long ago (a
        dead-lettered one keeps its timestamp) must not roll every new segment at once."""
        max_age = self._retention.max_age_ms
        active = self._active
        if max_age is None or active is None or self._tail <= FILE_HEADER_SIZE:
            return
        index = self._indexes[active]
        if index.max_timestamps and now - max(index.max_timestamps[0], self._active_created_ms) > max_age:
            self._roll(self._next_offset)

    def _log_recovered_retention(self, stats: dict[str, Any]) -> None:
        if not self._retention.enabled:
            return
        for reason in ("age", "size"):
            self.stats[f"retention_deleted_{reason}"] += stats[f"retention_deleted_{reason}"]
        log.info(
            "retention at open: %d unneeded segments kept, %d deleted by age, %d by size",
            stats["segments_retained"],
            stats["retention_deleted_age"],
            stats["retention_deleted_size"],
        )

    def _read_fd(self, base: int) -> int:
        fd = self._read_fds.get(base)
        if fd is None:  # read_many may run in a worker thread (read-ahead): one fd per segment all the same
            new = os.open(self._layout.segment(base), os.O_RDONLY)
            fd = self._read_fds.setdefault(base, new)
            if fd != new:
                os.close(new)
        return fd

    def _first_at_or_after(self, base: int, index: SegmentIndex, timestamp_ms: int) -> int | None:
        entry = index.before_time(timestamp_ms)
        offset = entry[0] if entry is not None else base
        end = self._next_offset if base == self._active else self._bases[self._bases.index(base) + 1]
        for candidate in range(offset, end):
            try:
                if self.read(candidate).timestamp_ms >= timestamp_ms:
                    return candidate
            except KeyError:
                continue
        return None

    def _read_segment_range(
        self, base: int, start: int, end: int, max_records: int, out: list[tuple[int, MessageRecord]]
    ) -> None:
        """Append records [start, end) of one segment to `out` until it holds max_records."""
        fd = self._read_fd(base)
        size = os.fstat(fd).st_size  # the active segment may have bytes past `end`: they are not returned
        entry = self._indexes[base].floor(start)
        pos = entry[1] if entry is not None else FILE_HEADER_SIZE
        if size <= pos:
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
            for _, offset, payload in scan_frames(data, pos, size, ScanReport()):
                if offset >= end or len(out) >= max_records:
                    return
                if offset >= start:
                    out.append((offset, decode_record(payload)[2]))

    # ---- internals: the commit -----------------------------------------------------------------------

    async def _commit_once(self, force_checkpoint: bool = False) -> None:
        async with self._commit_lock:
            batch = self._seal(force_checkpoint)
            if batch.queue_values:
                batch.catalog_ops.extend(queue_value_ops(batch.queue_values))
            try:
                if batch.catalog_ops:  # before the fsync: a confirmed message never names a lost queue
                    await self._catalog.apply(batch.catalog_ops)
                await anyio.to_thread.run_sync(self._writer.write, batch)
            except (WriteFailed, sqlite3.Error) as exc:
                self._batch_failed(batch, exc)
                self._batch_done(batch)
                await anyio.sleep(FAILURE_BACKOFF_S)
                return
            for offset in range(batch.first_offset, batch.end_offset):
                del self._unwritten[offset]
            self._batch_done(batch)
            self._fire(batch.callbacks)
            if self._commit_listeners and batch.end_offset > batch.first_offset:
                self._fire(list(self._commit_listeners))
            try:
                if batch.delete_segments:
                    await self._delete_segments(batch.delete_segments)
                if batch.checkpoint is not None:
                    await self._write_checkpoint(batch.checkpoint)
                    stale = [n for n in self._layout.ack_numbers() if n < batch.checkpoint.checkpoint.ack_number]
                    await anyio.to_thread.run_sync(self._delete_ack_files, stale)
            except (OSError, sqlite3.Error):
                # Nothing is lost: the old checkpoint and its ack-log files stay valid, an undeleted segment
                # is deleted at the next open.
                log.exception("store: checkpoint or cleanup after a durable batch failed")

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

    # ---- internals: disk faults ----------------------------------------------------------------------

    def _batch_failed(self, batch: Batch, exc: Exception) -> None:
        """The batch is not on disk and never will be: its records, and those of the pending batch (laid out
        after them, in a segment that now ends before them), fail. Their queues keep them, from memory."""
        pending = self._pending
        self._pending = fresh = Batch(number=pending.number, first_offset=self._next_offset)
        fresh.catalog_ops = pending.catalog_ops
        if isinstance(exc, sqlite3.Error):
            fresh.catalog_ops = batch.catalog_ops + fresh.catalog_ops  # SQLite rolled back: apply them later
        fresh.acks = pending.acks
        fresh.delete_segments = pending.delete_segments
        self._frames = None
        self._unwritten_bytes -= pending.size
        failed = self._forget_records([*batch.chunks, *pending.chunks])
        self._drop_segments(batch, pending)
        # The ack-log file may end in a torn frame: continue in a fresh one (a file only this batch wrote
        # to is reused, so a long outage does not leave a file per attempt).
        if batch.start_ack is None:
            self._ack_number += 1
        fresh.start_ack = batch.start_ack if batch.start_ack is not None else self._ack_number
        self._since_checkpoint = self._checkpoint_bytes  # checkpoint once writing works again
        self._count_failure(exc, failed)
        if isinstance(exc, WriteFailed) and exc.out_of_space:
            self._space_needed = max(self._space_needed, batch.size + pending.size)
            if not self.out_of_space:
                self.out_of_space = True
                if self.on_disk_full is not None:
                    self.on_disk_full(True)
        self._fire([*batch.failures, *pending.failures])
        if not fresh.is_empty():
            self._poke()

    def _forget_records(self, chunks: list[tuple[int, bytearray]]) -> int:
        """Move the records of these frames from `_unwritten` to `_volatile` (if a queue still holds them),
        taking them out of their segment's reference count. Returns how many there were."""
        count = 0
        for base, frames in chunks:
            for _, offset, payload in scan_frames(frames, 0, len(frames), ScanReport()):
                count += 1
                record = self._unwritten.pop(offset)
                holders = sum(
                    1 for qid in decode_record(payload)[1] if qid in self._queues and offset in self._queues[qid].live
                )
                if holders:
                    self._refs[base] -= holders
                    self._volatile[offset] = [record, holders]
        return count

    def _drop_segments(self, batch: Batch, pending: Batch) -> None:
        """The writer removed the segments these batches created and cut back the one appended to; the next
        record starts a new segment."""
        for base in [*batch.new_segments, *pending.new_segments]:
            if base in self._indexes:
                self._bases.remove(base)
                del self._indexes[base], self._refs[base]
                self._sizes.pop(base, None)
                self._doomed.pop(base, None)
        for base in [base for base, _ in batch.chunks + pending.chunks if base in self._indexes]:
            try:
                size = os.stat(self._layout.segment(base)).st_size
            except OSError:
                size = FILE_HEADER_SIZE
            self._sizes[base] = size
            self._indexes[base].drop_from(size)
        old = self._active
        self._active, self._tail = None, 0
        if old is not None and old in self._indexes:
            self._sizes.setdefault(old, self._tail_of(old))
            if self._refs[old] == 0:
                self._unneeded(old)
        for base, _ in batch.chunks + pending.chunks:
            if base in self._refs and base != old and self._refs[base] == 0:
                self._unneeded(base)

    def _tail_of(self, base: int) -> int:
        try:
            return os.stat(self._layout.segment(base)).st_size
        except OSError:
            return FILE_HEADER_SIZE

    def _count_failure(self, exc: Exception, failed: int) -> None:
        stage = exc.stage if isinstance(exc, WriteFailed) else "catalogue"
        self.fault_stats["fsync_failures" if stage == "fsync" else "write_failures"] += 1
        self.fault_stats["records_failed"] += failed
        now = time.monotonic()
        if now - self._failures_logged_at < FAILURE_LOG_S:
            self._failures_unlogged += 1
            return
        log.error(
            "STORE %s FAILED: %s. %d records were not stored and their publishers get nacks; the next record "
            "starts a new segment (%d more failed batches since the last report; totals %s)",
            stage.upper(),
            exc,
            failed,
            self._failures_unlogged,
            self.fault_stats,
        )
        self._failures_logged_at, self._failures_unlogged = now, 0

    def check_space(self) -> bool:
        """While out of space: whether there is room again for what failed (and then clear the state). The
        broker calls this with its disk alarm check; returns the current out_of_space."""
        if not self.out_of_space:
            return False
        try:
            free = _free_bytes(self._layout.root)
        except OSError:
            return True
        if free > self._space_needed + 2 * HEADER_SIZE:
            log.warning("store: disk space is available again (%d bytes free)", free)
            self.out_of_space, self._space_needed = False, 0
            if self.on_disk_full is not None:
                self.on_disk_full(False)
        return self.out_of_space

    def _seal(self, force_checkpoint: bool) -> Batch:
        self._apply_retention()
        batch = self._pending
        batch.end_offset = self._next_offset
        if self._active is not None and batch.chunks:
            batch.segment_ends[self._active] = self._tail
        self._pending = Batch(number=batch.number + 1, first_offset=self._next_offset)
        self._frames = None
        batch.index_writes = [(base, *self._indexes[base].take_unsaved()) for base, _ in batch.chunks]
        if force_checkpoint or batch.new_segments or self._since_checkpoint >= self._checkpoint_bytes:
            # The snapshot reflects exactly this batch and those before it; it is committed only after the
            # batch is synced, and the ack-log file switches with it.
            self._ack_number += 1
            batch.rotate_ack_to = self._ack_number
            batch.checkpoint = self._checkpoint_data(self._ack_number)
            self._since_checkpoint = 0
        return batch

    def _fire(self, callbacks: list[Callable[[], None]]) -> None:
        for callback in callbacks:
            try:
                callback()
            except Exception:
                # One broken callback must not stop confirms for the rest of the batch or the loop.
                log.exception("on_durable callback failed")

    async def _delete_segments(self, bases: list[int]) -> None:
        gone = [base for base in dict.fromkeys(bases) if self._refs.get(base) == 0 and base != self._active]
        for base in gone:
            self._count_retention_deletion(base)
            fd = self._read_fds.pop(base, None)
            if fd is not None:
                os.close(fd)
            self._bases.remove(base)
            del self._indexes[base], self._refs[base]
            self._sizes.pop(base, None)
        await anyio.to_thread.run_sync(self._unlink_segments, gone)

    def _count_retention_deletion(self, base: int) -> None:
        reason = self._doomed.pop(base, None)
        if reason is None:
            return
        self.stats[f"retention_deleted_{reason}"] += 1
        size = self._sizes.get(base, 0)
        if reason == AGE:
            age_s = (self._now_ms() - self._indexes[base].max_timestamp) / 1000
            log.info("retention: deleted segment %d (%d bytes, newest record %.0f s old)", base, size, age_s)
        else:
            log.info("retention: deleted segment %d (%d bytes) to keep the log under max_bytes", base, size)

    def _unlink_segments(self, bases: list[int]) -> None:
        layout = self._layout
        for base in bases:
            for path in (layout.segment(base), layout.offset_index(base), layout.time_index(base)):
                self._io.unlink(path)

    def _delete_ack_files(self, numbers: list[int]) -> None:
        for number in numbers:
            self._io.unlink(self._layout.ack_file(number))

    def _checkpoint_data(self, ack_number: int) -> CheckpointData:
        checkpoint = Checkpoint(
            next_offset=self._next_offset,
            segment_base=self._active if self._active is not None else self._next_offset,
            segment_position=self._tail,
            ack_number=ack_number,
            last_message_id=self._last_message_id,
            created_ms=self._now_ms(),
        )
        # Only copies on the loop (C-speed); the run encoding happens in a worker thread (_write_checkpoint).
        queue_rows = [(qid, _copy_live(state.live), list(state.delivered)) for qid, state in self._queues.items()]
        if self._volatile:  # not on disk: recovery would count them lost
            volatile = self._volatile
            queue_rows = [
                (qid, [o for o in state.live if o not in volatile], [o for o in state.delivered if o not in volatile])
                for qid, state in self._queues.items()
            ]
        segment_rows = []
        for i, base in enumerate(self._bases):
            sealed = base != self._active
            end = self._bases[i + 1] if i + 1 < len(self._bases) else self._next_offset
            segment_rows.append((base, end, self._sizes.get(base, self._tail) if sealed else self._tail, sealed))
        return CheckpointData(checkpoint, queue_rows, segment_rows)

    async def _write_checkpoint(self, data: CheckpointData) -> None:
        data.queue_rows = await anyio.to_thread.run_sync(_encode_queue_rows, data.queue_rows)
        await self._catalog.write_checkpoint(data)

    # ---- internals: after recovery -------------------------------------------------------------------

    def _install(self, snap: CatalogSnapshot, result: RecoveryResult) -> None:
        self._queues = result.queues
        self._queue_ids = {(vhost, name): qid for qid, vhost, name, _, _ in snap.queues}
        self._next_queue_id = snap.next_queue_id
        self._bases = sorted(result.indexes)
        self._indexes = result.indexes
        self._sizes = dict(result.sizes)
        self._refs = dict.fromkeys(self._bases, 0)
        for state in self._queues.values():
            self._count_refs(state.live)
        self._active = self._bases[-1] if self._bases else None
        self._tail = self._sizes[self._active] if self._active is not None else 0
        self._next_offset = self._pending.first_offset = result.next_offset
        self._last_message_id = result.last_message_id
        self._ack_number = max([snap.checkpoint.ack_number if snap.checkpoint else 0, *result.stale_ack_files]) + 1

    def _count_refs(self, live: MutableMapping[int, None]) -> None:
        bases, refs = self._bases, self._refs
        if not isinstance(live, OffsetRuns):
            for offset in live:
                refs[bases[bisect_right(bases, offset) - 1]] += 1
            return
        for start, stop in live.runs():  # a log: by run, split at segment bases, never offset by offset
            i = bisect_right(bases, start) - 1
            while start < stop:
                upper = bases[i + 1] if i + 1 < len(bases) else stop
                refs[bases[i]] += min(stop, upper) - start
                start = min(stop, upper)
                i += 1

    def _resume_files(self, result: RecoveryResult) -> None:
        if self._active is not None:
            index = self._indexes[self._active]
            write_index_files(self._layout.offset_index(self._active), self._layout.time_index(self._active), index)
            self._writer.open_segment(self._active)
        self._writer.start_ack_file(self._ack_number)

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
        self._counts.update(((queue_id, offset), n) for offset, n in kept.items())
        return kept


def _free_bytes(path: os.PathLike[str]) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _scan_for(fd: int, offset: int) -> bytes | None:
    """Slow path for read(): check every frame of the segment."""
    size = os.fstat(fd).st_size
    if size <= FILE_HEADER_SIZE:
        return None
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
        for _, sequence, payload in scan_frames(data, FILE_HEADER_SIZE, size, ScanReport()):
            if sequence >= offset:
                return payload if sequence == offset else None
    return None


def _encode_queue_rows(rows: list[tuple[int, Any, Any]]) -> list[tuple[int, Any, Any]]:
    """(queue_id, live offsets in order, delivered offsets) -> (queue_id, live runs, delivered runs)."""
    return [
        (qid, live if isinstance(live, bytes) else encode_runs(live), encode_runs(sorted(delivered)))
        for qid, live, delivered in rows
    ]


def _recovered_log(entry: QueueEntry, live: OffsetRuns, records: dict[int, MessageRecord], delivered: set[int]) -> None:
    """A log's recovered offsets stay runs: the records recovery read (its tail, after the checkpoint) as
    messages, every other offset in `unloaded_runs`, nothing built per offset of the rest."""
    entry.messages = [RecoveredMessage(o, r, o in delivered) for o, r in records.items() if o in live]
    unloaded = OffsetRuns.from_encoded(live.encoded())
    for message in entry.messages:
        del unloaded[message.offset]
    entry.unloaded_runs = unloaded
    entry.unloaded_delivered = {o for o in delivered if o not in records}


def _copy_live(live: Any) -> list[int] | bytes:
    """A queue's held offsets for a checkpoint: a list, or a log's runs already encoded (not one int each)."""
    return live.encoded() if isinstance(live, OffsetRuns) else list(live)
