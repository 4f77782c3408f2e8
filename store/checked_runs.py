"""Runs of frames of one size whose checks a read has already passed, per segment, so that reading them
again cuts the payloads out without hashing each one again.

A bulk reader (a stream's chunk deliveries, a replay) spent a large share of the broker's time per record on the
checksums (an xxh3 of every payload and an xxh32 of every frame header; docs/performance.md). A segment is
append-only and never rewritten in place (a failed write cuts it back, and SegmentIndex.drop_from drops the runs
past the cut), so a run of frames that passed once holds the same bytes on the next read: a second reader of the
same records (another consumer, a re-run Spark job) pays for cutting them only. The first read of every record is
checked in full, as before; damage that appears on disk after a record was read once is found by the first read
after a restart (the runs are kept in memory only), not by later reads (as a payload kept in the stream's read cache
is not checked again either).

A run is (file position of its first frame, its first record's offset, frame count, payload length);
consecutive runs of one length are merged, so a stream of fixed-size messages keeps a handful of runs per
segment. At most MAX_RUNS are kept per segment (mixed sizes make many short runs): past that, reads check
as they always did.

Frames of many sizes (JSON events) make no long runs: those a read checked one after the other are kept as
stretches instead, (file position of the first frame, its record's offset, each payload's length), joined
when one continues another; at most MAX_STRETCH_RECORDS records' lengths are kept in all (4 bytes each), in
the whole process: a replay of many segments must not keep every record's length.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import wraps
from threading import Lock, RLock
from typing import Concatenate, ParamSpec, TypeVar

from store.frame import HEADER_SIZE

MAX_RUNS = 1024
MAX_STRETCH_RECORDS = 1 << 22
_stretched_in_all = [0]  # records in the stretches of every segment's CheckedRuns
_counting = Lock()  # segments' stretches are added in the read worker, dropped wherever a segment goes


P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[Concatenate[CheckedRuns, P], R]) -> Callable[Concatenate[CheckedRuns, P], R]:
    """One call at a time per segment: the read worker reads and adds runs while the event loop adds what
    the writer wrote and drops what a failed batch cut back (a run read half-changed could point a read
    at the wrong bytes)."""

    @wraps(method)
    def call(self: CheckedRuns, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return call


def _first(run: tuple[int, object] | tuple[int, int, int]) -> int:
    return run[0]


class CheckedRuns:
    """One segment's checked runs, in file order."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # file position of each run's first frame
        self._runs: list[tuple[int, int, int]] = []  # (first offset, frames, payload length)
        # stretches of frames of many sizes: file position of the first, its offset, each payload's length
        self._stretch_starts: list[int] = []
        self._stretches: list[tuple[int, _Stretch]] = []  # (first offset, stretch), in file order
        self._stretched = 0  # records in stretches
        self._lock = RLock()

    def __len__(self) -> int:
        return len(self._runs)

    @_locked
    def find(self, position: int, offset: int) -> tuple[int, int] | None:
        """(payload length, frames left in the run) when the frame at `position` is record `offset` in a
        checked run, else None."""
        i = bisect_right(self._starts, position) - 1
        if i < 0:
            return None
        first, count, length = self._runs[i]
        step, past = divmod(position - self._starts[i], HEADER_SIZE + length)
        if past or step >= count or first + step != offset:
            return None
        return length, count - step

    @_locked
    def locate(self, offset: int) -> tuple[int, int, int] | None:
        """(file position of record `offset`'s frame, its payload length, frames left in its run from it on)
        when the record lies in a checked run, else None. Runs are in file order, which in a segment is
        offset order."""
        i = bisect_right(self._runs, offset, key=_first) - 1
        if i < 0:
            return None
        first, count, length = self._runs[i]
        if offset >= first + count:
            return None
        step = offset - first
        return self._starts[i] + step * (HEADER_SIZE + length), length, count - step

    @_locked
    def unchecked(self, offset: int) -> int | None:
        """How many records from `offset` on (which is in no run) come before the next run's first one; None
        when no run comes after it."""
        i = bisect_right(self._runs, offset, key=_first)
        j = bisect_right(self._stretches, offset, key=_first)
        nexts = [self._runs[i][0]] if i < len(self._runs) else []
        if j < len(self._stretches):
            nexts.append(self._stretches[j][0])
        return min(nexts) - offset if nexts else None

    @_locked
    def stretch(self, offset: int, most: int = MAX_STRETCH_RECORDS) -> tuple[int, array[int]] | None:
        """(file position of record `offset`'s frame, the payload lengths of it and of the frames after it in
        its stretch, at most `most` in all) when it lies in a stretch, else None."""
        i = bisect_right(self._stretches, offset, key=_first) - 1
        if i < 0:
            return None
        found = self._stretches[i][1]
        step = offset - found.first
        if step >= len(found.lengths):
            return None
        return found.position(step), found.lengths[step : step + most]

    @_locked
    def add_stretch(self, position: int, first: int, lengths: array[int], join_only: bool = False) -> None:
        """Frames from `position` on, for records first, first + 1, …, with these payload lengths, passed
        their checks one after the other. Joined to the stretch they continue, if any; else a stretch of
        their own unless `join_only` (a frame checked on its own); dropped past MAX_STRETCH_RECORDS (reads
        then check them as they always did)."""
        if _stretched_in_all[0] + len(lengths) > MAX_STRETCH_RECORDS:
            return
        i = bisect_right(self._stretch_starts, position)
        if i:
            prev = self._stretches[i - 1][1]
            if prev.end > position:
                return  # already known (read again through the general walk)
            if prev.end == position and prev.first + len(prev.lengths) == first:
                prev.extend(lengths)
                self._count(len(lengths))
                return
        end = position + HEADER_SIZE * len(lengths) + sum(lengths)
        if join_only or (i < len(self._stretch_starts) and self._stretch_starts[i] < end):
            return  # (or it would overlap the next one: never, as frames are checked in file order)
        self._stretch_starts.insert(i, position)
        self._stretches.insert(i, (first, _Stretch(position, first, lengths)))
        self._count(len(lengths))

    @_locked
    def add_written(self, position: int, first: int, lengths: array[int]) -> None:
        """Frames this process wrote and fsynced, from `position` on, for records first, first + 1, …: a run
        when they are all of one size, else a stretch (the bytes are the ones it laid out itself)."""
        if min(lengths) == max(lengths):
            self.add(position, first, len(lengths), lengths[0])
        else:
            self.add_stretch(position, first, lengths)

    @_locked
    def add(self, position: int, first: int, count: int, length: int, join_only: bool = False) -> None:
        """Frames of `length` bytes for records first … first + count - 1, from `position` on, passed their
        checks. Joined to the run just before it when they continue it; else a run of their own, unless
        `join_only` (a frame checked on its own: a stream of mixed sizes would fill the table with them)."""
        i = bisect_right(self._starts, position)
        if i:
            prev_first, prev_count, prev_length = self._runs[i - 1]
            if prev_length == length and self._starts[i - 1] + prev_count * (HEADER_SIZE + length) == position:
                if prev_first + prev_count == first:
                    self._runs[i - 1] = (prev_first, prev_count + count, length)
                    return
        if not join_only and len(self._runs) < MAX_RUNS:
            self._starts.insert(i, position)
            self._runs.insert(i, (first, count, length))

    @_locked
    def drop_from(self, position: int) -> None:
        """Forget what lies at or past `position` (the segment was cut back there)."""
        self._drop_stretches_from(position)
        i = bisect_left(self._starts, position)  # the runs that start before it
        del self._starts[i:], self._runs[i:]
        if i:
            first, count, length = self._runs[-1]
            kept = min(count, (position - self._starts[-1]) // (HEADER_SIZE + length))
            if kept:
                self._runs[-1] = (first, kept, length)
            else:
                del self._starts[-1], self._runs[-1]

    def _count(self, records: int) -> None:
        self._stretched += records
        with _counting:
            _stretched_in_all[0] += records

    def __del__(self) -> None:
        with _counting:  # its segment went (deleted, or its store closed)
            _stretched_in_all[0] -= self._stretched

    def _drop_stretches_from(self, position: int) -> None:
        i = bisect_left(self._stretch_starts, position)
        for _, gone in self._stretches[i:]:
            self._count(-len(gone.lengths))
        del self._stretch_starts[i:], self._stretches[i:]
        if i:
            last = self._stretches[-1][1]
            self._count(-last.cut(position))
            if not last.lengths:
                del self._stretch_starts[-1], self._stretches[-1]


MARK_EVERY = 1024  # a stretch keeps the file position of every MARK_EVERY-th frame: finding one sums fewer


class _Stretch:
    """Frames of many sizes checked one after the other: where the first is, its record's offset, each
    payload's length, and where every MARK_EVERY-th frame is (so that a frame's position is found without
    summing the lengths from the first)."""

    __slots__ = ("first", "lengths", "marks", "end")

    def __init__(self, position: int, first: int, lengths: array[int]) -> None:
        self.first = first
        self.lengths: array[int] = array("I")
        self.marks: list[int] = []
        self.end = position  # where the frame after the last one starts
        self.extend(lengths)

    def extend(self, lengths: array[int]) -> None:
        for at in range(-len(self.lengths) % MARK_EVERY, len(lengths), MARK_EVERY):
            self.marks.append(self.end + HEADER_SIZE * at + sum(lengths[:at]))
        self.end += HEADER_SIZE * len(lengths) + sum(lengths)
        self.lengths += lengths

    def position(self, step: int) -> int:
        """Where frame `step` (from the first, 0) starts."""
        mark = step // MARK_EVERY
        base = mark * MARK_EVERY
        return self.marks[mark] + HEADER_SIZE * (step - base) + sum(self.lengths[base:step])

    def cut(self, position: int) -> int:
        """Keep only the frames that end at or before `position`; how many went."""
        low, high = 0, len(self.lengths)  # kept: the most frames whose last ends at or before position
        while low < high:
            mid = (low + high + 1) // 2
            if self.position(mid - 1) + HEADER_SIZE + self.lengths[mid - 1] <= position:
                low = mid
            else:
                high = mid - 1
        gone = len(self.lengths) - low
        if gone:
            self.end = self.position(low)
            del self.lengths[low:]
            del self.marks[(low + MARK_EVERY - 1) // MARK_EVERY :]
        return gone
