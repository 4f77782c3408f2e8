"""A stream consumer's unacked deliveries as runs of delivery tags, and a cursor's unacked offsets as runs.

A stream's ack removes nothing: it returns prefetch credit and moves offset tracking along. So the batched
replay (stream_replay.py) records a batch as one TagRun — consecutive delivery tags, the offsets they carry
— in the channel's StreamUnacked, beside the per-delivery Outstanding table, instead of an entry per message.
An ack splits runs at its tag; the counts (the channel's, the consumer's, the queue's) change by whole runs,
here as Outstanding changes them one by one. The channel asks StreamUnacked only once it holds runs
(`Channel.stream_unacked` stays None on channels that never replayed a stream in batches).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from amqpd.broker.channel import Channel
    from amqpd.broker.consumer import Consumer
    from amqpd.broker.stream import Cursor, StreamQueue
    from amqpd.broker.unacked import Unacked

Offsets = range | list[int]
Settled: TypeAlias = "Unacked | TagRun"  # what Channel._collect takes out: a queue's range, or a stream's tag run


class TagRun:
    """Deliveries with consecutive tags from first_tag to one consumer of a stream; offsets[i] went out with
    tag first_tag + i."""

    __slots__ = ("first_tag", "offsets", "queue", "consumer", "cursor", "at")

    def __init__(
        self, first_tag: int, offsets: Offsets, queue: StreamQueue, consumer: Consumer, cursor: Cursor, at: float
    ) -> None:
        self.first_tag = first_tag
        self.offsets = offsets
        self.queue = queue
        self.consumer = consumer
        self.cursor = cursor
        self.at = at

    @property
    def end_tag(self) -> int:
        return self.first_tag + len(self.offsets)

    def part(self, start_tag: int, stop_tag: int) -> TagRun:
        """The deliveries with tags [start_tag, stop_tag) of this run."""
        first = self.first_tag
        offsets = self.offsets[start_tag - first : stop_tag - first]
        return TagRun(start_tag, offsets, self.queue, self.consumer, self.cursor, self.at)


class StreamUnacked:
    """A channel's tag runs, in tag order (tags only grow, so a new run goes at the end)."""

    __slots__ = ("channel", "runs", "count")

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.runs: list[TagRun] = []
        self.count = 0

    def add(self, run: TagRun) -> None:
        self.runs.append(run)
        self._change(run, len(run.offsets))

    def __contains__(self, tag: int) -> bool:
        i = bisect_right(self.runs, tag, key=_first_tag) - 1
        return i >= 0 and tag < self.runs[i].end_tag

    def take_one(self, tag: int) -> list[TagRun]:
        """The delivery with this tag (it is here), out of its run."""
        runs = self.runs
        i = bisect_right(runs, tag, key=_first_tag) - 1
        run = runs[i]
        pieces = [p for p in (run.part(run.first_tag, tag), run.part(tag + 1, run.end_tag)) if p.offsets]
        runs[i : i + 1] = pieces
        return [run.part(tag, tag + 1)]

    def take_upto(self, tag: int | None) -> list[TagRun]:
        """Every delivery with a tag up to this one (None: all), out of its run."""
        runs = self.runs
        if tag is None:
            taken, self.runs = runs, []
            return taken
        n = bisect_right(runs, tag, key=_first_tag)
        taken = runs[:n]
        del runs[:n]
        if taken and taken[-1].end_tag > tag + 1:  # the last one goes on past the tag: split it
            last = taken[-1]
            taken[-1] = last.part(last.first_tag, tag + 1)
            runs.insert(0, last.part(tag + 1, last.end_tag))
        return taken

    def settle(self, taken: list[Settled], acked: bool) -> list[Unacked]:
        """Settle the runs among what Channel._collect took (their counts go; an ack moves their cursor
        along); the per-delivery entries are left to the channel."""
        rest = []
        for run in taken:
            if not isinstance(run, TagRun):
                rest.append(run)
                continue
            n = len(run.offsets)
            self._change(run, -n)
            if acked:
                self.channel.acked += n
                run.queue.acked += n
                run.queue.run_acked(run.cursor, run.offsets)
        return rest

    def restore(self, taken: list[Settled]) -> list[Unacked]:
        """Runs taken out but not settled (a transaction's acks, rolled back or abandoned) are back, in tag
        order; the per-delivery entries are left to the channel."""
        rest = []
        for run in taken:
            if isinstance(run, TagRun):
                self.runs.insert(bisect_left(self.runs, run.first_tag, key=_first_tag), run)
            else:
                rest.append(run)
        return rest

    def oldest_at(self) -> float | None:
        return min((run.at for run in self.runs), default=None)

    def _change(self, run: TagRun, n: int) -> None:
        """Every unacked count moves with the run's length, in Outstanding (their one owner)."""
        self.count += n
        self.channel.unacked.count_run(run.queue, run.consumer, n)


def _first_tag(run: TagRun) -> int:
    return run.first_tag


def taken_count(taken: list[Settled]) -> int:
    """How many deliveries what Channel._collect took holds (a run or range holds several)."""
    return sum(len(run.offsets) if isinstance(run, TagRun) else len(run.entries) for run in taken)


def stream_unacked(channel: Channel) -> StreamUnacked:
    """The channel's tag runs, made on its first batched stream delivery."""
    found = channel.stream_unacked
    if found is None:
        found = channel.stream_unacked = StreamUnacked(channel)
    return found


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


__all__ = ["OffsetSet", "Settled", "StreamUnacked", "TagRun", "stream_unacked", "taken_count"]
