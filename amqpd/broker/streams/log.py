"""Where a stream keeps its messages, addressed by dense offsets (0, 1, 2 … with no gaps: a reader knows
exactly what it missed). Two backends behind one small interface:

- `StoreLog`: the durable store. The stream holds its records in the store like a queue does (so the store
  keeps their segments), and maps its dense offsets to the store's offsets as runs of consecutive offsets
  (one run while nothing else is published in between). A record is readable once it is on disk.
- `MemoryLog`: the messages themselves, for a broker without a store (--in-memory).
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from amqpd.broker.message import Message
from amqpd.broker.store_reads import read_in_worker
from store import FIRST_KEY, FIRST_POSITION, MessageRecord, decode_record, encode_record

log = logging.getLogger("amqpd.streams")


class ReadPending(Exception):
    """The records asked for are being read by the store's read worker: `future` resolves when they are in,
    and the log's on_read is called then. Nothing was read or changed: ask again then."""

    def __init__(self, future: asyncio.Future[Any]) -> None:
        super().__init__("records being read")
        self.future = future


class StreamLog(Protocol):
    @property
    def first(self) -> int:
        """The oldest dense offset kept."""
        ...

    @property
    def end(self) -> int:
        """The next dense offset to be given."""
        ...

    @property
    def committed(self) -> int:
        """Messages below this offset are durable: readers see them, never one a crash could take back."""
        ...

    def append(self, msg: Message) -> int: ...
    def append_many(self, msgs: list[Message]) -> int:
        """Append in order; the first one's offset (the others follow it)."""
        ...

    def read(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        """Up to `limit` committed records from `start` (or the first kept), with their offsets. A log on
        disk raises ReadPending while they are being read (read_raw)."""
        ...

    def read_span(self, start: int, limit: int) -> tuple[int, list[tuple[int, MessageRecord]]]:
        """read(), and the offset to go on from (past damaged records too; maybe fewer than `limit`)."""
        ...

    async def read_async(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        """read(), waiting for the records to be read."""
        ...

    def read_raw(self, start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
        """read's records as their stored bytes (store/record_codec.py's layout), undecoded, for offsets from
        the first returned on (start, or the first kept); None for a record that failed its checks on disk.
        Maybe fewer than `limit` though more are committed. `cached=False`: these only, not through the
        read cache (a few records among others read_frames gives)."""
        ...

    def read_frames(self, start: int, limit: int, budget: int) -> tuple[array[int], bytes, int]:
        """Committed records from `start` (already clipped to the first kept), at most `limit` and about
        `budget` bytes, as their store frames' bytes (headers and all) as far as a read has checked them
        before (store/checked_runs.py): (frames, payload length of each run, one after the other; the bytes;
        0); (empty, b"", how many from `start` on are not in a checked run) when the first is not (read_raw
        them)."""
        ...

    def read_checked(self, start: int, limit: int, budget: int) -> tuple[list[int], bytes]:
        """Committed records from `start` (already clipped to the first kept), at most `limit` and about
        `budget` bytes, each checked as it is read: (each one's length, their stored bytes joined); ([], b"")
        when the first cannot be read so (damage, not in a segment file: read_raw them, which skips what
        fails its checks)."""
        ...

    def offset_at_time(self, timestamp_ms: int, done: Callable[[int], None]) -> None:
        """done(the first offset at or after the time, or the end): at once when that needs no read, else on
        the loop once the store's read worker found it (the time index, then the records it points to)."""
        ...

    def first_timestamp(self) -> int | None:
        """The first kept message's time, as far as it is known without a read (None: empty, or not read
        yet: read_first_timestamp)."""
        ...

    def read_first_timestamp(self, done: Callable[[int | None], None]) -> None:
        """done(the first kept message's time, None when empty): at once when known, else once read."""
        ...

    def drop_before(self, offset: int) -> None: ...
    def close(self) -> None: ...


class MemoryLog:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock  # the broker's wall clock in ms (injected by tests), for records with no time yet
        self.first = 0
        self.end = 0
        self._messages: deque[MessageRecord] = deque()

    @property
    def committed(self) -> int:
        return self.end

    def append(self, msg: Message) -> int:
        if msg.timestamp_ms == 0:
            msg.timestamp_ms = self.clock()
        body = msg.body if msg.body is not None else b""
        self._messages.append(MessageRecord(msg.exchange, msg.routing_key, msg.header, body, msg.timestamp_ms))
        self.end += 1
        return self.end - 1

    def append_many(self, msgs: list[Message]) -> int:
        first = self.end
        for msg in msgs:
            self.append(msg)
        return first

    def read(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        start = max(start, self.first)
        stop = min(self.end, start + limit)
        return [(o, self._messages[o - self.first]) for o in range(start, stop)]

    def read_span(self, start: int, limit: int) -> tuple[int, list[tuple[int, MessageRecord]]]:
        pairs = self.read(start, limit)
        return (pairs[-1][0] + 1 if pairs else max(start, self.first)), pairs

    async def read_async(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        return self.read(start, limit)

    def read_raw(self, start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
        start = max(start, self.first)
        return start, [encode_record(0, record, []) for _, record in self.read(start, limit)]

    def read_frames(self, start: int, limit: int, budget: int) -> tuple[array[int], bytes, int]:
        return array("I"), b"", limit  # no frames: the messages themselves

    def read_checked(self, start: int, limit: int, budget: int) -> tuple[list[int], bytes]:
        return [], b""  # nothing to check: read_raw

    def offset_at_time(self, timestamp_ms: int, done: Callable[[int], None]) -> None:
        for i, msg in enumerate(self._messages):
            if msg.timestamp_ms >= timestamp_ms:
                done(self.first + i)
                return
        done(self.end)

    def first_timestamp(self) -> int | None:
        return self._messages[0].timestamp_ms if self._messages else None

    def read_first_timestamp(self, done: Callable[[int | None], None]) -> None:
        done(self.first_timestamp())

    def drop_before(self, offset: int) -> None:
        while self.first < min(offset, self.end):
            self._messages.popleft()
            self.first += 1

    def close(self) -> None:
        self._messages.clear()


class OffsetMap:
    """Dense offsets [first, end) ↔ increasing store offsets, as runs of consecutive store offsets."""

    def __init__(self, first: int) -> None:
        self.first = self.end = first
        self._dense: list[int] = []  # each run's first dense offset
        self._store: list[int] = []  # each run's first store offset
        self._length: list[int] = []

    def append(self, store_offset: int) -> int:
        if self._store and self._store[-1] + self._length[-1] == store_offset:
            self._length[-1] += 1
        else:
            self._dense.append(self.end)
            self._store.append(store_offset)
            self._length.append(1)
        self.end += 1
        return self.end - 1

    def extend(self, store_offset: int, count: int) -> int:
        """Append `count` consecutive store offsets from `store_offset` in one step; the first's dense offset."""
        first = self.end
        if self._store and self._store[-1] + self._length[-1] == store_offset:
            self._length[-1] += count
        else:
            self._dense.append(first)
            self._store.append(store_offset)
            self._length.append(count)
        self.end += count
        return first

    def store_offsets(self, start: int, stop: int) -> list[int]:
        out: list[int] = []
        i = bisect_right(self._dense, start) - 1
        while start < stop and 0 <= i < len(self._dense):
            run_end = self._dense[i] + self._length[i]
            upto = min(stop, run_end)
            base = self._store[i] - self._dense[i]
            out.extend(range(base + start, base + upto))
            start = upto
            i += 1
        return out

    def consecutive(self, start: int, stop: int) -> tuple[int, int]:
        """The store offset of dense offset `start` and how many from it on (before `stop`) are consecutive in
        the store; (0, 0) when `start` is not kept."""
        i = bisect_right(self._dense, start) - 1
        if i < 0 or start >= self._dense[i] + self._length[i]:
            return 0, 0
        return self._store[i] + start - self._dense[i], min(stop, self._dense[i] + self._length[i]) - start

    def dense_at_or_after(self, store_offset: int) -> int:
        """The dense offset of the first record at or after a store offset (end if none)."""
        i = bisect_right(self._store, store_offset) - 1
        if i >= 0 and store_offset < self._store[i] + self._length[i]:
            return self._dense[i] + store_offset - self._store[i]
        return self._dense[i + 1] if i + 1 < len(self._dense) else self.end

    def drop_before(self, offset: int) -> list[int]:
        """Forget dense offsets below `offset`; their store offsets."""
        offset = min(offset, self.end)
        gone = self.store_offsets(self.first, offset)
        while self._dense and self._dense[0] + self._length[0] <= offset:
            del self._dense[0], self._store[0], self._length[0]
        if self._dense and self._dense[0] < offset:
            cut = offset - self._dense[0]
            self._dense[0] += cut
            self._store[0] += cut
            self._length[0] -= cut
        self.first = max(self.first, offset)
        return gone

    def first_store_offset(self) -> int | None:
        return self._store[0] if self._store else None


# A stream's records are read by the store's read worker (the event loop never waits on the disk), a window
# of up to RAW_CHUNK records and about RAW_CHUNK_BYTES at a time, the next one asked for while a reader is
# still in the one before; the last few windows are kept, bounded in bytes whatever the stream's length
# (RAW_CACHE_BYTES): consumers replaying near each other read each record from disk once. A window of records
# averaging over 1 KiB stops at RAW_CHUNK_BYTES (a consumer with prefetch 1 must not pull 1,024 big messages).
# 1,024 records per read rather than 256: each store read has a fixed cost (finding the segment, the index
# jump, the first frames' own checks), which larger reads spread thinner (bench.micro_stream measures it).
RAW_CHUNK = 1024
RAW_CHUNK_BYTES = 1 << 20
# The bound counts what a cached record costs beyond its payload (its bytes object, its dict slot and key),
# which for small records is as much again (counted as payload only, the cache held far more than its bound
# and showed in a replay's RSS per stored message, bench ST). A few windows are enough for consumers
# replaying near each other; one far behind the others reads its own.
RAW_CACHE_BYTES = 4 << 20
RECORD_OVERHEAD = 100  # bytes a cached record costs beyond its payload
FRAMES_CACHE_BYTES = 16 << 20  # read_frames answers kept: whole chunks, which their readers ask for again
FRAMES_KEPT = 64  # read_frames answers kept (bounded in bytes by FRAMES_CACHE_BYTES too)
Frames = tuple["array[int]", bytes, int]


def payload_bytes(payloads: list[bytes | None]) -> int:
    """The bytes of the records read (None: a damaged one), without a Python step per record when none is
    (nor a `None in` pass, which costs about what the sum does)."""
    try:
        return sum(map(len, payloads))  # type: ignore[arg-type]
    except TypeError:  # len(None)
        return sum(len(p) for p in payloads if p is not None)


def _read_window(store: Any, offsets: list[int], record_bytes: int) -> list[bytes | None]:
    """In the store's read worker: the payloads at these store offsets, from the first on, about
    RAW_CHUNK_BYTES of them (in steps sized by the records' mean size: a window of big records is not read
    far past it; at least one record)."""
    out: list[bytes | None] = []
    size = 0
    while len(out) < len(offsets) and size < RAW_CHUNK_BYTES:
        mean = size // len(out) if out else record_bytes
        step = max(1, (RAW_CHUNK_BYTES - size) // max(mean, 1))
        part = store.read_payloads(offsets[len(out) : len(out) + step])
        out += part
        size += payload_bytes(part)
    return out


class StoreLog:
    def __init__(
        self,
        store: Any,
        queue_id: int,
        clock: Callable[[], int],
        first: int = 0,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock  # the broker's wall clock in ms (injected by tests), for records with no time yet
        self._store = store
        self._queue_id = queue_id
        self._runs = OffsetMap(first)
        # Records the store's read worker read, by dense offset, in windows (oldest first, evicted past
        # RAW_CACHE_BYTES): consumers replaying near each other read each record from disk once.
        self._fetched: dict[int, bytes | None] = {}
        self._windows: deque[tuple[int, int, int]] = deque()  # (start, stop, bytes) of each window read
        self._fetched_bytes = 0
        self._pending: dict[tuple[int, ...], ReadPending] = {}  # windows (start, stop) and frames being read
        # read_frames' answers, by (first store offset, count, budget): a chunk's read steps are asked again
        # after a read they waited for, and must find what they found before.
        self._frames: dict[tuple[int, int, int], Frames] = {}
        self._frames_bytes = 0
        # read_checked's answers, by its read_frames key and -1, each until the chunk that asked takes it
        self._checked: dict[tuple[int, int, int, int], tuple[list[int], bytes]] = {}
        self._checked_bytes = 0
        self._record_bytes = RAW_CHUNK_BYTES  # a raw record's size lately; unknown: read only what is asked
        self._closed = False
        self._first_time: tuple[int, int | None] | None = None  # (first kept store offset, its time) as read
        self._reading_first = False
        self.on_read: Callable[[], None] | None = None  # a window came in: readers waiting on it go on
        self._on_commit = on_commit
        if on_commit is not None:
            store.add_commit_listener(on_commit)

    @classmethod
    def recover(
        cls,
        store: Any,
        queue_id: int,
        clock: Callable[[], int],
        held: Iterable[int],
        values: dict[str, bytes],
        on_commit: Callable[[], None],
    ) -> StoreLog:
        """The stream's records as the store recovered them (its held offsets, in order), numbered from the
        first offset saved when retention last dropped some. Offsets below that one's store offset were
        dropped just before a crash took the acks back: they are acked again."""
        first, first_store = FIRST_POSITION.unpack(values[FIRST_KEY]) if FIRST_KEY in values else (0, 0)
        log = cls(store, queue_id, clock, first, on_commit)
        stale = []
        for offset in held:  # in increasing order: the stale ones come first
            if offset < first_store:
                stale.append(offset)
            else:
                log._runs.append(offset)
        if stale:
            store.purge(queue_id, stale)
        return log

    @property
    def first(self) -> int:
        return self._runs.first

    @property
    def end(self) -> int:
        return self._runs.end

    @property
    def committed(self) -> int:
        return self._runs.dense_at_or_after(self._store.durable_end())

    def append(self, msg: Message) -> int:
        offset = msg.store_offset
        if offset is None:  # the broker stores what it routes to a stream first; any other path, here
            if msg.timestamp_ms == 0:
                msg.timestamp_ms = self.clock()
            body = msg.body if msg.body is not None else b""
            record = MessageRecord(msg.exchange, msg.routing_key, msg.header, body, msg.timestamp_ms)
            offset = self._store.append(record, [self._queue_id])
        return self._runs.append(offset)

    def extend(self, first: int, count: int) -> int:
        """Records the broker stored together at store offsets first .. first + count - 1: their dense offsets,
        in one step; the first one's."""
        return self._runs.extend(first, count)

    def append_many(self, msgs: list[Message]) -> int:
        """Messages the broker stored together (consecutive store offsets) take their dense offsets in one step."""
        first = msgs[0].store_offset
        if first is None or msgs[-1].store_offset != first + len(msgs) - 1:
            dense = self.end
            for msg in msgs:
                self.append(msg)
            return dense
        return self._runs.extend(first, len(msgs))

    def read(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        """Raises ReadPending when the records are not read yet (see read_raw)."""
        return self.read_span(start, limit)[1]

    def read_span(self, start: int, limit: int) -> tuple[int, list[tuple[int, MessageRecord]]]:
        start, payloads = self.read_raw(start, limit)
        # A record damaged on disk is skipped; the others keep their numbers.
        pairs = [(dense, decode_record(p)[2]) for dense, p in enumerate(payloads, start) if p is not None]
        return start + len(payloads), pairs

    async def read_async(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        """read(), waiting for the store's read worker as long as it takes (the HTTP API's peek)."""
        while True:
            try:
                return self.read(start, limit)
            except ReadPending as pending:
                await pending.future

    def read_raw(self, start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
        """From what the store's read worker read ahead (the event loop never reads the disk): the records
        there from `start` on; ReadPending when `start` is not there yet, after asking the worker for a
        window from it (on_read is called when it is in: the caller tries again then)."""
        start = max(start, self.first)
        stop = min(self.committed, start + limit)
        if start >= stop:
            return start, []
        fetched = self._fetched
        if start not in fetched:
            raise self._fetch(start)
        payloads: list[bytes | None] = []
        at = start
        while at < stop and at in fetched:
            payloads.append(fetched[at])
            at += 1
        self._read_on(at)
        return start, payloads

    def read_frames(self, start: int, limit: int, budget: int) -> tuple[array[int], bytes, int]:
        """As the store's read worker found them (ReadPending until it has: ask again then)."""
        first_store, count = self._runs.consecutive(start, min(self.committed, start + limit))
        if count <= 0:
            return array("I"), b"", 1
        key = (first_store, count, budget)
        found = self._frames.get(key)
        if found is not None:
            return found
        pending = self._pending.get(key)
        if pending is None:
            future = self._store.in_reader(self._store.checked_frames, first_store, count, budget)
            pending = self._pending[key] = ReadPending(future)
            future.add_done_callback(lambda f: self._frames_in(key, f))
        raise pending

    def read_checked(self, start: int, limit: int, budget: int) -> tuple[list[int], bytes]:
        """As the store's read worker read and checked them (ReadPending until it has: ask again then). An
        answer is taken once: the chunk that asked keeps it."""
        first_store, count = self._runs.consecutive(start, min(self.committed, start + limit))
        if count <= 0:
            return [], b""
        key = (first_store, count, budget, -1)  # -1: not a read_frames key in _pending
        found = self._checked.pop(key, None)
        if found is not None:
            self._checked_bytes -= len(found[1])
            # Taken: the chunk goes on past them. Not before: it asks read_frames again first, and must find
            # them unchecked (else the worker reads them again as frames, and this answer is wasted).
            self._forget_unchecked()
            return found
        pending = self._pending.get(key)
        if pending is None:
            future = self._store.in_reader(self._store.checked_records, first_store, count, budget)
            pending = self._pending[key] = ReadPending(future)
            future.add_done_callback(lambda f: self._checked_in(key, f))
        raise pending

    def _checked_in(self, key: tuple[int, int, int, int], future: asyncio.Future[tuple[list[int], bytes]]) -> None:
        del self._pending[key]
        if self._closed or future.cancelled():
            return
        error = future.exception()
        if error is not None:  # the next dispatch asks again
            log.warning("stream read of records from store offset %d failed: %s", key[0], error)
            return
        checked = self._checked
        found = checked[key] = future.result()
        self._checked_bytes += len(found[1])
        # answers nobody came back for (the consumer went away) go, oldest first
        while len(checked) > 1 and (self._checked_bytes > RAW_CACHE_BYTES or len(checked) > FRAMES_KEPT):
            self._checked_bytes -= len(checked.pop(next(iter(checked)))[1])
        if self.on_read is not None:
            self.on_read()

    def _frames_in(self, key: tuple[int, int, int], future: asyncio.Future[Frames]) -> None:
        del self._pending[key]
        if self._closed or future.cancelled():
            return
        error = future.exception()
        if error is not None:  # the next dispatch asks again
            log.warning("stream read of frames from store offset %d failed: %s", key[0], error)
            return
        frames = self._frames
        found = frames[key] = future.result()
        self._frames_bytes += len(found[1])
        while len(frames) > 1 and (self._frames_bytes > FRAMES_CACHE_BYTES or len(frames) > FRAMES_KEPT):
            self._frames_bytes -= len(frames.pop(next(iter(frames)))[1])
        if self.on_read is not None:
            self.on_read()

    def _forget_unchecked(self) -> None:
        """Records read are checked from now on: what read_frames found unchecked before may not be now."""
        for key in [key for key, found in self._frames.items() if not found[0]]:
            del self._frames[key]

    def _read_on(self, at: int) -> None:
        """Reading from `at`: the next window is asked for once less than half a window is left ahead."""
        probe = at + RAW_CHUNK // 2
        if probe >= self.committed or probe in self._fetched or self._pending_at(at) is not None:
            return
        fetched = self._fetched
        while at in fetched:
            at += 1
        if self._pending_at(at) is None:
            self._fetch(at)

    def _pending_at(self, at: int) -> ReadPending | None:
        for key, pending in self._pending.items():
            if len(key) == 2 and key[0] <= at < key[1]:
                return pending
        return None

    def _fetch(self, start: int) -> ReadPending:
        """Ask the store's read worker for a window of records from `start` (dense), unless one is coming."""
        found = self._pending_at(start)
        if found is not None:
            return found
        stop = min(self.committed, start + RAW_CHUNK)
        offsets = self._runs.store_offsets(start, stop)
        future = self._store.in_reader(_read_window, self._store, offsets, self._record_bytes)
        pending = self._pending[(start, stop)] = ReadPending(future)
        future.add_done_callback(lambda f: self._fetched_in(start, stop, f))
        return pending

    def _fetched_in(self, start: int, stop: int, future: asyncio.Future[list[bytes | None]]) -> None:
        del self._pending[(start, stop)]
        if self._closed or future.cancelled():
            return
        self._forget_unchecked()
        error = future.exception()
        if error is not None:  # the next dispatch asks again
            log.warning("stream read of offsets %d..%d failed: %s", start, stop - 1, error)
            return
        payloads = future.result()
        first = max(start, self.first)
        fetched = self._fetched
        for dense, payload in enumerate(payloads[first - start :], first):
            fetched[dense] = payload
        size = payload_bytes(payloads)
        self._record_bytes = size // max(len(payloads), 1)
        held = size + RECORD_OVERHEAD * len(payloads)
        self._windows.append((first, start + len(payloads), held))
        self._fetched_bytes += held
        while len(self._windows) > 2 and self._fetched_bytes > RAW_CACHE_BYTES:
            old_start, old_stop, old_size = self._windows.popleft()
            self._fetched_bytes -= old_size
            for dense in range(old_start, old_stop):
                fetched.pop(dense, None)
        if self.on_read is not None:
            self.on_read()

    def _forget_fetched(self) -> None:
        self._frames.clear()
        self._frames_bytes = 0
        self._fetched.clear()
        self._windows.clear()
        self._fetched_bytes = 0

    def offset_at_time(self, timestamp_ms: int, done: Callable[[int], None]) -> None:
        def found(store_offset: int | None) -> None:
            done(self.end if store_offset is None else max(self._runs.dense_at_or_after(store_offset), self.first))

        store = self._store
        what = f"stream queue {self._queue_id}: finding the offset at time {timestamp_ms}"
        read_in_worker(store, what, found, store.find_offset_by_time, timestamp_ms, wanted=self._open)

    def first_timestamp(self) -> int | None:
        """As last read: a stream whose first message changed since (retention, a restart) shows the time
        read before, or None, while the read this asks for is under way (the HTTP API's queue list)."""
        first = self._first_store()
        if first is None:
            return None
        known = self._first_time
        if (known is None or known[0] != first) and not self._reading_first:
            self.read_first_timestamp(lambda _time: None)
        return known[1] if known is not None else None

    def read_first_timestamp(self, done: Callable[[int | None], None]) -> None:
        first = self._first_store()
        known = self._first_time
        if first is None or (known is not None and known[0] == first):
            done(None if first is None or known is None else known[1])
            return

        def read(records: list[MessageRecord | None]) -> None:
            self._reading_first = False
            record = records[0]
            if self._first_store() == first:
                self._first_time = (first, None if record is None else int(record.timestamp_ms))
            done(None if record is None else int(record.timestamp_ms))

        self._reading_first = True
        store = self._store
        what = f"stream queue {self._queue_id}: reading its first message's time"
        read_in_worker(store, what, read, store.read_many, [first], wanted=self._open)

    def _first_store(self) -> int | None:
        """The first kept record's store offset, None while nothing is committed."""
        first = self._runs.first_store_offset()
        return None if first is None or self.committed <= self.first else first

    def _open(self) -> bool:
        return not self._closed

    def drop_before(self, offset: int) -> None:
        self._forget_fetched()
        gone = self._runs.drop_before(offset)
        if not gone:
            return
        # The new first offset is saved with the acks' batch; recover() re-acks what a crash took back.
        first_store = self._runs.first_store_offset()
        if first_store is None:  # nothing left: whatever comes next is past the last record dropped
            first_store = gone[-1] + 1
        self._store.set_queue_value(self._queue_id, FIRST_KEY, FIRST_POSITION.pack(self.first, first_store))
        self._store.purge(self._queue_id, gone)

    def close(self) -> None:
        # A closed stream may live on a while in its consumers' unacked runs: not its read caches.
        self._closed = True
        self._forget_fetched()
        if self._on_commit is not None:
            self._store.remove_commit_listener(self._on_commit)
            self._on_commit = None
