"""Kafka's by-timestamp options: startingTimestamp / startingOffsetsByTimestamp (with
startingOffsetsByTimestampStrategy) and, for batch reads, endingTimestamp / endingOffsetsByTimestamp, against
the broker's append time. The plans are checked as Spark asks for them on the driver (no Spark session); one
read goes through Spark."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from broker_streams import declare_stream, publish, reader
from pyspark.sql import SparkSession

from amqpd.spark.options import ReadOptions
from amqpd.spark.reader import BatchReader, StreamingReader
from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)


def _now_between_publishes() -> int:
    """A time strictly after everything published so far and before anything published next (the broker's
    clock has whole milliseconds)."""
    time.sleep(0.02)
    cut = int(time.time() * 1000)
    time.sleep(0.02)
    return cut


def _three_eras(broker: BrokerProcess, name: str) -> tuple[int, int]:
    """Offsets 0-9 old, 10-29 middle, 30-34 new; returns the two times between them."""
    declare_stream(broker, name)
    publish(broker, name, [b"old"] * 10)
    first_cut = _now_between_publishes()
    publish(broker, name, [b"mid"] * 20)
    second_cut = _now_between_publishes()
    publish(broker, name, [b"new"] * 5)
    return first_cut, second_cut


def _planned(broker: BrokerProcess, queue: str, **options: str) -> dict[str, tuple[int, int]]:
    opts = ReadOptions.parse({"uri": broker.url, "queue": queue, **options}, streaming=False)
    ranges: dict[str, tuple[int, int]] = {}
    for part in BatchReader(opts).partitions():
        lo, hi = ranges.get(part.stream, (part.start, part.start))
        ranges[part.stream] = (min(lo, part.start), max(hi, part.end))
    return ranges


def test_ending_timestamp_stops_before_the_first_message_appended_at_or_after_it(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("until")
    first_cut, second_cut = _three_eras(broker, name)
    assert _planned(broker, name, endingTimestamp=str(second_cut)) == {name: (0, 30)}
    window = _planned(broker, name, startingTimestamp=str(first_cut), endingTimestamp=str(second_cut))
    assert window == {name: (10, 30)}


def test_by_timestamp_json_gives_each_stream_its_own_time_and_the_single_time_wins(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    a, b = stream_name("ts-a"), stream_name("ts-b")
    a_cuts = _three_eras(broker, a)
    b_cuts = _three_eras(broker, b)
    both = f"{a},{b}"
    starting = json.dumps({a: a_cuts[0], b: b_cuts[1]})
    assert _planned(broker, both, startingOffsetsByTimestamp=starting) == {a: (10, 35), b: (30, 35)}
    ending = json.dumps({a: a_cuts[1], b: b_cuts[0]})
    assert _planned(broker, both, endingOffsetsByTimestamp=ending) == {a: (0, 30), b: (0, 10)}
    # Kafka's precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets
    # (stream a has nothing after b's first cut: it starts at its end and plans no partition)
    one_time = _planned(
        broker,
        both,
        startingTimestamp=str(b_cuts[0]),
        startingOffsetsByTimestamp=starting,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert one_time == {b: (10, 35)}


def test_an_ending_time_later_than_everything_reads_to_the_end(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("until-late")
    _three_eras(broker, name)
    later = int(time.time() * 1000) + 3_600_000
    assert _planned(broker, name, endingOffsetsByTimestamp=json.dumps({name: later})) == {name: (0, 35)}


def test_a_starting_time_with_nothing_after_it_is_an_error_unless_the_strategy_is_latest(
    broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("future")
    _three_eras(broker, name)
    later = str(int(time.time() * 1000) + 3_600_000)
    with pytest.raises(ValueError, match="no message was appended at or after"):
        _planned(broker, name, startingTimestamp=later)
    assert _planned(broker, name, startingTimestamp=later, startingOffsetsByTimestampStrategy="latest") == {}
    opts = ReadOptions.parse(
        {
            "uri": broker.url,
            "queue": name,
            "startingOffsetsByTimestamp": json.dumps({name: int(later)}),
            "startingOffsetsByTimestampStrategy": "latest",
        },
        streaming=True,
    )
    assert StreamingReader(opts).initialOffset() == {name: 35}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"endingTimestamp": "1"}, True, "endingTimestamp is for batch reads only"),
        ({"endingOffsetsByTimestamp": '{"s": 1}'}, True, "endingOffsetsByTimestamp is for batch reads only"),
        ({"startingOffsetsByTimestamp": '{"other": 1}'}, False, "must name exactly the streams"),
        ({"startingOffsetsByTimestamp": '{"s": "yesterday"}'}, False, "ms since the epoch"),
        ({"endingOffsetsByTimestamp": "[1]"}, False, "ms since the epoch"),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, False, "'error' or 'latest'"),
        ({"endingTimestamp": "-5"}, False, "at least 0"),
    ],
)
def test_by_timestamp_options_are_checked_with_messages_naming_them(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ReadOptions.parse({"uri": "amqp://guest:guest@127.0.0.1:1/%2F", "queue": "s", **options}, streaming=streaming)


def test_spark_reads_the_window_between_two_times(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("window")
    first_cut, second_cut = _three_eras(broker, name)
    rows = reader(
        spark,
        broker,
        name,
        startingOffsetsByTimestamp=json.dumps({name: first_cut}),
        endingTimestamp=second_cut,
    ).collect()
    assert sorted(r.offset for r in rows) == list(range(10, 30))
    assert {bytes(r.body) for r in rows} == {b"mid"}
