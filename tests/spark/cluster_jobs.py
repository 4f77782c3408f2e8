"""Spark drivers for tests/spark/test_spark_cluster.py, each run in a process of its own (one SparkContext
per process, and the test session's is local):

    python tests/spark/cluster_jobs.py JOB '{"conf": {...}, "uri": ..., ...}'

The last line on stdout is the job's result as JSON."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from amqpd.spark import register

QUERY_S = 600  # every wait below is bounded: a query that does not end in time fails the job


def session(conf: dict[str, str]) -> SparkSession:
    builder = SparkSession.builder.appName("amqpd-cluster-test")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def executor_count(spark: SparkSession) -> int:
    """Executors registered with the driver (the driver's own block manager left out)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # type: ignore[union-attr]


def batch(spark: SparkSession, args: dict[str, Any]) -> dict[str, Any]:
    df = (
        spark.read.format("amqpd")
        .option("uri", args["uri"])
        .option("queue", args["queue"])
        .option("includeHeaders", "true")
        .option("maxOffsetsPerPartition", str(args["per_partition"]))
        .load()
    )
    partitions = df.rdd.getNumPartitions()
    rows = [(r.stream, r.offset, bytes(r.body).decode(), r.message_id, r.headers) for r in df.collect()]
    return {"rows": rows, "partitions": partitions, "executors": executor_count(spark)}


def held(df: Any, args: dict[str, Any]) -> Any:
    """The rows through a UDF that stops the first attempt of the task holding offset `stop_at`: it writes its
    pid to `marker` (once, whichever task gets there first) and waits for the test to kill the driver or an
    executor. Without `marker`, the rows as they are."""
    if "marker" not in args:
        return df
    marker, stop_at = args["marker"], args["stop_at"]

    def hold(offset: int, body: bytes) -> bytes:
        ctx = TaskContext.get()
        if offset == stop_at and ctx is not None and ctx.attemptNumber() == 0:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return body
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            time.sleep(QUERY_S)  # the test kills us; were it not to, the job would end late and fail
        return body

    return df.withColumn("body", F.udf(hold, BinaryType())("offset", "body"))


def source(spark: SparkSession, args: dict[str, Any]) -> Any:
    return (
        spark.readStream.format("amqpd")
        .option("uri", args["uri"])
        .option("queue", args["queue"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args["per_trigger"]))
        .load()
    )


def finish(spark: SparkSession, query: Any) -> dict[str, Any]:
    if not query.awaitTermination(QUERY_S):
        query.stop()
        raise RuntimeError(f"the query did not end within {QUERY_S} s")
    return {"batches": [p["numInputRows"] for p in query.recentProgress], "executors": executor_count(spark)}


def stream(spark: SparkSession, args: dict[str, Any]) -> dict[str, Any]:
    """One run of a checkpointed query to Parquet: Trigger.AvailableNow in batches of maxOffsetsPerTrigger."""
    query = (
        held(source(spark, args), args)
        .writeStream.format("parquet")
        .option("path", args["sink"])
        .option("checkpointLocation", args["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    return finish(spark, query)


def sink(spark: SparkSession, args: dict[str, Any]) -> dict[str, Any]:
    """A stream copied to another by the exactly-once writer (message ids `stream:offset`)."""
    query = (
        held(source(spark, args), args)
        .select("stream", "offset", "body")
        .writeStream.format("amqpd")
        .option("uri", args["uri"])
        .option("routing_key", args["target"])
        .option("checkpointLocation", args["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    return finish(spark, query)


JOBS = {"batch": batch, "stream": stream, "sink": sink}


def main() -> None:
    job, raw = sys.argv[1], sys.argv[2]
    args = json.loads(raw)
    spark = session(args["conf"])
    try:
        result = JOBS[job](spark, args)
    finally:
        spark.stop()
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
