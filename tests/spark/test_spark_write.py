"""df.write / writeStream .format("amqpd"): messages published with confirms, append only, and message ids
derived from the data so that a retried task publishes the same messages again, which a target stream with
x-message-deduplication drops."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_streams import declare_stream, publish, reader
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from amqpd.spark.writer import _derived_id
from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)  # a Spark job on a busy 2-core machine can take a while

ROWS = 3000
DEDUP = {"x-message-deduplication": True, "x-cache-size": 100_000}


def _write(df: object, broker: BrokerProcess, **options: str) -> None:
    w = df.write.format("amqpd").mode("append").option("uri", broker.url)  # type: ignore[attr-defined]
    for key, value in options.items():
        w = w.option(key, value)
    w.save()


def test_rows_are_published_with_their_properties_to_the_named_exchange_and_routing_key(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    target = stream_name("out")
    declare_stream(broker, target)
    df = spark.createDataFrame(
        [(f"body{i}", f"k{i}", {"h": str(i)}) for i in range(100)],
        "body string, key string, headers map<string,string>",
    ).withColumn("content_type", F.lit("text/plain"))
    _write(df, broker, routing_key=target, messageIdColumns="key")
    rows = reader(spark, broker, target, includeHeaders="true").collect()
    assert sorted(r.body for r in rows) == sorted(f"body{i}".encode() for i in range(100))
    assert {r.routing_key for r in rows} == {target}
    assert {r.content_type for r in rows} == {"text/plain"}
    assert len({r.message_id for r in rows}) == 100  # one id per key
    assert all(r.headers == {"h": r.body.decode()[4:]} for r in rows)


def test_message_ids_default_to_the_source_stream_and_offset(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    source, target = stream_name("src"), stream_name("copy")
    declare_stream(broker, source)
    declare_stream(broker, target)
    publish(broker, source, [f"e{i}".encode() for i in range(20)])
    _write(reader(spark, broker, source).select("stream", "offset", "body"), broker, routing_key=target)
    ids = sorted(r.message_id for r in reader(spark, broker, target).collect())
    assert ids == sorted(f"{source}:{o}" for o in range(20))


def test_ids_from_a_timestamp_column_are_derived_from_the_value_a_row_holds(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str]
) -> None:
    # Rows reach the writer as Arrow batches where their values read the same as a Row's; a timestamp's Arrow
    # value carries a zone a Row's lacks, so the id would change (and a retried or upgraded job duplicate)
    target = stream_name("ts-ids")
    declare_stream(broker, target)
    df = spark.createDataFrame(
        [(f"b{i}", datetime.datetime(2026, 1, 1, 0, 0, i)) for i in range(3)], "body string, ts timestamp"
    )
    _write(df, broker, routing_key=target, messageIdColumns="ts")
    expected = {_derived_id(r.asDict(), ["ts"]) for r in df.collect()}
    assert {r.message_id for r in reader(spark, broker, target).collect()} == expected


def test_overwrite_is_refused_with_a_clear_message(spark: SparkSession, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("amqpd").mode("overwrite").option("uri", broker.url).save()


def test_an_unroutable_message_fails_the_write(spark: SparkSession, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="unroutable"):
        _write(df, broker, exchange="amq.direct", routing_key="no-such-queue-anywhere")


def _retried_write(spark: SparkSession, broker: BrokerProcess, target: str, marker: Path) -> list:
    """ROWS rows in two partitions, through a UDF that fails the first attempt of each task half-way: the
    writer had published (and the broker maybe confirmed) the rows before it when Spark retries the task
    (local[2,2]). The marker file says the failure happened. Rows reach the writer in Arrow batches of
    maxRecordsPerBatch (10,000 by default): made small here, so the first attempt publishes before failing."""

    def check(key: str) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and key in ("k700", "k2200"):
            marker.write_text("failed once")
            raise RuntimeError("injected failure, first attempt only")
        return key

    data = [(f"v{i}" + "." * 100, f"k{i}") for i in range(ROWS)]
    df = spark.sparkContext.parallelize(data, 2).toDF("body string, key string")
    df = df.withColumn("key", F.udf(check, StringType())("key"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    try:
        _write(df, broker, routing_key=target, messageIdColumns="key")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.read_text() == "failed once"
    return reader(spark, broker, target).select("message_id", "body").collect()


def test_a_retried_task_publishes_the_same_message_ids_again(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str], tmp_path: Path
) -> None:
    target = stream_name("retry")
    declare_stream(broker, target)
    rows = _retried_write(spark, broker, target, tmp_path / "failed")
    by_id: dict[str, set[bytes]] = {}
    for r in rows:
        by_id.setdefault(r.message_id, set()).add(bytes(r.body))  # bytearray on pyspark 4.0
    assert len(by_id) == ROWS  # one id per row, whichever attempt published it
    assert all(len(bodies) == 1 for bodies in by_id.values())  # a repeat carries the same id as the first


def test_a_retried_task_leaves_each_row_once_in_a_deduplicating_stream(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str], tmp_path: Path
) -> None:
    target = stream_name("exactly-once")
    declare_stream(broker, target, **DEDUP)
    rows = _retried_write(spark, broker, target, tmp_path / "failed")
    assert sorted(Counter(r.message_id for r in rows).values()) == [1] * ROWS
