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
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from store.frame import HEADER_SIZE

MAX_RUNS = 1024


def _first(run: tuple[int, int, int]) -> int:
    return run[0]


class CheckedRuns:
    """One segment's checked runs, in file order."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # file position of each run's first frame
        self._runs: list[tuple[int, int, int]] = []  # (first offset, frames, payload length)

    def __len__(self) -> int:
        return len(self._runs)

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

    def unchecked(self, offset: int) -> int | None:
        """How many records from `offset` on (which is in no run) come before the next run's first one; None
        when no run comes after it."""
        i = bisect_right(self._runs, offset, key=_first)
        return self._runs[i][0] - offset if i < len(self._runs) else None

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

    def drop_from(self, position: int) -> None:
        """Forget what lies at or past `position` (the segment was cut back there)."""
        i = bisect_left(self._starts, position)  # the runs that start before it
        del self._starts[i:], self._runs[i:]
        if i:
            first, count, length = self._runs[-1]
            kept = min(count, (position - self._starts[-1]) // (HEADER_SIZE + length))
            if kept:
                self._runs[-1] = (first, kept, length)
            else:
                del self._starts[-1], self._runs[-1]
