"""spark.read.format("amqpd"): one or several streams by offset, by time, with headers, and the refusals and
data-loss errors Spark's Kafka source gives."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pika
import pytest
from broker_streams import declare_stream, publish, reader
from pyspark.sql import SparkSession

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)  # a Spark job on a busy 2-core machine can take a while


def test_a_batch_read_returns_every_message_with_its_offset_and_properties(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("all")
    declare_stream(broker, name)
    before = int(time.time() * 1000)
    publish(
        broker,
        name,
        [f"m{i}".encode() for i in range(500)],
        lambda i: pika.BasicProperties(message_id=f"id{i}", correlation_id=f"c{i}", content_type="text/plain"),
    )
    after = int(time.time() * 1000)
    df = reader(spark, broker, name, maxOffsetsPerPartition=120)
    assert df.rdd.getNumPartitions() == 5  # 500 offsets in ranges of at most 120
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.offset for r in rows] == list(range(500))
    assert [r.body for r in rows] == [f"m{i}".encode() for i in range(500)]
    first = rows[0]
    assert (first.stream, first.exchange, first.routing_key) == (name, "", name)
    assert (first.message_id, first.correlation_id, first.content_type) == ("id0", "c0", "text/plain")
    assert before <= int(first.timestamp.timestamp() * 1000) <= after
    assert "headers" not in df.columns


def test_json_offsets_bound_the_range_end_exclusive(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    a, b = stream_name("ja"), stream_name("jb")
    for name in (a, b):
        declare_stream(broker, name)
        publish(broker, name, [f"{name}-{i}".encode() for i in range(50)])
    df = reader(
        spark, broker, f"{a},{b}", startingOffsets=json.dumps({a: 10, b: -2}), endingOffsets=json.dumps({a: 20, b: -1})
    )
    got = {(r.stream, r.offset) for r in df.select("stream", "offset").collect()}
    assert got == {(a, o) for o in range(10, 20)} | {(b, o) for o in range(50)}


def test_starting_timestamp_reads_from_the_first_message_appended_at_or_after_it(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("time")
    declare_stream(broker, name)
    publish(broker, name, [b"old"] * 30)
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    publish(broker, name, [b"new"] * 20)
    rows = reader(spark, broker, name, startingTimestamp=cut).collect()
    assert sorted(r.offset for r in rows) == list(range(30, 50))
    assert {bytes(r.body) for r in rows} == {b"new"}  # bytearray on pyspark 4.0


def test_include_headers_gives_a_string_map_with_json_for_other_types(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("hdr")
    declare_stream(broker, name)
    headers = {"s": "text", "n": 7, "f": True, "b": b"\x00\xff", "list": [1, "a"]}
    publish(broker, name, [b"x"], lambda i: pika.BasicProperties(headers=headers))
    row = reader(spark, broker, name, includeHeaders="true").collect()[0]
    assert row.headers == {"s": "text", "n": "7", "f": "true", "b": "AP8=", "list": '[1,"a"]'}


def test_headers_format_array_gives_kafkas_key_value_pairs_in_the_tables_order(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("hdr-array")
    declare_stream(broker, name)
    headers = {"trace": "t-1", "n": 7, "b": b"\x00\xff"}
    publish(broker, name, [b"x", b"y"], lambda i: pika.BasicProperties(headers=headers if i == 0 else None))
    df = reader(spark, broker, name, includeHeaders="true", headersFormat="array")
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(h.key, bytes(h.value)) for h in rows[0].headers] == [("trace", b"t-1"), ("n", b"7"), ("b", b"AP8=")]
    assert not rows[1].headers  # no headers table: none (or an empty list)


def test_a_batch_read_refuses_latest_start_and_earliest_end(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("refuse")
    declare_stream(broker, name)
    with pytest.raises(Exception, match="'latest' is not allowed for a batch read"):
        reader(spark, broker, name, startingOffsets="latest").collect()
    with pytest.raises(Exception, match="'earliest' is not allowed for a batch read"):
        reader(spark, broker, name, endingOffsets="earliest").collect()


def test_offsets_deleted_by_retention_are_an_error_naming_them_unless_fail_on_data_loss_is_false(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    name = stream_name("loss")
    declare_stream(broker, name, **{"x-stream-max-segment-size-bytes": 2000, "x-max-length-bytes": 4000})
    publish(broker, name, [b"y" * 100 for _ in range(200)])
    first = min(r.offset for r in reader(spark, broker, name).select("offset").collect())
    assert first > 0  # retention dropped the oldest segments
    with pytest.raises(Exception, match=f"offsets 0..{first - 1} were deleted by retention"):
        reader(spark, broker, name, startingOffsets=json.dumps({name: 0})).collect()
    rows = reader(spark, broker, name, startingOffsets=json.dumps({name: 0}), failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(first, 200))


def test_an_empty_stream_reads_as_no_rows(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    # Spark reads one placeholder partition when none was planned; it failed the read before
    name = stream_name("empty")
    declare_stream(broker, name)
    assert reader(spark, broker, name).count() == 0
