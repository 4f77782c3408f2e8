"""MessageStore: the broker's one interface to durable storage (see FORMAT.md for what lands on disk).

Threading model: every public method runs on the event loop. The synchronous ones (append, ack, catalogue
changes...) only update memory and buffer work in the pending `Batch`; `run()` is the group-commit loop that
seals the pending batch, writes and fsyncs it in a worker thread while the next one fills, and then fires
the batch's durability callbacks back on the loop. A callback therefore never fires before the fsync that
covers its message.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from store import ack_log
from store.catalog import (
    Catalog,
    CatalogSnapshot,
    Checkpoint,
    CheckpointData,
    binding_key,
    delete_binding_op,
    delete_exchange_op,
    delete_queue_ops,
    put_binding_op,
    put_exchange_op,
    put_queue_ops,
)
from store.commit import Batch, Writer
from store.frame import HEADER_SIZE, ScanReport, append_frame, scan_frames
from store.queue_state import QueueState, encode_runs
from store.record_codec import decode_record, encode_record
from store.records import MessageRecord, QueueEntry, Recovered, RecoveredMessage
from store.recovery import RecoveryResult, recover_files
from store.segment import FILE_HEADER_SIZE, DamagedFrame, Layout, read_payload
from store.segment_index import DEFAULT_INTERVAL, SegmentIndex, write_index_files

log = logging.getLogger(__name__)

FSYNC_POLICIES = ("always-batched", "none")
MAX_SEGMENT_SIZE = 1 << 31  # index positions are u32; leave room for one oversized record past the limit
DEFAULT_CHECKPOINT_BYTES = 64 << 20


RECLAIM_ACTIVE_BYTES = 16 * 1024 * 1024  # an emptied active segment at least this big is rolled and deleted


class MessageStore:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        segment_size: int = 1 << 30,
        fsync: str = "always-batched",
        index_interval: int = DEFAULT_INTERVAL,
        checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, not {fsync!r}")
        if not FILE_HEADER_SIZE < segment_size <= MAX_SEGMENT_SIZE:
            raise ValueError(f"segment_size must be in ({FILE_HEADER_SIZE}, {MAX_SEGMENT_SIZE}]")
        self._layout = Layout(data_dir)
        self._segment_size = segment_size
        self._fsync = fsync == "always-batched"
        self._interval = index_interval
        self._checkpoint_bytes = checkpoint_bytes
        self._catalog = Catalog(self._layout.catalog)
        self._writer = Writer(self._layout, self._fsync)
        # Catalogue state needed synchronously.
        self._queues: dict[int, QueueState] = {}
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

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def open(self) -> Recovered:
        """Create the data directory on first use, recover what is on disk, and start a fresh ack-log file
        under a new checkpoint (so recovery's own decisions are never replayed twice)."""
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
                recover_files, self._layout, snap, self._interval, int(time.time() * 1000)
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
        return self._recovered(snap, result)

    async def run(self) -> None:
        """The group-commit loop: returns once close() has been called and everything is flushed."""
        self._running = True
        try:
            while True:
                if self._pending.is_empty():
                    if self._closing:
                        return
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    self._woken = False
                    continue
                await self._commit_once()
        finally:
            self._running = False
            self._stopped.set()

    async def flush(self) -> None:
        """Wait until everything buffered before this call is durable (commits itself if run() isn't
        running). Not in the broker's interface; used by tests and tools."""
        target = self._pending.number - (1 if self._pending.is_empty() else 0)
        while self._durable_number < target:
            if self._running:
                await self._committed.wait()
            else:
                await self._commit_once()

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

    def delete_queue(self, queue_id: int) -> None:
        state = self._queues.pop(queue_id, None)
        if state is None:
            return
        self._queue_ids = {key: qid for key, qid in self._queue_ids.items() if qid != queue_id}
        for offset in state.live:
            self._release(offset)
        self._catalog_op(delete_queue_ops(queue_id))

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

    def _catalog_op(self, ops: list[Any]) -> None:
        self._pending.catalog_ops.extend(ops)
        self._poke()

    # ---- messages -----------------------------------------------------------------------------------

    def append(self, record: MessageRecord, queue_ids: list[int], on_durable: Callable[[], None] | None = None) -> int:
        """Buffer one record for the queues named; return its offset. `on_durable` fires on the loop once
        the fsync covering the record is done (after the write, with fsync "none")."""
        queues = self._queues
        if len(queue_ids) == 1:  # the common case, without building a list
            holders = queue_ids if queue_ids[0] in queues else []
        else:
            # a queue named twice holds the message once
            holders = list(dict.fromkeys(qid for qid in queue_ids if qid in queues))
        offset = self._next_offset
        self._last_message_id = message_id = max(self._last_message_id + 1, time.time_ns() // 1_000_000 << 16)
        payload = encode_record(message_id, record, holders)
        size = HEADER_SIZE + len(payload)
        if self._active is None or (self._tail + size > self._segment_size and self._tail > FILE_HEADER_SIZE):
            self._roll(offset)
        active = self._active
        assert active is not None
        batch = self._pending
        frames = self._frames
        if frames is None:  # first record of this batch in this segment
            frames = self._frames = batch.frames_for(active)
        append_frame(frames, offset, payload)
        self._indexes[active].observe(offset, self._tail, record.timestamp_ms)
        self._tail += size
        self._next_offset = offset + 1
        for qid in holders:
            queues[qid].live[offset] = None
        self._refs[active] += len(holders)
        self._unwritten[offset] = record
        if on_durable is not None:
            batch.callbacks.append(on_durable)
        self._since_checkpoint += size
        if not self._woken:
            self._poke()
        return offset

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

    def purge(self, queue_id: int, offsets: list[int]) -> None:
        for offset in offsets:
            self.ack(queue_id, offset)

    def read(self, offset: int) -> MessageRecord:
        """Read a record back (blocking pread; the broker uses it for bodies it paged out).
        Raises KeyError if the record is not in the store."""
        record = self._unwritten.get(offset)
        if record is not None:
            return record
        i = bisect_right(self._bases, offset) - 1
        if i < 0:
            raise KeyError(offset)
        base = self._bases[i]
        fd = self._read_fd(base)
        try:
            payload = read_payload(fd, self._indexes[base], offset)
        except DamagedFrame:  # damage between the index entry and the record: check every frame
            payload = _scan_for(fd, offset)
        if payload is None:
            raise KeyError(offset)
        return decode_record(payload)[2]

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
        base = self._bases[bisect_right(self._bases, offset) - 1]
        self._refs[base] -= 1
        if self._refs[base] == 0 and base != self._active:
            self._pending.delete_segments.append(base)
            self._poke()
        elif self._refs[base] == 0 and self._tail >= min(RECLAIM_ACTIVE_BYTES, self._segment_size):
            # A drained queue must give its disk back without waiting for the (large) segment to fill:
            # roll now, and the old segment, needed by nobody, goes with the next commit.
            self._roll(self._next_offset)
            self._poke()

    def _roll(self, base: int) -> None:
        old = self._active
        if old is not None:
            self._sizes[old] = self._tail
            self._pending.segment_ends[old] = self._tail
            self._pending.sealed_segments.append(old)
            if self._refs[old] == 0:
                self._pending.delete_segments.append(old)
        self._active = base
        self._frames = None
        self._bases.append(base)
        self._indexes[base] = SegmentIndex(base, self._interval)
        self._refs[base] = 0
        self._tail = FILE_HEADER_SIZE
        self._pending.new_segments.append(base)

    def _read_fd(self, base: int) -> int:
        fd = self._read_fds.get(base)
        if fd is None:
            fd = self._read_fds[base] = os.open(self._layout.segment(base), os.O_RDONLY)
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

    # ---- internals: the commit -----------------------------------------------------------------------

    async def _commit_once(self, force_checkpoint: bool = False) -> None:
        async with self._commit_lock:
            batch = self._seal(force_checkpoint)
            if batch.catalog_ops:  # before the fsync: a confirmed message never names a lost queue
                await self._catalog.apply(batch.catalog_ops)
            await anyio.to_thread.run_sync(self._writer.write, batch)
            for offset in range(batch.first_offset, batch.end_offset):
                del self._unwritten[offset]
            self._durable_number = batch.number
            self._fire(batch.callbacks)
            if batch.delete_segments:
                await self._delete_segments(batch.delete_segments)
            if batch.checkpoint is not None:
                await self._write_checkpoint(batch.checkpoint)
                stale = [n for n in self._layout.ack_numbers() if n < batch.checkpoint.checkpoint.ack_number]
                await anyio.to_thread.run_sync(self._delete_ack_files, stale)
            self._committed.set()
            self._committed = anyio.Event()

    def _seal(self, force_checkpoint: bool) -> Batch:
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
        gone = [base for base in bases if self._refs.get(base) == 0 and base != self._active]
        for base in gone:
            fd = self._read_fds.pop(base, None)
            if fd is not None:
                os.close(fd)
            self._bases.remove(base)
            del self._indexes[base], self._refs[base]
            self._sizes.pop(base, None)
        await anyio.to_thread.run_sync(self._unlink_segments, gone)

    def _unlink_segments(self, bases: list[int]) -> None:
        layout = self._layout
        for base in bases:
            for path in (layout.segment(base), layout.offset_index(base), layout.time_index(base)):
                path.unlink(missing_ok=True)

    def _delete_ack_files(self, numbers: list[int]) -> None:
        for number in numbers:
            self._layout.ack_file(number).unlink(missing_ok=True)

    def _checkpoint_data(self, ack_number: int) -> CheckpointData:
        checkpoint = Checkpoint(
            next_offset=self._next_offset,
            segment_base=self._active if self._active is not None else self._next_offset,
            segment_position=self._tail,
            ack_number=ack_number,
            last_message_id=self._last_message_id,
            created_ms=int(time.time() * 1000),
        )
        # Only copies on the loop (C-speed); the run encoding happens in a worker thread (_write_checkpoint).
        queue_rows = [(qid, list(state.live), list(state.delivered)) for qid, state in self._queues.items()]
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
            for offset in state.live:
                self._refs[self._bases[bisect_right(self._bases, offset) - 1]] += 1
        self._active = self._bases[-1] if self._bases else None
        self._tail = self._sizes[self._active] if self._active is not None else 0
        self._next_offset = self._pending.first_offset = result.next_offset
        self._last_message_id = result.last_message_id
        self._ack_number = max([snap.checkpoint.ack_number if snap.checkpoint else 0, *result.stale_ack_files]) + 1

    def _resume_files(self, result: RecoveryResult) -> None:
        if self._active is not None:
            index = self._indexes[self._active]
            write_index_files(self._layout.offset_index(self._active), self._layout.time_index(self._active), index)
            self._writer.open_segment(self._active)
        self._writer.start_ack_file(self._ack_number)

    def _recovered(self, snap: CatalogSnapshot, result: RecoveryResult) -> Recovered:
        queues = []
        for qid, vhost, name, auto_delete, arguments in snap.queues:
            state = self._queues[qid]
            messages = [
                RecoveredMessage(offset, result.records[offset], offset in state.delivered) for offset in state.live
            ]
            queues.append(QueueEntry(qid, vhost, name, auto_delete, arguments, messages))
        return Recovered(snap.exchanges, queues, snap.bindings, result.stats)


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
    return [(qid, encode_runs(live), encode_runs(sorted(delivered))) for qid, live, delivered in rows]
