"""A stream consumer's batched deliveries as one run of the channel's unacked table, and a cursor's unacked
offsets as runs.

A stream's ack removes nothing: it returns prefetch credit and moves offset tracking along. So the batched
replay (streams/replay.py) records a batch as one StreamRun (consecutive delivery tags, the offsets they
carry) in the channel's Outstanding table (unacked.py), instead of an entry per message; the table takes,
splits and restores it as it does a queue's runs, and counts it the same.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import TYPE_CHECKING

from amqpd.broker.delivery.unacked import Run

if TYPE_CHECKING:
    from amqpd.broker.delivery.consumer import Consumer
    from amqpd.broker.entry import Entry
    from amqpd.broker.queues.queue import Queue
    from amqpd.broker.streams.stream import Cursor, StreamQueue

Offsets = range | list[int]


class StreamRun(Run[Offsets]):
    """Deliveries of a stream to one consumer: items[i] is the offset that went out with tag first + i,
    read for `cursor`."""

    __slots__ = ("cursor",)
    queue: StreamQueue
    consumer: Consumer

    def __init__(
        self, first: int, offsets: Offsets, queue: StreamQueue, consumer: Consumer, cursor: Cursor, at: float
    ) -> None:
        super().__init__(first, offsets, queue, consumer, at)
        self.cursor = cursor

    def split_off(self, upto: int) -> StreamRun:
        k = upto - self.first + 1
        offsets = self.items
        taken = StreamRun(self.first, offsets[:k], self.queue, self.consumer, self.cursor, self.at)
        self.items = offsets[k:]  # a range is sliced without copying its offsets
        self.first = upto + 1
        return taken

    def split_last(self) -> StreamRun:
        offsets = self.items
        self.items = offsets[:-1]
        return StreamRun(self.first + len(offsets) - 1, offsets[-1:], self.queue, self.consumer, self.cursor, self.at)

    def acked(self) -> None:
        self.queue.run_acked(self.cursor, self.items)

    def give_back(self, requeue: bool, into: dict[Queue, list[Entry]]) -> None:
        """A stream never redelivers: the offsets stay outstanding in the cursor, so a tracking consumer
        resumes at the oldest of them."""


class OffsetSet:
    """A cursor's delivered, not yet acked offsets, as runs [start, stop) in offset order. A cursor delivers
    in offset order, so offsets are added at the end; acks take them out anywhere."""

    __slots__ = ("starts", "stops")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.starts)

    def first(self) -> int | None:
        return self.starts[0] if self.starts else None

    def add(self, start: int, stop: int) -> None:
        if self.stops and self.stops[-1] == start:
            self.stops[-1] = stop
        else:
            self.starts.append(start)
            self.stops.append(stop)

    def add_offsets(self, offsets: Offsets) -> None:
        if isinstance(offsets, range):
            if offsets:
                self.add(offsets.start, offsets.stop)
            return
        for offset in offsets:
            self.add(offset, offset + 1)

    def discard_offsets(self, offsets: Offsets) -> None:
        if isinstance(offsets, range):
            if offsets:
                self.discard(offsets.start, offsets.stop)
            return
        for start, stop in _runs_of(offsets):
            self.discard(start, stop)

    def discard(self, start: int, stop: int) -> None:
        """Take [start, stop) out (whatever part of it is here)."""
        starts, stops = self.starts, self.stops
        i = bisect_right(stops, start)  # the first run that ends after start
        j = bisect_left(starts, stop)  # past the last run that begins before stop
        if i >= j:
            return
        left = (starts[i], start) if starts[i] < start else None
        right = (stop, stops[j - 1]) if stops[j - 1] > stop else None
        keep = [r for r in (left, right) if r is not None]
        starts[i:j] = [r[0] for r in keep]
        stops[i:j] = [r[1] for r in keep]


def _runs_of(offsets: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs


__all__ = ["OffsetSet", "Offsets", "StreamRun"]
