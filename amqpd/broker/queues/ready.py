"""The ready messages of a queue: FIFO, or by priority when the queue has x-max-priority.

Both keep requeued messages at their original position (RabbitMQ's classic-queue behaviour),
which is why entries carry a sequence number.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqpd.broker.entry import Entry


class FifoReady(deque):  # type: ignore[type-arg]
    def restore(self, back: list[Entry]) -> None:
        """Put entries (sorted by seq) back where they were."""
        if not self or back[-1].seq < self[0].seq:
            self.extendleft(reversed(back))
            return
        merged = sorted([*self, *back], key=lambda e: e.seq)
        self.clear()
        self.extend(merged)


class PriorityReady:
    """One FIFO per priority level; the highest non-empty level goes first."""

    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        self._levels: list[FifoReady] = [FifoReady() for _ in range(max_priority + 1)]
        self._len = 0

    def _level(self, entry: Entry) -> FifoReady:
        p = entry.msg.priority or 0
        return self._levels[min(p, self.max_priority)]

    def append(self, entry: Entry) -> None:
        self._level(entry).append(entry)
        self._len += 1

    def popleft(self) -> Entry:
        for level in reversed(self._levels):
            if level:
                self._len -= 1
                return level.popleft()
        raise IndexError("pop from an empty queue")

    def __getitem__(self, index: int) -> Entry:
        if index != 0:
            raise IndexError("only the head is addressable")
        for level in reversed(self._levels):
            if level:
                return level[0]
        raise IndexError("empty queue")

    def restore(self, back: list[Entry]) -> None:
        by_level: dict[int, list[Entry]] = {}
        for e in back:
            by_level.setdefault(id(self._level(e)), []).append(e)
        for level in self._levels:
            entries = by_level.get(id(level))
            if entries:
                level.restore(entries)
        self._len += len(back)

    def clear(self) -> None:
        for level in self._levels:
            level.clear()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Entry]:
        for level in reversed(self._levels):
            yield from level
