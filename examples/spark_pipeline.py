"""An amqpd + Spark pipeline, end to end:

1. events are published with pika into the stream `events` (JSON bodies: user, action, event time);
2. a Structured Streaming job reads `events`, counts actions per minute of event time and writes each
   finished minute back to the stream `events_per_minute`, exactly once (message ids from the data, the
   target declared with x-message-deduplication);
3. a batch job re-reads yesterday-and-today's `events` from a timestamp (the broker's time index).

    pip install -e '.[spark]'               # or: pip install 'amqpd[spark]'
    python examples/spark_pipeline.py       # starts its own amqpd on free ports, unless --uri is given

With your own broker: --uri amqp://guest:guest@host:5672/%2F (offsets come over AMQP too). On a cluster:
--master spark://host:7077 (the default is local[2]) and any Spark setting as --conf KEY=VALUE, as
spark-submit takes them; every executor must reach the broker at --uri and import amqpd.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import tempfile
from typing import Any

import pika
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from amqpd.spark import register
from amqpd.spark.decode import body_json

EVENTS, PER_MINUTE = "events", "events_per_minute"
EVENT_SCHEMA = StructType(
    [StructField("user", StringType()), StructField("action", StringType()), StructField("event_ms", LongType())]
)


def declare_streams(uri: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.queue_declare(EVENTS, durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_declare(
        PER_MINUTE,
        durable=True,
        arguments={"x-queue-type": "stream", "x-message-deduplication": True, "x-cache-size": 100_000},
    )
    conn.close()


def publish_events(uri: str, count: int, minutes: int, seed: int = 7) -> int:
    """`count` events spread over the last `minutes` minutes of event time, then one event two minutes
    later that moves the watermark past them (so every minute before it is final)."""
    rng = random.Random(seed)
    now = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000) // 60_000 * 60_000
    start = now - minutes * 60_000
    events = [
        {
            "user": f"u{rng.randrange(50)}",
            "action": rng.choice(["view", "click", "buy"]),
            "event_ms": start + rng.randrange(minutes * 60_000),
        }
        for _ in range(count)
    ]
    events.sort(key=lambda e: e["event_ms"])
    events.append({"user": "clock", "action": "tick", "event_ms": now + 2 * 60_000})
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for event in events:
        ch.basic_publish(
            "",
            EVENTS,
            json.dumps(event).encode(),
            pika.BasicProperties(content_type="application/json", delivery_mode=2),
        )
    conn.close()
    return len(events)


def source(
    spark: SparkSession, uri: str, management_uri: str | None, queue: str, streaming: bool, **options: Any
) -> DataFrame:
    reader = spark.readStream if streaming else spark.read
    r = reader.format("amqpd").option("uri", uri).option("queue", queue)
    if management_uri:  # an override only: by default the driver asks for offsets over AMQP
        r = r.option("managementUri", management_uri)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def per_minute(events: DataFrame) -> DataFrame:
    """Actions per minute of event time; a minute is written once the watermark (1 minute) has passed it."""
    parsed = body_json(events, EVENT_SCHEMA).withColumn("event_time", F.timestamp_millis("event_ms"))
    counts = (
        parsed.withWatermark("event_time", "1 minute").groupBy(F.window("event_time", "1 minute"), "action").count()
    )
    return counts.select(
        F.date_format("window.start", "yyyy-MM-dd'T'HH:mm").alias("minute"),
        "action",
        "count",
    ).select("minute", "action", "count", F.to_json(F.struct("minute", "action", "count")).alias("body"))


def run_aggregation(spark: SparkSession, uri: str, management_uri: str | None, checkpoint: str) -> None:
    """Everything available now, in micro-batches of at most 5,000 events; run it again later (same
    checkpoint) and it goes on from where it stopped."""
    events = source(
        spark, uri, management_uri, EVENTS, streaming=True, startingOffsets="earliest", maxOffsetsPerTrigger=5_000
    )
    query = (
        per_minute(events)
        .writeStream.format("amqpd")
        .outputMode("append")
        .option("uri", uri)
        .option("routing_key", PER_MINUTE)
        .option("messageIdColumns", "minute,action")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def reread_since_yesterday(spark: SparkSession, uri: str, management_uri: str | None) -> DataFrame:
    """A batch job: every event appended since yesterday 00:00 UTC, found through the broker's time index."""
    today = datetime.datetime.now(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since_ms = int((today - datetime.timedelta(days=1)).timestamp() * 1000)
    events = source(spark, uri, management_uri, EVENTS, streaming=False, startingTimestamp=since_ms)
    return body_json(events, EVENT_SCHEMA).groupBy("action").count().orderBy("action")


def main() -> None:
    parser = argparse.ArgumentParser(description="amqpd + Spark: events in, per-minute counts out")
    parser.add_argument("--uri", help="amqp://… of a running amqpd (default: start one)")
    parser.add_argument("--management-uri", help="ask its HTTP API for offsets instead of AMQP (optional)")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--master", default="local[2]", help="Spark's master URL, e.g. spark://host:7077")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    args = parser.parse_args()
    builder = (
        SparkSession.builder.master(args.master)
        .appName("amqpd-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for setting in args.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    broker = None
    if args.uri is None:
        from amqpd.testing import BrokerProcess

        broker = BrokerProcess().start()
        uri, management_uri = broker.url, None
    else:
        uri, management_uri = args.uri, args.management_uri
    try:
        declare_streams(uri)
        print(f"published {publish_events(uri, args.events, minutes=10)} events to '{EVENTS}'")
        with tempfile.TemporaryDirectory(prefix="amqpd-pipeline-") as checkpoint:
            run_aggregation(spark, uri, management_uri, checkpoint)
        results = body_json(
            source(spark, uri, management_uri, PER_MINUTE, streaming=False),
            StructType.fromDDL("minute string, action string, count long"),
        )
        print(f"'{PER_MINUTE}' holds {results.count()} per-minute counts; the first ones:")
        results.orderBy("minute", "action").show(6, truncate=False)
        print("re-read since yesterday 00:00 UTC, by action:")
        reread_since_yesterday(spark, uri, management_uri).show()
    finally:
        spark.stop()
        if broker is not None:
            broker.close()


if __name__ == "__main__":
    main()
