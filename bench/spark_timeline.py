"""`python -m bench.spark_timeline`: where the wall clock of one amqpd.spark batch read goes, on local[2].

    python -m bench.spark_timeline [--messages 1000000] [--rounds 3] [OPTION=VALUE ...]

Fills a stream as bench.spark does, then times whole reads (count and sum of body lengths, as the bench) and
prints, relative to the start of each read: when partitions() planned on the driver, and for each task when
read() was called, connected, had consume-ok, yielded its first batch and ended; then Spark's own view from
its event log (when each task was launched and finished, and the jobs). A task's finish after its read()'s
end is the JVM still turning the last batches into rows. OPTION=VALUE pairs are read options
(e.g. maxOffsetsPerPartition=250000).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from amqpd.testing import BrokerProcess
from bench.spark import STREAM, fill, local_session


def timed_source(log: str) -> type:
    """format("amqpd_timeline"): amqpd's source whose planning and partition reads append their times to `log`."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSourceReader, InputPartition

    from amqpd.spark import wire
    from amqpd.spark.options import ReadOptions
    from amqpd.spark.reader import BatchReader, read_partition
    from amqpd.spark.source import AmqpdDataSource

    def note(event: dict[str, Any]) -> None:
        with open(log, "a") as out:
            out.write(json.dumps(event) + "\n")

    class Reader(BatchReader):
        def partitions(self) -> Any:
            started = time.time()
            parts = super().partitions()
            note({"plan": started, "planned": time.time(), "partitions": len(parts)})
            return parts

        def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
            event: dict[str, Any] = {"range": [partition.start, partition.end], "read": time.time()}  # type: ignore[union-attr]
            link, consume = wire.Link, wire.StreamReader._consume  # noqa: SLF001

            def timed_link(*args: Any) -> Any:
                made = link(*args)
                event["connected"] = time.time()
                return made

            def timed_consume(reader: Any, *args: Any) -> None:
                consume(reader, *args)
                event["consume-ok"] = time.time()

            wire.Link, wire.StreamReader._consume = timed_link, timed_consume  # type: ignore[assignment,misc]  # noqa: SLF001
            try:
                for batch in read_partition(partition):
                    event.setdefault("first batch", time.time())
                    yield batch
            finally:
                wire.Link, wire.StreamReader._consume = link, consume  # type: ignore[misc,method-assign]  # noqa: SLF001
                event["end"] = time.time()
                note(event)

    class Timed(AmqpdDataSource):
        @classmethod
        def name(cls) -> str:
            return "amqpd_timeline"

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader(ReadOptions.parse(dict(self.options), streaming=False))

    return Timed


def spark_events(folder: Path, since: float) -> list[str]:
    """Spark's event log from `since` on: each task's launch and finish, each job's start and end."""
    lines = []
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        for raw in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a line still being written
            kind = event.get("Event")
            if kind == "SparkListenerTaskEnd":
                info = event["Task Info"]
                at = info["Launch Time"] / 1000
                if at >= since:
                    lines.append(
                        f"    stage {event['Stage ID']} task {info['Index']}: launched {at - since:+.3f}  "
                        f"finished {info['Finish Time'] / 1000 - since:+.3f}"
                    )
            elif kind in ("SparkListenerJobStart", "SparkListenerJobEnd"):
                at = event.get("Submission Time", event.get("Completion Time", 0)) / 1000
                if at >= since:
                    lines.append(f"    job {event['Job ID']} {kind[16:].lower()} {at - since:+.3f}")
    return sorted(lines, key=lambda line: float(line.split()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("options", nargs="*", metavar="OPTION=VALUE", help="read options")
    args = parser.parse_args()
    options = dict(pair.split("=", 1) for pair in args.options)

    from pyspark.sql import functions as F

    with BrokerProcess(management=True) as broker, tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        fill(broker.url, args.messages, args.size)
        log, events = Path(tmp) / "reads", Path(tmp) / "events"
        events.mkdir()
        events_log = {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false"}
        spark = local_session("bench.spark_timeline", {**events_log, "spark.eventLog.dir": str(events)})
        spark.dataSource.register(timed_source(str(log)))

        def read(**extra: str) -> Any:
            reader = spark.read.format("amqpd_timeline").option("uri", broker.url)
            reader = reader.option("managementUri", broker.mgmt_url).option("queue", STREAM)
            for key, value in {**options, **extra}.items():
                reader = reader.option(key, value)
            return reader.load().agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).collect()[0]

        read(endingOffsets=json.dumps({STREAM: 20_000}), minPartitions="2")  # as bench.spark warms up
        for round_ in range(args.rounds):
            log.write_text("")
            started = time.time()
            row = read()
            took = time.time() - started
            assert row.n == args.messages, f"read {row.n} rows, expected {args.messages}"
            print(f"round {round_ + 1}: {took:.3f} s, {row.n / took:,.0f} rows/s (times from the read's start)")
            for event in map(json.loads, log.read_text().splitlines()):
                if "plan" in event:
                    print(
                        f"  planned {event['partitions']} partitions {event['plan'] - started:+.3f} .. "
                        f"{event['planned'] - started:+.3f}"
                    )
                    continue
                steps = ("read", "connected", "consume-ok", "first batch", "end")
                times = "  ".join(f"{k} {event[k] - started:+.3f}" for k in steps if k in event)
                print(f"  task {event['range']}: {times}")
            time.sleep(1.5)  # Spark writes its event log in the background
            print("  Spark's event log:")
            print("\n".join(spark_events(events, started)))
        spark.stop()


if __name__ == "__main__":
    main()
