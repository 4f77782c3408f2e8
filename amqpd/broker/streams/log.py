"""Where a stream keeps its messages, addressed by dense offsets (0, 1, 2 … with no gaps: a reader knows
exactly what it missed). Two backends behind one small interface:

- `StoreLog`: the durable store. The stream holds its records in the store like a queue does (so the store
  keeps their segments), and maps its dense offsets to the store's offsets as runs of consecutive offsets
  (one run while nothing else is published in between). A record is readable once it is on disk.
- `MemoryLog`: the messages themselves, for a broker without a store (--in-memory).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from amqpd.broker.message import Message
from store import FIRST_KEY, FIRST_POSITION, MessageRecord, encode_record


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
        """Up to `limit` committed records from `start` (or the first kept), with their offsets."""
        ...

    def read_raw(self, start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
        """read's records as their stored bytes (store/record_codec.py's layout), undecoded, for offsets from
        the first returned on (start, or the first kept); None for a record that failed its checks on disk.
        Maybe fewer than `limit` though more are committed. `cached=False`: these only, not through the
        read cache (a few records among others read_frames gives)."""
        ...

    def read_frames(self, start: int, limit: int, budget: int) -> tuple[list[tuple[int, int]], bytes, int]:
        """Committed records from `start` (already clipped to the first kept), at most `limit` and about
        `budget` bytes, as their store frames' bytes (headers and all) as far as a read has checked them
        before (store/checked_runs.py): ([(frames, payload length) of each run], the bytes, 0); ([], b"",
        how many from `start` on are not in a checked run) when the first is not (read_raw them)."""
        ...

    def offset_at_time(self, timestamp_ms: int) -> int: ...
    def first_timestamp(self) -> int | None: ...
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

    def read_raw(self, start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
        start = max(start, self.first)
        return start, [encode_record(0, record, []) for _, record in self.read(start, limit)]

    def read_frames(self, start: int, limit: int, budget: int) -> tuple[list[tuple[int, int]], bytes, int]:
        return [], b"", limit  # no frames: the messages themselves

    def offset_at_time(self, timestamp_ms: int) -> int:
        for i, msg in enumerate(self._messages):
            if msg.timestamp_ms >= timestamp_ms:
                return self.first + i
        return self.end

    def first_timestamp(self) -> int | None:
        return self._messages[0].timestamp_ms if self._messages else None

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


RECENT_RECORDS = 4096
# The batched replay reads whole aligned chunks of a stream's offsets (below the committed end) and keeps the
# last few: consumers replaying near each other read each record from disk once. Bounded in bytes whatever
# the stream's length (RAW_CACHE_BYTES); a chunk read takes at most RAW_CHUNK_BYTES, so records averaging
# over 1 KiB are read as asked for, never a chunk ahead (a consumer with prefetch 1 must not pull 1,024 big
# messages). 1,024 records per read rather than 256: each store read has a fixed cost (finding the segment, the
# index jump, the first frames' own checks), which larger reads spread thinner (bench.micro_stream measures it).
RAW_CHUNK = 1024
RAW_CHUNKS_KEPT = 16  # 16,384 records, as 64 chunks of 256 were: more kept raised the bench's RSS, not its rates
RAW_CHUNK_BYTES = 1 << 20
RAW_CACHE_BYTES = 16 << 20


def payload_bytes(payloads: list[bytes | None]) -> int:
    """The bytes of the records read (None: a damaged one), without a Python step per record when none is
    (nor a `None in` pass, which costs about what the sum does)."""
    try:
        return sum(map(len, payloads))  # type: ignore[arg-type]
    except TypeError:  # len(None)
        return sum(len(p) for p in payloads if p is not None)


def _mean_size(payloads: list[bytes | None]) -> int:
    return payload_bytes(payloads) // max(len(payloads), 1)


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
        # Records read lately, by offset: consumers replaying near each other read each record once.
        self._recent: dict[int, MessageRecord | None] = {}
        self._chunks: dict[int, tuple[list[bytes | None], int]] = {}  # raw reads by chunk, with their bytes
        self._chunk_bytes = 0
        self._record_bytes = RAW_CHUNK_BYTES  # a raw record's size lately; unknown: read only what is asked
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
        start = max(start, self.first)
        stop = min(self.committed, start + limit)
        if start >= stop:
            return []
        recent = self._recent
        try:  # the stretch another consumer just read
            records = [recent[dense] for dense in range(start, stop)]
        except KeyError:
            records = self._store.read_many(self._runs.store_offsets(start, stop))
            if len(recent) + len(records) > RECENT_RECORDS:
                recent.clear()
            recent.update(zip(range(start, stop), records, strict=True))
        # A record damaged on disk is skipped; the others keep their numbers.
        pairs = zip(range(start, stop), records, strict=True)
        return [(dense, record) for dense, record in pairs if record is not None]

    def read_raw(self, start: int, limit: int, cached: bool = True) -> tuple[int, list[bytes | None]]:
        start = max(start, self.first)
        committed = self.committed
        stop = min(committed, start + limit)
        if start >= stop:
            return start, []
        chunk = start // RAW_CHUNK
        if (
            not cached
            or (chunk + 1) * RAW_CHUNK > committed  # a partial chunk (at the tail)
            or chunk * RAW_CHUNK < self.first
            or self._record_bytes * RAW_CHUNK > RAW_CHUNK_BYTES  # big records: no more than asked for
        ):
            payloads = self._store.read_payloads(self._runs.store_offsets(start, stop))
            self._record_bytes = _mean_size(payloads)
            return start, payloads
        payloads = self._chunk(chunk)
        base = chunk * RAW_CHUNK
        if stop <= base + RAW_CHUNK:
            return start, payloads[start - base : stop - base]
        if (chunk + 2) * RAW_CHUNK > committed:
            return start, payloads[start - base :]  # to the chunk's end: the caller comes back for the rest
        return start, payloads[start - base :] + self._chunk(chunk + 1)[: stop - base - RAW_CHUNK]

    def read_frames(self, start: int, limit: int, budget: int) -> tuple[list[tuple[int, int]], bytes, int]:
        first_store, count = self._runs.consecutive(start, min(self.committed, start + limit))
        if count <= 0:
            return [], b"", 1
        return self._store.checked_frames(first_store, count, budget)  # type: ignore[no-any-return]

    def _chunk(self, chunk: int) -> list[bytes | None]:
        """The raw records of one whole aligned chunk of offsets, read once for every consumer that passes
        (they read the same records at nearby times, each in its own steps)."""
        chunks = self._chunks
        found = chunks.get(chunk)
        if found is None:
            base = chunk * RAW_CHUNK
            found = self._store.read_payloads(self._runs.store_offsets(base, base + RAW_CHUNK))
            size = payload_bytes(found)
            self._record_bytes = size // RAW_CHUNK
            chunks[chunk] = (found, size)
            self._chunk_bytes += size
            while len(chunks) > RAW_CHUNKS_KEPT or (self._chunk_bytes > RAW_CACHE_BYTES and len(chunks) > 1):
                oldest = next(iter(chunks))  # the one read longest ago
                self._chunk_bytes -= chunks.pop(oldest)[1]
            return found
        return found[0]

    def offset_at_time(self, timestamp_ms: int) -> int:
        found = self._store.find_offset_by_time(timestamp_ms)
        if found is None:
            return self.end
        return max(self._runs.dense_at_or_after(found), self.first)

    def first_timestamp(self) -> int | None:
        first = self._runs.first_store_offset()
        if first is None or self.committed <= self.first:
            return None
        try:
            return int(self._store.read(first).timestamp_ms)
        except KeyError:
            return None

    def drop_before(self, offset: int) -> None:
        self._recent.clear()
        self._chunks.clear()
        self._chunk_bytes = 0
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
        self._recent.clear()
        self._chunks.clear()
        self._chunk_bytes = 0
        if self._on_commit is not None:
            self._store.remove_commit_listener(self._on_commit)
            self._on_commit = None
