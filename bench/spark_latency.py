"""`python -m bench.spark_latency`: streaming end-to-end latency of an amqpd → Spark → amqpd pipeline on a Spark
standalone cluster.

    python -m bench.spark_latency [--rate 20000] [--seconds 30] [--warmup 5]
                                  [--trigger-ms 0] [--max-per-trigger N] [--partitions 2]

Starts its own amqpd (ephemeral ports, a temporary data directory) and a Spark standalone cluster from
pyspark's own spark-class: a master and two workers, each running one executor of one core
(amqpd/testing/spark_cluster.py); this process is the driver. A publisher process publishes messages as
applications do (each its own message_id, the AMQP timestamp, content_type application/json, a header, a
JSON body whose first field is the publish time in ns) at a fixed rate into one stream; a Structured
Streaming query reads it with amqpd's source and writes body, message_id, content_type and headers with
amqpd's sink to a second stream; a consumer process (pika, prefetch 2,000) there takes each message's
latency as its receipt time minus its publish time. Before the paced publishing, rounds of a few messages
are sent through and waited for (the executors' Python workers start with the first micro-batches that
have rows: the time is reported); messages published during the first `--warmup` seconds are left out as well.
Prints p50, p99, p99.9 and the maximum, the rate the publisher achieved, whether every message arrived, a
summary of the micro-batches that ran while publishing (their count, rows, and the median and maximum of each
part of their durationMs from the query progress), and the load average. Bounded: the cluster's start (90 s a
JVM), the query's first trigger (300 s), the primer (300 s), publishing (`--seconds`), the drain after it (60
s). Needs the `spark` extra and Java 17.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import datetime
import json
import multiprocessing
import os
import queue
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika

from amqpd.testing import BrokerProcess

SOURCE, TARGET = "bench-latency-in", "bench-latency-out"
SENT_PREFIX = b'{"sent_ns": '  # every body starts with it, then the publish time in 19 digits
SENT_AT = slice(len(SENT_PREFIX), len(SENT_PREFIX) + 19)
QUERY_START_S = 300.0  # the driver's Python source runner and first offsets, on a loaded machine
DRAIN_S = 60.0
START_S = 60.0  # a spawned process's imports and connection on a busy machine
# Before the paced publishing, the pipeline is primed: rounds of a few messages each waited for in the target,
# until the executors' Python workers have started and imported what they need (a minute on a busy machine).
PRIMER, PRIMER_ROUNDS, PRIMER_S = 200, 3, 300.0


@dataclass
class Latency:
    rate: int
    achieved: float  # msg/s the publisher sent at
    published: int
    received: int  # all of them, warm-up included (the primer's left out)
    measured: int  # those published after the warm-up
    first_through: float  # s for the primer's rounds to come through: the pipeline's start
    percentiles: dict[str, float]  # ms
    load: tuple[float, float, float]  # the 1-minute average at start, at the end, and the 5-minute at the end
    batches: BatchSummary

    def report(self, shape: str) -> str:
        p = self.percentiles
        return "\n".join(
            [
                f"streaming end-to-end latency on a Spark standalone cluster (2 workers × 1 core) — {shape}",
                f"  asked {self.rate:,} msg/s, published {self.published:,} at {self.achieved:,.0f} msg/s; "
                f"received {self.received:,} in the target stream; {self.measured:,} measured after the warm-up",
                f"  primed in {self.first_through:.1f} s ({PRIMER_ROUNDS} rounds of {PRIMER} messages through the "
                "pipeline before the paced publishing)",
                f"  p50 {p['p50']:,.0f} ms   p99 {p['p99']:,.0f} ms   p99.9 {p['p99.9']:,.0f} ms   "
                f"max {p['max']:,.0f} ms",
                self.batches.report(),
                f"  load average {self.load[0]:.1f} at start, {self.load[1]:.1f} at the end "
                f"(5 min: {self.load[2]:.1f}); {os.cpu_count()} cores",
            ]
        )


# the parts of a micro-batch's durationMs in the query progress, in the order Spark runs them
DURATION_PARTS = (
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "getBatch",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


@dataclass
class BatchSummary:
    """The micro-batches that read rows during the measured run: how many, their rows and each durationMs part
    (median and max, ms)."""

    count: int
    rows: tuple[float, float]  # median, max
    parts: dict[str, tuple[float, float]]  # part: (median, max) ms

    def report(self) -> str:
        if not self.count:
            return "  micro-batches: none with rows in the query progress"
        parts = "  ".join(f"{name} {med:,.0f}/{top:,.0f}" for name, (med, top) in self.parts.items())
        return (
            f"  micro-batches: {self.count:,} with rows, rows {self.rows[0]:,.0f} median / {self.rows[1]:,.0f} max; "
            f"durationMs median/max: {parts}"
        )


def _started_ns(progress: dict[str, Any]) -> int:
    """When a progress report's trigger started (its `timestamp`, ISO 8601 in UTC), in ns since the epoch."""
    when = datetime.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return int(when.timestamp() * 1e9)


def batch_summary(progress: list[dict[str, Any]]) -> BatchSummary:
    """From the query's progress reports (dicts): those of batches that read rows."""
    ran = [p for p in progress if p.get("numInputRows", 0) > 0]

    def med_max(values: list[float]) -> tuple[float, float]:
        values = sorted(values)
        return (values[len(values) // 2], values[-1]) if values else (float("nan"), float("nan"))

    parts = {
        name: med_max([float(p["durationMs"][name]) for p in ran if name in p.get("durationMs", {})])
        for name in DURATION_PARTS
    }
    return BatchSummary(len(ran), med_max([float(p["numInputRows"]) for p in ran]), parts)


def body_for(i: int, sent_ns: int, rng: random.Random) -> bytes:
    """A JSON event of 80-400 B whose first field is its publish time (the consumer reads it at a fixed place)."""
    note = "abcdefghijklmnopqrstuvwxyz0123456789" * 12
    head = f'{SENT_PREFIX.decode()}{sent_ns:019d}, "id": {i}, "user": "u{rng.randrange(100_000)}", "note": "'
    return (head + note[: max(rng.randrange(80, 401) - len(head) - 2, 0)] + '"}').encode()


def publish_primer(url: str, count: int) -> None:
    from amqpd.spark.wire import Endpoint, Outgoing, Publisher

    publisher = Publisher(Endpoint.parse(url))
    rng = random.Random(0)
    for i in range(count):
        publisher.publish(Outgoing(body=body_for(i, time.time_ns(), rng), routing_key=SOURCE))
    publisher.flush()
    publisher.close()


def publish_paced(url: str, rate: int, seconds: float, results: Any) -> None:
    """`rate` messages per second for `seconds`, in 5 ms ticks, confirmed; puts (published, start ns, elapsed s)."""
    from amqpd.spark.wire import Endpoint, Outgoing, Publisher

    rng = random.Random(31)
    publisher = Publisher(Endpoint.parse(url), window=20_000)
    started, started_ns = time.monotonic(), time.time_ns()
    sent = 0
    while (elapsed := time.monotonic() - started) < seconds:
        for i in range(sent, int(elapsed * rate)):
            now_ns = time.time_ns()
            publisher.publish(
                Outgoing(
                    body=body_for(i, now_ns, rng),
                    routing_key=SOURCE,
                    message_id=f"msg-{i:08d}-{rng.getrandbits(32):08x}",
                    content_type="application/json",
                    headers={"source": rng.choice(("web", "mobile", "batch"))},
                    timestamp=now_ns // 1_000_000_000,
                )
            )
            sent = i + 1
        publisher.flush()
        time.sleep(0.005)
    publisher.flush()
    publisher.close()
    results.put((sent, started_ns, time.monotonic() - started))


def consume_target(url: str, ready: Any, count: Any, expected: Any, results: Any) -> None:
    """Every message of the target stream: its publish time and receipt time (ns), until `expected` gives the
    count published and they are all in, or DRAIN_S after it does; `count` says how many so far. Puts the
    two arrays."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2_000)
    sent, got = array.array("q"), array.array("q")

    def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
        got.append(time.time_ns())
        sent.append(int(body[SENT_AT]))
        count.value = len(got)
        if len(got) % 500 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)

    ch.basic_consume(TARGET, on_message, arguments={"x-stream-offset": "first"})
    ready.set()
    total: int | None = None
    deadline = float("inf")
    while total is None or (len(got) < total and time.monotonic() < deadline):
        conn.process_data_events(time_limit=0.2)
        if total is None:
            try:
                total = expected.get_nowait()
                deadline = time.monotonic() + DRAIN_S
            except queue.Empty:
                pass
    results.put((sent, got))
    # pika's close cancels the consumer and rejects the deliveries it still holds, which a stream refuses
    # (540, as RabbitMQ's does): the results are out already, the broker closes the connection
    with contextlib.suppress(pika.exceptions.AMQPError):
        conn.close()


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return dict.fromkeys(("p50", "p99", "p99.9", "max"), float("nan"))
    at = {name: values[min(int(len(values) * q), len(values) - 1)] for name, q in (("p50", 0.5), ("p99", 0.99))}
    return {**at, "p99.9": values[min(int(len(values) * 0.999), len(values) - 1)], "max": values[-1]}


def declare_streams(url: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    for name in (SOURCE, TARGET):
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()


def start_query(spark: Any, url: str, checkpoint: str, options: dict[str, Any]) -> Any:
    reader = (
        spark.readStream.format("amqpd")
        .option("uri", url)
        .option("queue", SOURCE)
        .option("includeHeaders", "true")
        .option("minPartitions", str(options["partitions"]))
    )
    if options.get("max_per_trigger"):
        reader = reader.option("maxOffsetsPerTrigger", str(options["max_per_trigger"]))
    writer = (
        reader.load()
        .select("body", "message_id", "content_type", "headers")
        .writeStream.format("amqpd")
        .option("uri", url)
        .option("routing_key", TARGET)
        .option("checkpointLocation", checkpoint)
    )
    if options.get("trigger_ms"):
        writer = writer.trigger(processingTime=f"{options['trigger_ms']} milliseconds")
    return writer.start()


def cluster_session(conf: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    from amqpd.spark import register

    builder = SparkSession.builder.appName("bench.spark_latency")
    # every micro-batch's progress is kept for the summary (Spark keeps the last 100 by default)
    settings = {
        **conf,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _wait_first_trigger(query: Any) -> None:
    deadline = time.monotonic() + QUERY_START_S
    while query.lastProgress is None:
        if query.exception() is not None or not query.isActive:
            raise RuntimeError(f"the query stopped: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the query ran no trigger within {QUERY_START_S:.0f} s")
        time.sleep(0.1)


def _wait_count(count: Any, least: int, consumer: Any) -> None:
    deadline = time.monotonic() + PRIMER_S
    while count.value < least:
        if not consumer.is_alive():
            raise RuntimeError("the consumer ended")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the primer's {least} messages did not come through within {PRIMER_S:.0f} s")
        time.sleep(0.05)


def _get(results: Any, what: str, timeout: float) -> Any:
    try:
        return results.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"no {what} within {timeout:.0f} s") from None


def measure(url: str, spark: Any, work: Path, rate: int, seconds: float, warmup: float, **options: Any) -> Latency:
    """One run on a running broker and cluster session: the query, the publisher and the consumer."""
    load_start = os.getloadavg()[0]
    declare_streams(url)
    query = start_query(spark, url, str(work / "checkpoint"), options)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that runs a JVM's gateway threads
    ready, expected, published_q, received_q = ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    count = ctx.RawValue("q", 0)  # one writer: no lock needed
    consumer = ctx.Process(target=consume_target, args=(url, ready, count, expected, received_q), daemon=True)
    publisher = ctx.Process(target=publish_paced, args=(url, rate, seconds, published_q), daemon=True)
    try:
        _wait_first_trigger(query)
        consumer.start()
        if not ready.wait(START_S):
            raise RuntimeError(f"the consumer did not start within {START_S:.0f} s")
        primed = time.monotonic()
        for round_ in range(1, PRIMER_ROUNDS + 1):
            publish_primer(url, PRIMER)
            _wait_count(count, round_ * PRIMER, consumer)
        first_through = time.monotonic() - primed
        publisher.start()
        published, started_ns, elapsed = _get(published_q, "end of publishing", seconds + START_S + 60)
        expected.put(PRIMER * PRIMER_ROUNDS + published)
        sent, got = _get(received_q, "consumer's result", DRAIN_S + 30)
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        query.stop()
        for proc in (publisher, consumer):
            if proc.pid is not None:  # started
                proc.terminate()
                proc.join(10)
    measure_from = started_ns + int(warmup * 1e9)
    latencies = [(g - s) / 1e6 for s, g in zip(sent, got, strict=True) if s >= measure_from]
    one, five, _ = os.getloadavg()
    return Latency(
        rate=rate,
        achieved=published / elapsed,
        published=published,
        received=len(got) - PRIMER * PRIMER_ROUNDS,
        measured=len(latencies),
        first_through=first_through,
        percentiles=percentiles(latencies),
        load=(load_start, one, five),
        batches=batch_summary([p for p in progress if _started_ns(p) >= started_ns // 1_000_000 * 1_000_000]),
    )


def run(rate: int, seconds: float, warmup: float, **options: Any) -> Latency:
    """Its own broker and cluster, started and stopped: options are trigger_ms, max_per_trigger, partitions."""
    from amqpd.testing.spark_cluster import StandaloneCluster

    options.setdefault("partitions", 2)
    with BrokerProcess() as broker, tempfile.TemporaryDirectory(prefix="bench-spark-latency-") as tmp:
        with StandaloneCluster(Path(tmp) / "cluster") as cluster:
            spark = cluster_session(cluster.conf)
            try:
                return measure(broker.url, spark, Path(tmp), rate, seconds, warmup, **options)
            finally:
                spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20_000, help="messages per second to publish")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to publish")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of publishing left out")
    parser.add_argument("--trigger-ms", type=int, default=0, help="processing-time trigger (0: Spark's default)")
    parser.add_argument("--max-per-trigger", type=int, default=0, help="maxOffsetsPerTrigger (0: none)")
    parser.add_argument("--partitions", type=int, default=2, help="minPartitions: tasks per micro-batch")
    args = parser.parse_args()
    result = run(
        args.rate,
        args.seconds,
        args.warmup,
        trigger_ms=args.trigger_ms,
        max_per_trigger=args.max_per_trigger,
        partitions=args.partitions,
    )
    trigger = f"trigger {args.trigger_ms} ms" if args.trigger_ms else "default trigger"
    cap = f"maxOffsetsPerTrigger {args.max_per_trigger:,}" if args.max_per_trigger else "no maxOffsetsPerTrigger"
    print(result.report(f"{trigger}, {cap}, minPartitions {args.partitions}, {args.seconds:.0f} s"))


if __name__ == "__main__":
    main()
