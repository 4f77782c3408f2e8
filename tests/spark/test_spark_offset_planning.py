"""How the micro-batch reader plans offsets on the driver, called as Spark calls it (no Spark session):
admission control through ReadLimit (pyspark >= 4.2) and through its own cap when pyspark < 4.2 calls
latestOffset() without arguments, Trigger.AvailableNow's fixed end, and data loss between batches."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from broker_streams import declare_stream, publish

from amqpd.spark.options import DataLossError, ReadOptions
from amqpd.spark.reader import ReadAllAvailable, ReadMaxRows, StreamingReader, read_range, split
from amqpd.testing import BrokerProcess

# ReadLimit came with pyspark 4.2; on 4.0/4.1 (run by hand in venvs, CI has the newest) only the tests of the
# older calling convention apply
needs_read_limit = pytest.mark.skipif(ReadMaxRows is None, reason="pyspark < 4.2 has no ReadLimit")


def _reader(broker: BrokerProcess, queue: str, **options: str) -> StreamingReader:
    opts = {"uri": broker.url, "queue": queue, **options}
    return StreamingReader(ReadOptions.parse(opts, streaming=True))


@needs_read_limit
def test_read_limits_cap_each_batch_and_read_all_available_does_not(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("limits")
    declare_stream(broker, name)
    publish(broker, name, [b"m"] * 250)
    r = _reader(broker, name, startingOffsets="earliest", maxOffsetsPerTrigger="100")
    start = r.initialOffset()
    assert start == {name: 0}
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    assert r.latestOffset(start, ReadMaxRows(100)) == {name: 100}
    assert r.latestOffset({name: 200}, ReadMaxRows(100)) == {name: 250}
    assert r.latestOffset(start, ReadAllAvailable()) == {name: 250}


def test_without_arguments_as_pyspark_before_4_2_calls_it_the_reader_applies_its_own_cap(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("old-api")
    declare_stream(broker, name)
    publish(broker, name, [b"m"] * 250)
    r = _reader(broker, name, startingOffsets="earliest", maxRecordsPerTrigger="100")
    r.initialOffset()
    assert [r.latestOffset() for _ in range(4)] == [{name: 100}, {name: 200}, {name: 250}, {name: 250}]
    restarted = _reader(broker, name, startingOffsets="earliest", maxRecordsPerTrigger="100")
    # from a checkpoint (no initialOffset call): its start is unknown, so no end before it: the end, uncapped
    assert restarted.latestOffset() == {name: 250}


def test_as_pyspark_4_0_and_4_1_call_it_latest_before_initial_the_next_end_never_falls_behind(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    """pyspark 4.0/4.1 ask latestOffset() and only then initialOffset() on a fresh query: the first batch is
    uncapped (its start is unknown when the end is asked), and the next end goes on from it. It used to go
    back to initial + cap, an end before the batch Spark had just run, which a restarted query then
    replayed as an empty range (seen with pyspark 4.1.4: the rows published in between never arrived)."""
    name = stream_name("old-order")
    declare_stream(broker, name)
    publish(broker, name, [b"m"] * 250)
    r = _reader(broker, name, startingOffsets="earliest", maxOffsetsPerTrigger="100")
    assert r.latestOffset() == {name: 250}
    assert r.initialOffset() == {name: 0}
    publish(broker, name, [b"n"] * 150)
    assert [r.latestOffset() for _ in range(3)] == [{name: 350}, {name: 400}, {name: 400}]


@needs_read_limit
def test_trigger_available_now_stops_at_the_end_seen_when_it_started(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("available-now")
    declare_stream(broker, name)
    publish(broker, name, [b"m"] * 30)
    r = _reader(broker, name, startingOffsets="earliest")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    publish(broker, name, [b"late"] * 10)
    assert r.latestOffset(start, ReadAllAvailable()) == {name: 30}


def test_a_planned_batch_whose_offsets_retention_deleted_is_data_loss(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("stream-loss")
    declare_stream(broker, name, **{"x-stream-max-segment-size-bytes": 2000, "x-max-length-bytes": 4000})
    publish(broker, name, [b"z" * 100 for _ in range(200)])
    strict = _reader(broker, name)
    with pytest.raises(DataLossError, match=f"stream '{name}': offsets 0\\.\\."):
        strict.partitions({name: 0}, {name: 200})
    lenient = _reader(broker, name, failOnDataLoss="false")
    parts = lenient.partitions({name: 0}, {name: 200})
    assert parts[0].start > 0 and parts[-1].end == 200


def test_offsets_deleted_after_planning_are_data_loss_when_the_executor_reads(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("late-loss")
    declare_stream(broker, name, **{"x-stream-max-segment-size-bytes": 2000, "x-max-length-bytes": 4000})
    publish(broker, name, [b"z" * 100 for _ in range(10)])
    strict = _reader(broker, name, maxOffsetsPerPartition="1000").partitions({name: 0}, {name: 10})
    lenient = _reader(broker, name, failOnDataLoss="false").partitions({name: 0}, {name: 10})
    publish(broker, name, [b"z" * 100 for _ in range(200)])  # retention now drops offsets 0..9
    with pytest.raises(DataLossError, match=f"stream '{name}': offsets 0\\.\\."):
        list(read_range(strict[0]))  # type: ignore[arg-type]
    assert list(read_range(lenient[0])) == []  # type: ignore[arg-type]  # what is left of 0..9: nothing


def test_a_range_is_split_into_partitions_of_equal_size_so_no_core_waits_on_a_short_last_one() -> None:
    opts = ReadOptions.parse({"uri": "amqp://localhost/", "queue": "a,b", "maxOffsetsPerPartition": "250"}, False)
    parts = split(opts, {"a": (1000, 1600), "b": (5, 5)})
    assert [(p.stream, p.start, p.end) for p in parts] == [("a", 1000, 1200), ("a", 1200, 1400), ("a", 1400, 1600)]
    opts = ReadOptions.parse({"uri": "amqp://localhost/", "queue": "a,b", "minPartitions": "4"}, False)
    parts = split(opts, {"a": (0, 1000), "b": (0, 10)})
    assert [(p.start, p.end) for p in parts if p.stream == "a"] == [(0, 250), (250, 500), (500, 750), (750, 1000)]
    assert [(p.start, p.end) for p in parts if p.stream == "b"] == [(0, 10)]


def test_without_options_a_million_offsets_are_read_in_two_partitions_of_500_000() -> None:
    """The documented default: Spark's cost per task favours long tasks (amqpd/spark/options.py)."""
    opts = ReadOptions.parse({"uri": "amqp://localhost/", "queue": "a"}, False)
    parts = split(opts, {"a": (7, 1_000_007)})
    assert [(p.start, p.end) for p in parts] == [(7, 500_007), (500_007, 1_000_007)]


@needs_read_limit
def test_min_offsets_per_trigger_waits_for_enough_new_offsets_at_most_max_trigger_delay(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("min-per-trigger")
    declare_stream(broker, name)
    publish(broker, name, [b"m"] * 5)
    r = _reader(broker, name, startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="1m")
    now = [1000.0]
    r.clock = lambda: now[0]  # the delay is measured on this clock
    start = r.initialOffset()
    assert r.latestOffset(start, ReadAllAvailable()) == {name: 5}  # the first batch is not delayed, as Kafka's
    publish(broker, name, [b"m"] * 3)
    now[0] += 30
    assert r.latestOffset({name: 5}, ReadAllAvailable()) == {name: 5}  # 3 < 10 new: no batch yet
    publish(broker, name, [b"m"] * 7)
    now[0] += 1
    assert r.latestOffset({name: 5}, ReadAllAvailable()) == {name: 15}  # 10 new: a batch
    publish(broker, name, [b"m"] * 2)
    now[0] += 59
    assert r.latestOffset({name: 15}, ReadAllAvailable()) == {name: 15}
    now[0] += 2  # past maxTriggerDelay since the last batch: what there is goes
    assert r.latestOffset({name: 15}, ReadAllAvailable()) == {name: 17}
    with pytest.raises(ValueError, match="option maxTriggerDelay: a duration"):
        _reader(broker, name, maxTriggerDelay="soon")
