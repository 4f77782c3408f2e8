"""Reading streams: the batch reader, the micro-batch reader, and the partition read they share.

Offsets are planned on the driver from the broker's positions; a partition is one stream's range
[start, end), and an executor reads exactly that range over AMQP (wire.StreamReader), so a replayed
micro-batch reads the same rows. Offsets in Spark's checkpoint are each stream's next offset (end-exclusive).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from amqpd.spark.chunk_rows import chunk_batch
from amqpd.spark.options import DataLossError, ReadOptions
from amqpd.spark.positions import Bounds
from amqpd.spark.rows import kafka_headers, record_batch
from amqpd.spark.wire import BrokerError, Chunks, Endpoint, StreamReader

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pyspark 4.0 / 4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Absent before pyspark 4.2."""


class OffsetRange(InputPartition):
    """One stream's offsets [start, end) to read, and how."""

    def __init__(
        self, endpoint: Endpoint, stream: str, start: int, end: int, include_headers: bool, fail_on_data_loss: bool
    ) -> None:
        super().__init__((stream, start, end))
        self.endpoint = endpoint
        self.stream = stream
        self.start = start
        self.end = end
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.headers_array = False  # headersFormat=array (set by split)


def split(opts: ReadOptions, ranges: dict[str, tuple[int, int]]) -> list[OffsetRange]:
    """Each stream's range in pieces of at most maxOffsetsPerPartition offsets, and more pieces while there
    are fewer than minPartitions, so local[N] reads in parallel. A range's pieces are of equal size (give or
    take one): a short last piece would leave a core idle while the others finish."""
    total = sum(max(e - s, 0) for s, e in ranges.values())
    size = opts.partition_offsets
    if opts.min_partitions > 1 and total:
        size = min(size, max(-(-total // opts.min_partitions), 1))
    parts: list[OffsetRange] = []
    for stream, (start, end) in ranges.items():
        count = -(-(end - start) // size) if end > start else 0
        bounds = [start + (end - start) * k // count for k in range(count)] + [end]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            part = OffsetRange(opts.endpoint, stream, lo, hi, opts.include_headers, opts.fail_on_data_loss)
            part.headers_array = opts.headers_array and opts.include_headers
            parts.append(part)
    return parts


def read_range(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's rows as record batches, in offset order. A range whose start retention deleted after it
    was planned is data loss: an error with failOnDataLoss, otherwise what is left of it."""
    reader = StreamReader(part.endpoint, part.stream, part.start, part.end, with_headers=part.include_headers)
    try:
        for batch in _checked_batches(part, reader):
            yield kafka_headers(batch) if part.headers_array else batch
    except (BrokerError, OSError) as exc:  # the broker went away or refused: one line naming what was read
        raise BrokerError(f"amqpd stream '{part.stream}', offsets {part.start}..{part.end - 1}: {exc}") from None


def _checked_batches(part: OffsetRange, reader: StreamReader) -> Iterator[pa.RecordBatch]:
    checked = False
    for batch in arrow_batches(reader):
        if not checked:
            checked = True
            first = reader.first_offset if reader.first_offset is not None else part.start
            if first > part.start and part.fail_on_data_loss:
                raise DataLossError(
                    f"amqpd stream '{part.stream}': offsets {part.start}..{first - 1} were deleted by retention "
                    f"before they were read. Set failOnDataLoss=false to skip what is gone."
                )
        # rows past the range come only after a loss (the stream went on past it): offsets are in order
        keep = int(np.searchsorted(batch.column(0).to_numpy(), part.end))
        if keep:
            yield batch.slice(0, keep)
        if keep < batch.num_rows:
            return


def arrow_batches(reader: StreamReader) -> Iterator[pa.RecordBatch]:
    """The reader's rows as record batches, whichever way the broker delivered them."""
    for got in reader.batches():
        if isinstance(got, Chunks):
            yield chunk_batch(reader.stream, got, reader.with_headers)
        else:
            yield record_batch(reader.stream, got, reader.with_headers)


def read_partition(partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    """A planned range's rows. When partitions() planned none, Spark still reads one placeholder: None
    (pyspark 4.0/4.1) or InputPartition(None) (4.2+); it has no rows."""
    if not isinstance(partition, OffsetRange):
        return iter(())
    return read_range(partition)


def _check_range(stream: str, start: int, end: int, bounds: Bounds) -> None:
    """A batch read's range must exist: a start past the stream's end, or an end before the start, is an
    error naming the stream (a batch read does not wait for offsets to come)."""
    if start > bounds.end:
        raise ValueError(
            f"amqpd stream '{stream}': starting offset {start} is past its end (it holds offsets "
            f"{bounds.first}..{bounds.end - 1}; the next is {bounds.end})"
        )
    if end < start:
        raise ValueError(f"amqpd stream '{stream}': ending offset {end} is before the starting offset {start}")


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        positions = opts.positions()
        ranges = {}
        for stream in opts.streams:
            bounds = positions.bounds(stream)
            start = opts.check_loss(stream, opts.start_offset(positions, stream, bounds), bounds.first)
            ranges[stream] = (start, opts.end_offset(positions, stream, bounds))
            _check_range(stream, *ranges[stream], bounds)
        return split(opts, ranges)

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class StreamingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over one or several streams. maxOffsetsPerTrigger caps each batch (shared among the
    streams in proportion to what each has waiting); Trigger.AvailableNow stops at the ends seen when it
    starts, in bounded batches."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.positions = opts.positions()
        self._last: dict[str, int] | None = None  # for pyspark < 4.2, whose latestOffset() has no start
        self._target: dict[str, int] | None = None  # Trigger.AvailableNow's end
        self.clock = time.monotonic
        self._last_trigger: float | None = None  # when the last batch was let through (minOffsetsPerTrigger)

    def initialOffset(self) -> dict:
        opts = self.opts
        start = {}
        for stream in opts.streams:
            bounds = self.positions.bounds(stream)
            start[stream] = opts.start_offset(self.positions, stream, bounds)
        # pyspark 4.0/4.1 ask latestOffset() before initialOffset(): the end already handed out stays the base
        # of the next cap, or the next end would fall behind the batch Spark just ran
        if self._last is None:
            self._last = start
        return start

    def _ends(self) -> dict[str, int]:
        return self._target or {s: self.positions.bounds(s).end for s in self.opts.streams}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {s: self.positions.bounds(s).end for s in self.opts.streams}

    def getDefaultReadLimit(self) -> Any:
        if ReadMaxRows is not None and self.opts.max_per_trigger is not None:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        ends = self._ends()
        if start is None and self._last is None:
            # pyspark < 4.2 restarting from a checkpoint: the batch's start (in the checkpoint) is not given
            # to us, so this first batch runs to the end uncapped rather than risk an end before its start.
            start, cap = dict(ends), None
        elif start is None:  # pyspark < 4.2: our own last end, and our own cap
            start, cap = dict(self._last or {}), self.opts.max_per_trigger
        else:
            cap = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        start = {s: start.get(s, ends[s]) for s in self.opts.streams}  # a stream added to queue starts at its end
        end = {s: max(ends[s], start[s]) for s in self.opts.streams}
        if cap is not None:
            end = _capped(start, end, cap)
        if self._delayed(start, end):
            end = dict(start)  # nothing new: Spark runs no batch this trigger
        self._last = end
        return end

    def _delayed(self, start: dict[str, int], end: dict[str, int]) -> bool:
        """Kafka's minOffsetsPerTrigger: fewer new offsets than that wait for more, at most maxTriggerDelay
        since the last batch (the first batch is not delayed; Trigger.AvailableNow never is)."""
        least = self.opts.min_per_trigger
        if least is None or self._target is not None:
            return False
        now = self.clock()
        waited = self._last_trigger is not None and now - self._last_trigger < self.opts.max_trigger_delay_s
        if waited and sum(end[s] - start[s] for s in end) < least:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict | None:
        return {s: self.positions.bounds(s).end for s in self.opts.streams}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        opts = self.opts
        ranges = {}
        for stream in opts.streams:
            lo, hi = int(start.get(stream, end[stream])), int(end[stream])
            first = self.positions.bounds(stream).first
            if lo < first:
                lo = min(opts.check_loss(stream, lo, first), hi)
            ranges[stream] = (lo, hi)
        return split(opts, ranges)

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the broker keeps every offset until retention, and Spark's checkpoint holds ours."""


def _capped(start: dict[str, int], end: dict[str, int], cap: int) -> dict[str, int]:
    """At most `cap` offsets in all, shared in proportion to each stream's backlog (at least one each while
    the cap allows, so no stream starves)."""
    waiting = {s: end[s] - start[s] for s in start}
    total = sum(waiting.values())
    if total <= cap:
        return end
    out = {}
    left = cap
    for s in sorted(waiting, key=lambda k: waiting[k]):
        share = min(waiting[s], max(cap * waiting[s] // total, 1 if waiting[s] and left else 0), left)
        out[s] = start[s] + share
        left -= share
    return out
