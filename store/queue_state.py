"""Per-queue message state kept by the store: which offsets a queue still needs, and which of those were
delivered (for exact redelivered flags after a crash). Saved in checkpoints as runs of offsets."""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, MutableMapping


class QueueState:
    __slots__ = ("live", "delivered")

    def __init__(self) -> None:
        # Insertion-ordered dict used as an ordered set: offsets arrive in increasing order, so iteration
        # yields the queue's original order without sorting, and removal is O(1). A log's queue (a stream)
        # holds an OffsetRuns instead (MessageStore.hold_as_runs).
        self.live: MutableMapping[int, None] = {}
        self.delivered: set[int] = set()


class OffsetRuns(MutableMapping[int, None]):
    """The same ordered set of offsets as runs [start, stop) of consecutive offsets: memory by run, not by
    offset. For a queue that holds a log (every message it is given, in order, released oldest first by
    retention), where a dict costs ~80 bytes per message for as long as the log is. Appending the next
    offset and releasing the oldest are O(1); anything else is correct, at list-insert cost."""

    __slots__ = ("_starts", "_stops", "_count")

    def __init__(self, offsets: Iterable[int] = ()) -> None:
        self._starts: list[int] = []
        self._stops: list[int] = []
        self._count = 0
        for offset in sorted(offsets):
            self[offset] = None

    @classmethod
    def from_encoded(cls, data: bytes) -> OffsetRuns:
        """The runs a checkpoint saved (encode_runs), without going through every offset: recovery of a long
        log must not build anything per message."""
        runs = array("Q")
        runs.frombytes(data)
        if sys.byteorder == "big":
            runs.byteswap()
        made = cls()
        made._starts, made._stops = list(runs[0::2]), list(runs[1::2])
        made._count = sum(stop - start for start, stop in zip(made._starts, made._stops, strict=True))
        return made

    def runs(self) -> list[tuple[int, int]]:
        """The runs [start, stop), oldest first (a copy: the set may change while they are used)."""
        return list(zip(self._starts, self._stops, strict=True))

    def first_at_or_after(self, offset: int) -> int | None:
        i = bisect_right(self._stops, offset)  # the first run ending after offset
        if i == len(self._stops):
            return None
        return max(self._starts[i], offset)

    def between(self, lo: int, hi: int) -> Iterator[int]:
        """The held offsets in [lo, hi), in order."""
        for start, stop in self.runs():
            if stop > lo and start < hi:
                yield from range(max(start, lo), min(stop, hi))

    def _run_of(self, offset: int) -> int:
        """The index of the run holding `offset`, or -1."""
        i = bisect_right(self._starts, offset) - 1
        return i if i >= 0 and offset < self._stops[i] else -1

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and self._run_of(offset) >= 0

    def __getitem__(self, offset: int) -> None:
        if self._run_of(offset) < 0:
            raise KeyError(offset)

    def __setitem__(self, offset: int, _value: None) -> None:
        starts, stops = self._starts, self._stops
        if stops and offset == stops[-1]:  # the next offset of the log: the usual case
            stops[-1] += 1
        elif not stops or offset > stops[-1]:
            starts.append(offset)
            stops.append(offset + 1)
        elif self._run_of(offset) >= 0:
            return
        else:
            self._insert(offset)
        self._count += 1

    def append_range(self, start: int, stop: int) -> None:
        """Add [start, stop), past every offset held (the next records of the log)."""
        if start >= stop:
            return
        starts, stops = self._starts, self._stops
        if stops and start < stops[-1]:
            raise ValueError(f"offsets from {start} are not past the last one held ({stops[-1] - 1})")
        if stops and start == stops[-1]:
            stops[-1] = stop
        else:
            starts.append(start)
            stops.append(stop)
        self._count += stop - start

    def _insert(self, offset: int) -> None:
        starts, stops = self._starts, self._stops
        i = bisect_right(starts, offset)  # runs[:i] start at or before offset (and end before it)
        joins_left = i > 0 and stops[i - 1] == offset
        joins_right = i < len(starts) and starts[i] == offset + 1
        if joins_left and joins_right:
            stops[i - 1] = stops[i]
            del starts[i], stops[i]
        elif joins_left:
            stops[i - 1] += 1
        elif joins_right:
            starts[i] -= 1
        else:
            starts.insert(i, offset)
            stops.insert(i, offset + 1)

    def __delitem__(self, offset: int) -> None:
        i = self._run_of(offset)
        if i < 0:
            raise KeyError(offset)
        starts, stops = self._starts, self._stops
        if starts[i] == offset and stops[i] == offset + 1:
            del starts[i], stops[i]
        elif starts[i] == offset:
            starts[i] += 1
        elif stops[i] == offset + 1:
            stops[i] -= 1
        else:  # split the run around it
            starts.insert(i + 1, offset + 1)
            stops.insert(i + 1, stops[i])
            stops[i] = offset
        self._count -= 1

    def __iter__(self) -> Iterator[int]:
        for start, stop in zip(list(self._starts), list(self._stops), strict=True):
            yield from range(start, stop)

    def __len__(self) -> int:
        return self._count

    def encoded(self) -> bytes:
        """encode_runs(self), without going through every offset (a checkpoint of a long log)."""
        runs = array("Q", [v for run in zip(self._starts, self._stops, strict=True) for v in run])
        if sys.byteorder == "big":
            runs.byteswap()
        return runs.tobytes()


def encode_runs(offsets: Iterable[int]) -> bytes:
    """Increasing offsets -> little-endian u64 pairs [first, last + 1) of consecutive runs."""
    runs = array("Q")
    start = prev = -2
    for offset in offsets:
        if offset != prev + 1:
            if start >= 0:
                runs.extend((start, prev + 1))
            start = offset
        prev = offset
    if start >= 0:
        runs.extend((start, prev + 1))
    if sys.byteorder == "big":
        runs.byteswap()  # the format is little-endian everywhere
    return runs.tobytes()


def decode_runs(data: bytes) -> Iterator[int]:
    runs = array("Q")
    runs.frombytes(data)
    if sys.byteorder == "big":
        runs.byteswap()
    for i in range(0, len(runs), 2):
        yield from range(runs[i], runs[i + 1])


def hold_range(live: MutableMapping[int, None], start: int, stop: int) -> None:
    """Add offsets [start, stop), all past every offset `live` holds (appended records), in one step."""
    if isinstance(live, OffsetRuns):
        live.append_range(start, stop)
    else:
        live.update(dict.fromkeys(range(start, stop)))
