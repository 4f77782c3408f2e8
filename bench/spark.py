"""`python -m bench.spark`: Spark batch-reading an amqpd stream through amqpd.spark, beside Spark reading the
same rows from a local Parquet file and beside a plain pika consumer loop, in the same run on local[2].

    python -m bench.spark [--messages 1000000] [--size 100]
    python -m bench.spark --latency 20000 [--seconds 30]   # streaming end-to-end latency at a fixed rate

Starts its own amqpd (ephemeral ports, a temporary data directory) and fills two streams with confirmed
publishes: the headline's, messages as applications publish them (each its own message_id, correlation_id,
timestamp, content_type and a header, JSON bodies of 80-400 B), and the bare shape (no properties, one
size) as a side row. Then times each reader over a whole stream (each forced to read every body), the
readers taking turns round by round, each as many rounds: the headline, a first read after publishing
(each round publishes a fresh stream of real traffic and reads it once, as the issue's user does: the broker
that received the messages reads them); the first read after a restart (the broker is restarted before it,
so that it checks every record, as after any cold start), and a repeat read, of the real stream; the bare
stream; Parquet of the real rows; Spark's floor. Prints rows/s, the ratios and the load average, and for
each amqpd round the CPU per row of each share: the broker, Spark's JVM and its Python workers. The floor
row is Spark's own cost for any Python data source on this machine: one that yields a ready record batch
with the same schema and bodies over and over, with no I/O at all. Needs the `spark` extra and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika

from amqpd.spark.wire import BrokerError, Endpoint, Outgoing, Publisher, StreamReader
from amqpd.testing import BrokerProcess
from bench import procstat

STREAM = "bench-spark"
REAL = "bench-spark-real"


class Shares:
    """CPU seconds so far of the broker, Spark's JVM (this process's java child) and the Python workers
    under it, read from /proc before and after a timed read."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def now(self) -> dict[str, float]:
        jvm = [p for p in procstat.children(os.getpid()) if procstat.command_line(p)[0].endswith("java")]
        own = sum(procstat.cpu_seconds(p) for p in jvm)
        return {
            "broker": procstat.cpu_seconds(self.broker_pid),
            "JVM": own,
            "Python workers": sum(procstat.tree_cpu_seconds(p) for p in jvm) - own,
        }

    @staticmethod
    def per_row(before: dict[str, float], after: dict[str, float], rows: int) -> str:
        used = {k: (after[k] - before[k]) / rows * 1e6 for k in before}
        return "  ".join(f"{k} {v:.2f}" for k, v in used.items()) + f"  (all {sum(used.values()):.2f})"


def local_session(app: str, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession on local[2] as every Spark bench runs one (no UI or progress bars, 2 shuffle partitions,
    a 2 GB driver), plus `conf`."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName(app)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def floor_source(rows: int, size: int) -> type:
    """A Python data source with amqpd's schema that yields one ready record batch again and again (two
    partitions of rows/2): what Spark itself costs per row for a Python data source, with no I/O at all."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from amqpd.spark.rows import arrow_schema, schema_ddl

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(rows // 2), InputPartition(rows - rows // 2)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            n = 32_768
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array(range(n), pa.int64()),
                    pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                    pa.array([STREAM] * n),
                    pa.array([""] * n),
                    pa.array([STREAM] * n),
                    *[pa.nulls(n, pa.string())] * 3,
                    pa.array([b"x" * size] * n, pa.binary()),
                ],
                schema=arrow_schema(False),
            )
            left = partition.value
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_floor"

        def schema(self) -> str:
            return schema_ddl(False)

        def reader(self, schema: object) -> DataSourceReader:
            return Reader()

    return Floor


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


def real_messages(stream: str, messages: int, seed: int = 31) -> Iterator[Outgoing]:
    """Messages as applications publish them: each its own message_id, correlation_id, timestamp, a
    content_type, a header, and a JSON body of 80-400 bytes."""
    import random

    rng = random.Random(seed)
    pad = "abcdefghijklmnopqrstuvwxyz0123456789" * 12
    now = int(time.time())
    for i in range(messages):
        event = {"id": i, "user": f"u{rng.randrange(100_000)}", "action": rng.choice(("view", "buy", "cart"))}
        head = json.dumps(event)
        body = json.dumps({**event, "note": pad[: max(rng.randrange(80, 401) - len(head) - 12, 0)]}).encode()
        yield Outgoing(
            body=body,
            routing_key=stream,
            message_id=f"msg-{i:08d}-{rng.getrandbits(32):08x}",
            correlation_id=f"req-{rng.getrandbits(48):012x}",
            content_type="application/json",
            headers={"source": rng.choice(("web", "mobile", "batch"))},
            timestamp=now - (messages - i) // 1000,
        )


def fill_real(url: str, stream: str, messages: int) -> float:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    publisher = Publisher(Endpoint.parse(url), window=5_000)
    started = time.perf_counter()
    for msg in real_messages(stream, messages):
        publisher.publish(msg)
    publisher.flush()
    publisher.close()
    return messages / (time.perf_counter() - started)


def _delete(url: str, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_delete(queue)
    conn.close()


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


def paced_publisher(url: str, stream: str, rate: int, seconds: float, size: int, stop: threading.Event) -> None:
    """`rate` messages per second for `seconds`, in 10 ms ticks; each body starts with its publish time (ns)."""
    publisher = Publisher(Endpoint.parse(url), window=20_000)
    pad = b"x" * max(size - 8, 0)
    started = time.monotonic()
    sent = 0
    while not stop.is_set() and time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        for _ in range(due - sent):
            publisher.publish(Outgoing(body=struct.pack(">q", time.time_ns()) + pad, routing_key=stream))
        sent = max(sent, due)
        publisher.flush()
        time.sleep(0.01)
    publisher.close()


def latency(rate: int, seconds: float, size: int) -> None:
    """End to end as a pipeline sees it: publish into `bench-latency` → Spark reads it (default trigger) →
    writes the bodies to `bench-latency-out` → a consumer there gets them; each body carries its publish time."""
    from amqpd.spark import register
    from amqpd.spark.reader import arrow_batches

    stream, out = "bench-latency", "bench-latency-out"
    warmup_s = 5.0
    with BrokerProcess(management=True) as broker, tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        for name in (stream, out):
            conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        conn.close()
        spark = local_session("bench.spark latency")
        register(spark)
        query = (
            spark.readStream.format("amqpd")
            .option("uri", broker.url)
            .option("queue", stream)
            .load()
            .select("body")
            .writeStream.format("amqpd")
            .option("uri", broker.url)
            .option("routing_key", out)
            .option("checkpointLocation", tmp)
            .start()
        )
        # Spark's own start (the JVM's and the Python workers' imports, the first empty micro-batch) takes
        # seconds on a busy machine: publishing begins once the query has run its first batch, so the
        # figures are the pipeline's steady state rather than its start-up backlog draining.
        started = time.monotonic()
        while query.lastProgress is None and time.monotonic() - started < 120:
            time.sleep(0.1)
        seen: list[float] = []
        t0 = time.time_ns()

        def consume() -> None:
            reader = StreamReader(Endpoint.parse(broker.url), out, 0, 1 << 62, with_headers=False, batch_rows=100)
            try:
                for batch in arrow_batches(reader):
                    now = time.time_ns()
                    stamps = [struct.unpack_from(">q", body)[0] for body in batch.column("body").to_pylist()]
                    seen.extend((now - s) / 1e6 for s in stamps if s - t0 > warmup_s * 1e9)
            except (BrokerError, OSError):
                return  # the broker stopped at the end of the run

        threading.Thread(target=consume, daemon=True).start()
        stop = threading.Event()
        pub = threading.Thread(target=paced_publisher, args=(broker.url, stream, rate, seconds, size, stop))
        pub.start()
        pub.join()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < int(rate * (seconds - warmup_s) * 0.99):
            time.sleep(0.2)
        query.stop()
        spark.stop()
    seen.sort()
    if not seen:
        print("no messages measured")
        return
    pct = {q: seen[min(int(len(seen) * q), len(seen) - 1)] for q in (0.5, 0.99)}
    print(
        f"streaming end-to-end latency at {rate:,} msg/s × {size} B for {seconds:.0f} s (after {warmup_s:.0f} s "
        f"warm-up): publish → Spark reads → Spark writes to another stream → consumer, {len(seen):,} messages:"
    )
    print(f"  p50 {pct[0.5]:,.0f} ms   p99 {pct[0.99]:,.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5, help="reads per reader, in turns (the best is kept)")
    parser.add_argument("--latency", type=int, metavar="RATE", help="measure streaming latency at RATE msg/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="with --latency: how long to publish")
    args = parser.parse_args()
    if args.latency:
        latency(args.latency, args.seconds, args.size)
        return

    from pyspark.sql import functions as F

    from amqpd.spark import register

    print(f"load average at start: {_load()}", flush=True)
    with BrokerProcess() as broker, tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        print(f"filling {REAL} with {args.messages:,} messages as applications publish them …", flush=True)
        print(f"  confirmed publish: {fill_real(broker.url, REAL, args.messages):,.0f} msg/s", flush=True)
        print(f"filling {STREAM} with {args.messages:,} bare messages of {args.size} B …", flush=True)
        print(f"  confirmed publish: {fill(broker.url, args.messages, args.size):,.0f} msg/s", flush=True)
        spark = local_session("bench.spark")
        register(spark)

        def amqpd_df(stream: str):  # type: ignore[no-untyped-def]
            return spark.read.format("amqpd").option("uri", broker.url).option("queue", stream).load()

        def timed(name: str, make, shares: Shares | None = None) -> float:  # type: ignore[no-untyped-def]
            before = shares.now() if shares else {}
            started = time.perf_counter()
            row = make().agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).collect()[0]
            rate = row.n / (time.perf_counter() - started)
            assert row.n == args.messages, f"read {row.n} rows, expected {args.messages}"
            used = f", µs CPU per row: {Shares.per_row(before, shares.now(), row.n)}" if shares else ""
            print(f"  {name}: {rate:,.0f} rows/s{used}", flush=True)
            return rate

        def warm() -> None:
            """A small read in two partitions, so that both Python workers local[2] runs are started: the
            session's first job pays for the JVM's class loading and the workers' start (seconds), and Spark
            stops a Python worker idle for a minute (its PythonWorkerFactory), as during a publish."""
            (
                spark.read.format("amqpd")
                .option("uri", broker.url)
                .option("queue", STREAM)
                .option("endingOffsets", json.dumps({STREAM: 20_000}))
                .option("minPartitions", "2")
                .load()
                .agg(F.count("*"))
                .collect()
            )

        warm()
        parquet = str(Path(tmp) / "rows.parquet")
        amqpd_df(REAL).write.parquet(parquet)  # the same rows as the headline's
        spark.dataSource.register(floor_source(args.messages, args.size))

        def read_before(stream: str) -> Shares:
            """An untimed read of `stream` first: the broker restarts before each round, and a repeat read is
            one of records this broker has read (and checked) since it started."""
            amqpd_df(stream).agg(F.sum(F.length("body"))).collect()
            return Shares(broker.proc.pid)  # type: ignore[union-attr]

        def restarted() -> Shares:
            """A first read is one the broker has not checked since it started (store/checked_runs.py)."""
            broker.stop()
            broker.start()
            assert broker.proc is not None
            return Shares(broker.proc.pid)

        def published(round_: int) -> Shares:
            """A stream freshly published to this broker (no restart since): its first read is what the
            broker wrote and fsynced itself (store/checked_runs.py). The last round's one goes first."""
            fresh = f"{REAL}-fresh-{round_}"
            if round_:
                _delete(broker.url, f"{REAL}-fresh-{round_ - 1}")
            fill_real(broker.url, fresh, args.messages)
            warm()  # the publish took long enough for Spark to stop its idle Python workers
            return Shares(broker.proc.pid)  # type: ignore[union-attr]

        readers = {
            "real traffic, first read after publishing": lambda round_: timed(
                "real, first read after publishing",
                lambda: amqpd_df(f"{REAL}-fresh-{round_}"),
                published(round_),
            ),
            "real traffic, first read after a restart": lambda _: timed(
                "real, first read after a restart", lambda: amqpd_df(REAL), restarted()
            ),
            "real traffic, repeat read": lambda _: timed(
                "real, repeat read",
                lambda: amqpd_df(REAL),
                Shares(broker.proc.pid),  # type: ignore[union-attr]
            ),
            "bare, repeat read": lambda _: timed(
                f"bare {args.size} B, repeat read",
                lambda: amqpd_df(STREAM),
                read_before(STREAM),
            ),
            "parquet": lambda _: timed("Parquet (the real rows)", lambda: spark.read.parquet(parquet)),
            "floor": lambda _: timed("no-I/O source", lambda: spark.read.format("bench_floor").load()),
        }
        # The readers take turns, round by round, each read `rounds` times: Spark's JVM keeps compiling over
        # the first millions of rows (its CPU per row falls for several reads whatever the source,
        # bench.spark_probe), so a reader timed only after the others had run would be measured on a warmer
        # JVM than they were. Each round publishes a fresh stream for the headline, then restarts the broker
        # for the read after a restart.
        best = dict.fromkeys(readers, 0.0)
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}:", flush=True)
            for name, read in readers.items():
                best[name] = max(best[name], read(round_))
        spark.stop()
        # as many rounds as each Spark reader had, the best kept: the loop's rate moves with the machine too
        pika_rates = [pika_loop(broker.url, args.messages) for _ in range(args.rounds)]
        print("pika consumer loop rounds (bare): " + ", ".join(f"{r:,.0f}" for r in pika_rates), flush=True)
        best["pika"] = max(pika_rates)

    headline = best["real traffic, first read after publishing"]
    print(f"\nbatch read of {args.messages:,} rows on local[2] (best of {args.rounds} each); load average {_load()}")
    print("real traffic: each message its own message_id, correlation_id, timestamp, content_type, a header, JSON")
    print(f"80-400 B; bare: {args.size} B, no properties")
    print(f"  {'reader':<50}{'rows/s':>12}{'vs headline':>13}")
    for name, rate in (
        ("amqpd.spark, real, first read after publishing", headline),
        ("amqpd.spark, real, first read after a restart", best["real traffic, first read after a restart"]),
        ("amqpd.spark, real, repeat read", best["real traffic, repeat read"]),
        (f"amqpd.spark, bare {args.size} B, repeat read", best["bare, repeat read"]),
        ("Spark on local Parquet (real rows)", best["parquet"]),
        ("Python source, no I/O (bare rows)", best["floor"]),
        ("pika consumer loop (bare)", best["pika"]),
    ):
        print(f"  {name:<50}{rate:>12,.0f}{rate / headline:>13.2f}")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
