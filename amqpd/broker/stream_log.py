"""Where a stream keeps its messages, addressed by dense offsets (0, 1, 2 … with no gaps: a reader knows
exactly what it missed). Two backends behind one small interface:

- `StoreLog`: the durable store. The stream holds its records in the store like a queue does (so the store
  keeps their segments), and maps its dense offsets to the store's offsets as runs of consecutive offsets
  (one run while nothing else is published in between). A record is readable once it is on disk.
- `MemoryLog`: the messages themselves, for a broker without a store (--in-memory).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from amqpd.broker.message import Message
from store import MessageRecord
from store.queue_reader import FIRST_KEY, FIRST_POSITION
from store.record_codec import encode_record


def now_ms() -> int:
    return int(time.time() * 1000)


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
    def read(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        """Up to `limit` committed records from `start` (or the first kept), with their offsets."""
        ...

    def read_payloads(self, start: int, limit: int) -> list[bytes | None]:
        """The records of committed offsets [start, start + limit) as stored (store/FORMAT.md's Record), one
        per offset, None for one that failed its checks (the caller clips start and limit)."""
        ...

    def offset_at_time(self, timestamp_ms: int) -> int: ...
    def first_timestamp(self) -> int | None: ...
    def drop_before(self, offset: int) -> None: ...
    def close(self) -> None: ...


class MemoryLog:
    def __init__(self) -> None:
        self.first = 0
        self.end = 0
        self._messages: deque[MessageRecord] = deque()

    @property
    def committed(self) -> int:
        return self.end

    def append(self, msg: Message) -> int:
        if msg.timestamp_ms == 0:
            msg.timestamp_ms = now_ms()
        body = msg.body if msg.body is not None else b""
        self._messages.append(MessageRecord(msg.exchange, msg.routing_key, msg.header, body, msg.timestamp_ms))
        self.end += 1
        return self.end - 1

    def read(self, start: int, limit: int) -> list[tuple[int, MessageRecord]]:
        start = max(start, self.first)
        stop = min(self.end, start + limit)
        return [(o, self._messages[o - self.first]) for o in range(start, stop)]

    def read_payloads(self, start: int, limit: int) -> list[bytes | None]:
        return [encode_record(0, record, []) for _, record in self.read(start, limit)]

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


class OffsetRuns:
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


class StoreLog:
    def __init__(self, store: Any, queue_id: int, first: int = 0, on_commit: Callable[[], None] | None = None) -> None:
        self._store = store
        self._queue_id = queue_id
        self._runs = OffsetRuns(first)
        # Records read lately, by offset: consumers replaying near each other read each record once.
        self._recent: dict[int, MessageRecord | None] = {}
        self._on_commit = on_commit
        if on_commit is not None:
            store.add_commit_listener(on_commit)

    @classmethod
    def recover(
        cls, store: Any, queue_id: int, held: list[int], values: dict[str, bytes], on_commit: Callable[[], None]
    ) -> StoreLog:
        """The stream's records as the store recovered them (its held offsets, in order), numbered from the
        first offset saved when retention last dropped some. Offsets below that one's store offset were
        dropped just before a crash took the acks back: they are acked again."""
        first, first_store = FIRST_POSITION.unpack(values[FIRST_KEY]) if FIRST_KEY in values else (0, 0)
        stale = [o for o in held if o < first_store]
        if stale:
            store.purge(queue_id, stale)
        log = cls(store, queue_id, first, on_commit)
        for offset in held[len(stale) :]:
            log._runs.append(offset)
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
                msg.timestamp_ms = now_ms()
            body = msg.body if msg.body is not None else b""
            record = MessageRecord(msg.exchange, msg.routing_key, msg.header, body, msg.timestamp_ms)
            offset = self._store.append(record, [self._queue_id])
        return self._runs.append(offset)

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

    def read_payloads(self, start: int, limit: int) -> list[bytes | None]:
        return self._store.read_payloads(self._runs.store_offsets(start, start + limit))  # type: ignore[no-any-return]

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
        if self._on_commit is not None:
            self._store.remove_commit_listener(self._on_commit)
            self._on_commit = None
