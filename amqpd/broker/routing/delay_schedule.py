"""The messages waiting in one delayed exchange, in due order: a binary heap, O(log n) per message and
nothing per clock tick, whatever the number waiting or the length of the delays.

An item is what the caller keeps for a message: the message itself (transient, or no store), or its store
offset (the store holds the rest until it is due). Messages due at the same millisecond keep publish order.
"""

from __future__ import annotations

import heapq
from typing import Any


class DelaySchedule:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = 0

    def push(self, due_ms: int, item: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due_ms, self._seq, item))

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[int, Any]]:
        """Up to `limit` (due_ms, item) pairs due at or before now, earliest first."""
        heap = self._heap
        out: list[tuple[int, Any]] = []
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            due, _, item = heapq.heappop(heap)
            out.append((due, item))
        return out

    def clear(self) -> list[Any]:
        items = [item for _, _, item in self._heap]
        self._heap.clear()
        return items

    def __len__(self) -> int:
        return len(self._heap)
