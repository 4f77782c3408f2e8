"""A cursor's delivered, not yet acked offsets, kept as runs (a stream's ack removes nothing: it returns
prefetch credit and moves offset tracking along; cursor.py's StreamRun is a batch of them in the channel's
unacked table)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

Offsets = range | list[int]


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


__all__ = ["OffsetSet", "Offsets"]
