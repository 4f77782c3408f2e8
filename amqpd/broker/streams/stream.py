"""A stream queue (x-queue-type: stream): an append-only log that consumers read from any offset.

Publishing appends; acks only move a consumer along (and, with offset tracking, save where it is): nothing
is removed but by retention, which drops whole segments, oldest first. Each consumer has a cursor; a
delivery carries its dense offset in the `x-stream-offset` header. Plain object like Queue: the log is
behind StreamLog, time and timers come through the hooks.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.broker.entry import Entry
from amqpd.broker.message import LogDelivery, Message
from amqpd.broker.queues.queue import Queue, QueueHooks
from amqpd.broker.stored_message import route_of
from amqpd.broker.streams import replay as stream_replay
from amqpd.broker.streams.args import FIRST, LAST, NEXT, OffsetSpec, Retention
from amqpd.broker.streams.chunks import CHUNK_ARG, chunk_layout, feed_chunks
from amqpd.broker.streams.cursor import TIMESTAMP_ARG, Cursor, StreamEntry
from amqpd.broker.streams.log import MemoryLog, ReadPending, StoreLog, StreamLog
from amqpd.protocol.constants import FLAG_CONTENT_ENCODING, FLAG_CONTENT_TYPE, FLAG_HEADERS
from amqpd.protocol.fastpath import shortstr
from store import MessageRecord

if TYPE_CHECKING:
    from amqpd.broker.delivery.consumer import Consumer

READ_BATCH = 256  # records read from the log per step of a consumer's replay
FEED_BATCHES = 64  # reads per consumer per dispatch before yielding to the loop
# Bytes encoded for one consumer per dispatch before yielding to the loop: a replay of big messages must not
# hold the loop (and every other connection's confirms) while it encodes a whole prefetch window, nor hand
# the socket more than its write buffer takes before pause_writing can say it is full.
FEED_BYTES = 1 << 20
_OFFSET_FIELD = shortstr("x-stream-offset") + b"l"  # a signed 64-bit integer, as RabbitMQ sends it
# Asked for with the consume argument x-stream-timestamp = true (amqpd's own; the PySpark reader uses it):
# each delivery also carries the broker's append time, ms since the epoch, as a signed 64-bit integer.
_TIMESTAMP_FIELD = shortstr(TIMESTAMP_ARG) + b"l"
_ACTIVE = struct.Struct("<qqq")  # stream.active: the open segment's first offset, bytes, newest timestamp
ACTIVE_SAVE_FRACTION = 16  # the open segment's size is saved each time it grows by this fraction of a segment
TRACKED_PREFIX = "offset:"  # queue values: a tracked consumer's next offset, by consumer tag


class _StreamHooks(QueueHooks):
    """The vhost's hooks, except that an ack moves a cursor instead of removing a message."""

    def __init__(self, stream: StreamQueue, outer: QueueHooks) -> None:
        self.stream = stream
        self.outer = outer

    def settled(self, queue: Queue, entry: Entry) -> None:
        if isinstance(entry, StreamEntry):
            entry.cursor.acked(entry.seq, entry.seq + 1)

    def dropped(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.settled(queue, entry)

    def schedule(self, delay_s: float, callback: Any) -> Any:
        return self.outer.schedule(delay_s, callback)

    def unused(self, queue: Queue) -> None:
        self.outer.unused(queue)


class StreamQueue(Queue["Consumer"]):
    is_stream = True
    always_stored = True  # every message is written, persistent or not, as RabbitMQ does
    FLOW_HIGH = 1 << 62  # a stream's length is history, not a backlog: never a reason to pause publishers

    def __init__(
        self,
        vhost: str,
        name: str,
        *,
        arguments: dict,
        hooks: QueueHooks | None = None,
        store: Any = None,
        store_id: int | None = None,
    ) -> None:
        super().__init__(vhost, name, durable=True, arguments=arguments, hooks=hooks)
        self.hooks = _StreamHooks(self, hooks or QueueHooks())
        self.store = store if store_id is not None else None
        self.store_id = store_id
        self.retention = Retention.from_arguments(arguments)
        self.limited = self.dedup is not None  # no length limit: only duplicates are refused
        self.max_length_bytes = None  # retention, not a limit on publishing
        self.cursors: dict[Consumer, Cursor] = {}
        self.tracked: dict[str, int] = {}  # consumer tag -> next offset, for tracking consumers
        self.log: StreamLog = (
            StoreLog(self.store, store_id, self.now_ms, 0, self._on_commit)
            if self.store is not None and store_id is not None
            else MemoryLog(self.now_ms)
        )
        if isinstance(self.log, StoreLog):
            self.log.on_read = self._on_read
        if self.store is not None:
            self.store.hold_as_runs(store_id)  # what the store keeps per stream must not grow with its length
        self.ready = _Length(self)  # type: ignore[assignment]
        self._segments: list[list[int]] = [[0, 0, 0]]  # [first offset, bytes, newest timestamp ms]
        self._dispatch_due = False
        self._saved_active = [-1, 0, 0]  # the open segment as last saved
        self._active_save_bytes = max(self.retention.segment_bytes // ACTIVE_SAVE_FRACTION, 1)

    # -- recovery ------------------------------------------------------------------------------------------

    def adopt(self, held: Iterable[int], values: dict[str, bytes]) -> None:
        """Recovery: the records the store kept for this stream (their offsets in order, gone through once),
        and what it saved with them."""
        assert self.store is not None and self.store_id is not None
        self.log.close()
        self.log = StoreLog.recover(self.store, self.store_id, self.now_ms, held, values, self._on_commit)
        self.log.on_read = self._on_read
        self.store.hold_as_runs(self.store_id)
        self._segments = _decode_segments(values, self.log.first, self.log.end, self.now_ms())
        for key, value in values.items():
            if key.startswith(TRACKED_PREFIX):
                self.tracked[key[len(TRACKED_PREFIX) :]] = int(value)

    # -- publishing ----------------------------------------------------------------------------------------

    def push(self, msg: Message, redelivered: bool = False, enqueued_ms: int | None = None) -> None:
        self.log.append(msg)
        self._count_in(msg.size + len(msg.header), msg.timestamp_ms or self.now_ms(), self.log.end)
        if self.store is None:
            self.dispatch()  # in memory: readable at once

    def push_many(self, msgs: list[Message]) -> None:
        """Messages published together (a confirmed group): their offsets are given in one step."""
        offset = self.log.append_many(msgs)
        for msg in msgs:
            offset += 1
            self._count_in(msg.size + len(msg.header), msg.timestamp_ms or self.now_ms(), offset)
        if self.store is None:
            self.dispatch()

    def push_stored(self, first: int, sizes: list[int], timestamp_ms: int) -> None:
        """Records the broker stored together for this stream (Broker.store_stream_group: consecutive store
        offsets from `first`, of sizes[i] bytes of header and body, stamped timestamp_ms) take their offsets
        and are counted into the open segment, as push_many does for messages."""
        assert isinstance(self.log, StoreLog)
        offset = self.log.extend(first, len(sizes))
        for size in sizes:
            offset += 1
            self._count_in(size, timestamp_ms, offset)

    def _count_in(self, size: int, timestamp_ms: int, after: int) -> None:
        """The open segment grows by a record of `size` bytes of header and body, appended at timestamp_ms
        (`after`: the offset past it); a full one is sealed."""
        segment = self._segments[-1]
        segment[1] += size
        segment[2] = timestamp_ms
        if segment[1] >= self.retention.segment_bytes:
            self._roll(after)

    def _on_commit(self) -> None:
        """The store made more records durable: consumers at the tail get them (once per loop turn). The open
        segment's size is saved with a commit once it has grown by 1/ACTIVE_SAVE_FRACTION of a segment since
        it was last saved, not with every commit: each save is a catalogue transaction of its own (its own
        fsync), which was half the cost of a confirmed publish. After a crash the open segment is counted at
        most that much short, so it fills (and retention drops old segments) that much later, never sooner;
        its newest timestamp is set again by the message that fills it. A clean stop saves it exactly."""
        first, size, _newest = self._segments[-1]
        if first != self._saved_active[0] or size - self._saved_active[1] >= self._active_save_bytes:
            self.save_active()
        if self.cursors and not self._schedule_dispatch():
            self.dispatch()

    def _on_read(self) -> None:
        """The store's read worker read records a consumer was waiting for (StoreLog.read_raw)."""
        if self.cursors and not self.deleted and not self._schedule_dispatch():
            self.dispatch()

    def save_active(self) -> None:
        """Save the open segment's first offset, size and newest timestamp with the next commit."""
        segment = self._segments[-1]
        if self.store is not None and segment != self._saved_active:
            self._saved_active = list(segment)
            self.store.set_queue_value(self.store_id, "stream.active", _ACTIVE.pack(*segment))

    def _schedule_dispatch(self) -> bool:
        """Dispatch on the loop's next turn (once however often asked); False without a loop to do it."""
        if self._dispatch_due:
            return True
        self._dispatch_due = True
        if self.hooks.schedule(0, self._dispatch_soon) is None:
            self._dispatch_due = False  # no scheduler (tests): the caller dispatches itself
            return False
        return True

    def _dispatch_soon(self) -> None:
        self._dispatch_due = False
        if not self.deleted:
            self.dispatch()

    def would_overflow(self) -> bool:
        return False

    # -- retention -----------------------------------------------------------------------------------------

    def _roll(self, start: int) -> None:
        self._segments.append([start, 0, 0])
        self.apply_retention(self.now_ms())
        self._save_segments()

    def apply_retention(self, now: int) -> None:
        """Drop whole sealed segments, oldest first, while the stream is over x-max-length-bytes or the
        segment's newest message is older than x-max-age (checked when a segment fills, as RabbitMQ does)."""
        keep = self.retention
        segments = self._segments
        dropped = False
        while len(segments) > 1:
            total = sum(s[1] for s in segments)
            if keep.max_bytes is not None and total > keep.max_bytes:
                pass
            elif keep.max_age_ms is not None and segments[0][2] < now - keep.max_age_ms:
                pass
            else:
                break
            segments.pop(0)
            dropped = True
        if dropped:
            self.log.drop_before(segments[0][0])
            for cursor in self.cursors.values():
                cursor.next = max(cursor.next, self.log.first)

    def _save_segments(self) -> None:
        if self.store is None:
            return
        sealed = array("q", [v for s in self._segments[:-1] for v in s])
        self.store.set_queue_value(self.store_id, "stream.segments", sealed.tobytes())
        self.save_active()

    # -- consuming -----------------------------------------------------------------------------------------

    def subscribe(
        self,
        consumer: Consumer,
        spec: OffsetSpec,
        filter_values: frozenset[str] | None,
        match_unfiltered: bool,
        tracking: bool,
    ) -> None:
        start = self.tracked.get(consumer.tag) if tracking else None
        if start is None:
            start = self.start_offset(spec)
        chunk = consumer.arguments.get(CHUNK_ARG) or 0
        layout = chunk_layout(consumer.arguments)
        start = max(start, self.log.first)
        cursor = Cursor(consumer, start, filter_values, match_unfiltered, tracking, chunk, layout, self._track)
        self.cursors[consumer] = cursor
        self.add_consumer(consumer)

    def start_offset(self, spec: OffsetSpec) -> int:
        log = self.log
        if spec.kind == FIRST:
            return log.first
        if spec.kind == LAST:
            return max(log.committed - 1, log.first)
        if spec.kind == NEXT:
            return log.end
        if spec.kind == "time":
            return log.offset_at_time(spec.value)
        return max(spec.value, log.first)  # an offset past the end: the consumer waits until it exists

    def remove_consumer(self, consumer: Consumer) -> None:
        cursor = self.cursors.pop(consumer, None)
        if cursor is not None and cursor.tracking:
            self._track(cursor)
        super().remove_consumer(consumer)

    def dispatch(self) -> None:
        for cursor in list(self.cursors.values()):
            try:
                self._feed(cursor)
            except ReadPending:
                pass  # the cursor stays where it is: _on_read dispatches again once the records are in

    def _feed(self, cursor: Cursor) -> None:
        """Deliver from the cursor while its consumer has room, at most FEED_BATCHES reads and about
        FEED_BYTES per call (a filter that matches little, or a replay of big messages, must not hold the
        loop for a whole replay: the rest goes on next turn)."""
        if cursor.chunk:
            feed_chunks(self, cursor)
            return
        consumer = cursor.consumer
        log = self.log
        for start, end in self.steps(cursor, FEED_BATCHES):
            room = consumer.prefetch - consumer.unacked if consumer.prefetch else READ_BATCH
            limit = min(max(room, 1), READ_BATCH, end - start)
            if cursor.filter is None:  # the batched replay, straight from the records' bytes
                cursor.next, sent = stream_replay.replay(self, cursor, start, limit, FEED_BYTES - cursor.sent)
                cursor.sent += sent
                continue
            cursor.next, batch = log.read_span(start, limit)  # past records that failed their checks on disk too
            entries: list[Entry] = []
            for offset, record in batch:
                if cursor.wants(record):
                    cursor.outstanding.add(offset, offset + 1)
                    entries.append(StreamEntry(StreamDelivery(record, offset, cursor.with_time), offset, cursor))
            if entries:
                consumer.channel.deliver_many(consumer, self, entries)
                cursor.sent += sum(entry.msg.size for entry in entries)
            if cursor.filter is not None and not cursor.outstanding and cursor.tracking:
                self._track(cursor)  # skipping filtered messages moves a tracked consumer along too

    def steps(self, cursor: Cursor, budget: int, span: int | None = None) -> Iterator[tuple[int, int]]:
        """[start, end) of each step its consumer has room for, from the cursor to the committed end (at most
        `span` offsets a step), at most `budget` steps and about FEED_BYTES per call: the rest goes on at the
        loop's next turn. The caller moves cursor.next past what each step took and adds the bytes it sent
        to cursor.sent."""
        consumer, log = cursor.consumer, self.log
        left = budget
        cursor.sent = 0
        while consumer.can_accept():
            start = max(cursor.next, log.first)
            cursor.next = start
            end = log.committed if span is None else min(log.committed, start + span)
            if start >= end:
                return
            if left == 0 or cursor.sent >= FEED_BYTES:
                if self._schedule_dispatch():
                    return
                left = budget
                cursor.sent = 0
            left -= 1
            yield start, end

    def _track(self, cursor: Cursor) -> None:
        tag = cursor.consumer.tag
        offset = cursor.resume_offset()
        if self.tracked.get(tag) == offset:
            return
        self.tracked[tag] = offset
        if self.store is not None:
            self.store.set_queue_value(self.store_id, TRACKED_PREFIX + tag, str(offset).encode())

    def requeue(self, entries: Any) -> None:
        """A stream never redelivers: what a closed channel had unacked is read again only by a consumer
        that asks for that offset (a tracking consumer resumes at its oldest unacked delivery)."""

    def purge(self) -> list[Entry]:
        return []  # queue.purge is refused before this; a deleted stream's records go with its store state

    def get(self) -> Entry | None:
        raise errors.not_implemented(f"basic.get not supported by stream queues {self._describe()}")

    def _describe(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost}'"

    def close(self) -> None:
        super().close()
        self.log.close()
        self.cursors.clear()

    # -- what management shows -----------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset published at or after a time (ms since the epoch); the end if none (what
        `GET /api/queues/{vhost}/{name}/offset?timestamp=` answers)."""
        return max(self.log.offset_at_time(timestamp_ms), self.log.first)

    def stream_stats(self) -> dict[str, Any]:
        """Per-stream figures for the HTTP API: offsets, first timestamp, size, segments, and each tracked
        or attached consumer's offset and lag (messages between its next offset and the end)."""
        log = self.log
        consumers: dict[str, dict[str, Any]] = {
            tag: {"offset": offset, "lag": max(log.end - offset, 0), "tracked": True, "attached": False}
            for tag, offset in self.tracked.items()
        }
        for cursor in self.cursors.values():
            tag = cursor.consumer.tag
            offset = cursor.resume_offset()
            consumers[tag] = {
                "offset": offset,
                "lag": max(log.end - offset, 0),
                "tracked": cursor.tracking,
                "attached": True,
            }
        return {
            "first_offset": log.first,
            "last_offset": log.end - 1 if log.end > log.first else None,
            "committed_offset": log.committed - 1 if log.committed > log.first else None,
            "first_timestamp": log.first_timestamp(),
            "messages": log.end - log.first,
            "size_bytes": sum(s[1] for s in self._segments),
            "segments": len(self._segments),
            "consumers": consumers,
        }


class _Length:
    """What callers of Queue.ready see of a stream: its length (declare-ok's message_count, the
    if-empty check; RabbitMQ counts a stream's messages there), truthy while it holds any."""

    __slots__ = ("stream",)

    def __init__(self, stream: StreamQueue) -> None:
        self.stream = stream

    def __len__(self) -> int:
        log = self.stream.log
        return log.end - log.first

    def __iter__(self) -> Any:
        return iter(())  # nothing waits to be delivered the way a queue's messages do


class StreamDelivery(LogDelivery):
    """A record as one consumer gets it: its headers carry its offset. Built without scanning properties
    (a stream applies no TTL, priority or routing to what it delivers): the per-message path's cost, which
    only filtered consumers take now (the others get streams/replay.py's batches). What is the same for
    every delivery is read from the class (these never change after delivery)."""

    __slots__ = ()

    def __init__(self, record: MessageRecord, offset: int, with_time: bool = False) -> None:  # noqa: D107
        self.exchange = record.exchange
        self.routing_key = record.routing_key
        self.route = route_of(record.exchange, record.routing_key)
        stamp = record.timestamp_ms if with_time else None
        self.header = header = with_offset_header(record.properties, offset, stamp)
        self.body = record.body
        self.size = len(record.body)
        self.flags = _FLAGS.unpack_from(header, 12)[0]
        self.timestamp_ms = record.timestamp_ms


_FLAGS = struct.Struct(">H")
_U32 = struct.Struct(">I")
_OFFSET_VALUE = struct.Struct(">q")
_TIMESTAMP_VALUE = struct.Struct(">q")


def with_offset_header(header: bytes, offset: int, timestamp_ms: int | None = None) -> bytes:
    """The content header with x-stream-offset (and, when asked for, x-stream-timestamp) appended to its
    headers table, every other byte as stored. Spliced in place, without splitting the properties: this is
    done for every replayed message, and a stream's messages mostly carry their own ids (no two headers
    alike, nothing to cache). A header without a table gains one (its flag set, after content encoding)."""
    fields = _OFFSET_FIELD + _OFFSET_VALUE.pack(offset)
    if timestamp_ms is not None:
        fields += _TIMESTAMP_FIELD + _TIMESTAMP_VALUE.pack(timestamp_ms)
    flags = header[12] << 8 | header[13]
    at = _table_position(header, flags)
    if not flags & FLAG_HEADERS:
        flags |= FLAG_HEADERS
        return b"".join((header[:12], _FLAGS.pack(flags), header[14:at], _U32.pack(len(fields)), fields, header[at:]))
    (size,) = _U32.unpack_from(header, at)
    stop = at + 4 + size
    if stop > len(header):
        raise errors.syntax_error("malformed content header properties").with_method(60, 40)
    return b"".join((header[:at], _U32.pack(size + len(fields)), header[at + 4 : stop], fields, header[stop:]))


def _table_position(header: bytes, flags: int) -> int:
    """Where the headers table is (or would be): after content type and encoding."""
    o = 14
    if flags & FLAG_CONTENT_TYPE:
        o += 1 + header[o]
    if flags & FLAG_CONTENT_ENCODING:
        o += 1 + header[o]
    return o


def _decode_segments(values: dict[str, bytes], first: int, end: int, now: int) -> list[list[int]]:
    """The segment table saved with the stream, clipped to what the log holds; without one (or after a
    crash made it disagree) the whole log is one open segment, counted from now on."""
    raw = array("q")
    raw.frombytes(values.get("stream.segments", b""))
    segments = [list(raw[i : i + 3]) for i in range(0, len(raw) - 2, 3)]
    if "stream.active" in values:
        segments.append(list(_ACTIVE.unpack(values["stream.active"])))
    segments = [s for s in segments if first <= s[0] <= end]
    if not segments or segments[0][0] != first:
        segments.insert(0, [first, 0, now])
    return segments
