"""`python -m bench.spark`: Spark batch-reading an amqpd stream through amqpd.spark, beside Spark reading the
same rows from a local Parquet file and beside a plain pika consumer loop, in the same run on local[2].

    python -m bench.spark [--messages 1000000] [--size 100]

Starts its own amqpd (ephemeral ports, a temporary data directory), fills one stream with confirmed
publishes, then times each reader over the whole stream (each forced to read every body). Prints rows/s
and the ratios. Needs the `spark` extra and Java 17.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pika

from amqpd.spark.wire import Endpoint, Outgoing, Publisher
from amqpd.testing import BrokerProcess

STREAM = "bench-spark"


def fill(url: str, messages: int, size: int) -> float:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    publisher = Publisher(Endpoint.parse(url), window=5_000)
    body = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        publisher.publish(Outgoing(body=body, routing_key=STREAM))
    publisher.flush()
    publisher.close()
    return messages / (time.perf_counter() - started)


def pika_loop(url: str, messages: int) -> float:
    """The plain way: pika's BlockingConnection, prefetch 1,000, an ack (multiple) every 500."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    seen = 0
    started = time.perf_counter()
    for method, _props, _body in ch.consume(STREAM, arguments={"x-stream-offset": "first"}):
        seen += 1
        if seen % 500 == 0 or seen == messages:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if seen == messages:
            break
    elapsed = time.perf_counter() - started
    conn.close()
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="Spark reads per source (the best is kept)")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from amqpd.spark import register

    with BrokerProcess(management=True) as broker, tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        print(f"filling {STREAM} with {args.messages:,} messages of {args.size} B …", flush=True)
        print(f"  confirmed publish: {fill(broker.url, args.messages, args.size):,.0f} msg/s", flush=True)
        spark = (SparkSession.builder.master("local[2]").appName("bench.spark")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def amqpd_df():  # type: ignore[no-untyped-def]
            return (spark.read.format("amqpd").option("uri", broker.url).option("managementUri", broker.mgmt_url)
                    .option("queue", STREAM).load())

        def timed(make) -> float:  # type: ignore[no-untyped-def]
            best = 0.0
            for _ in range(args.rounds):
                started = time.perf_counter()
                row = make().agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).collect()[0]
                rate = row.n / (time.perf_counter() - started)
                assert row.n == args.messages, f"read {row.n} rows, expected {args.messages}"
                best = max(best, rate)
            return best

        amqpd_rate = timed(amqpd_df)
        parquet = str(Path(tmp) / "rows.parquet")
        amqpd_df().write.parquet(parquet)
        parquet_rate = timed(lambda: spark.read.parquet(parquet))
        spark.stop()
        pika_rate = pika_loop(broker.url, args.messages)

    print(f"\nbatch read of {args.messages:,} × {args.size} B on local[2] (best of {args.rounds}):")
    print(f"  {'reader':<28}{'rows/s':>12}{'vs amqpd.spark':>16}")
    for name, rate in (("amqpd.spark (format amqpd)", amqpd_rate), ("Spark on local Parquet", parquet_rate),
                       ("pika consumer loop", pika_rate)):
        print(f"  {name:<28}{rate:>12,.0f}{rate / amqpd_rate:>16.2f}")
    print(f"  amqpd.spark / pika loop: {amqpd_rate / pika_rate:.1f}×")


if __name__ == "__main__":
    main()
