"""spark.readStream.format("amqpd"): checkpointed offsets, maxOffsetsPerTrigger, and a query stopped
mid-stream and restarted from its checkpoint delivering each message to the sink exactly once."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_streams import declare_stream, publish, reader
from pyspark.sql import SparkSession

from amqpd.spark.progress import stream_metrics
from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)  # a Spark job on a busy 2-core machine can take a while

DEADLINE = 60.0


def _sink_offsets(spark: SparkSession, path: Path) -> list[tuple[str, int]]:
    if not any(path.glob("*.parquet")):
        return []
    return sorted((r.stream, r.offset) for r in spark.read.parquet(str(path)).select("stream", "offset").collect())


def _behind(metrics: dict[str, dict[str, int | None]]) -> int | None:
    values = [m["offsetsBehind"] for m in metrics.values()]
    return None if None in values else sum(v or 0 for v in values)


def test_a_query_restarted_from_its_checkpoint_gives_the_sink_each_message_exactly_once(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str], tmp_path: Path
) -> None:
    a, b = stream_name("sa"), stream_name("sb")
    for name in (a, b):
        declare_stream(broker, name)
        publish(broker, name, [f"{name}-{i}".encode() for i in range(300)])
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def start(available_now: bool) -> object:
        df = reader(spark, broker, f"{a},{b}", streaming=True, startingOffsets="earliest", maxOffsetsPerTrigger=100)
        w = df.writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(checkpoint))
        return (w.trigger(availableNow=True) if available_now else w.trigger(processingTime="200 milliseconds")).start()

    first = start(available_now=False)
    deadline = time.monotonic() + DEADLINE
    while not first.recentProgress and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.1)
    first.stop()  # type: ignore[attr-defined]
    rows_before = len(_sink_offsets(spark, sink))
    publish(broker, a, [f"{a}-late-{i}".encode() for i in range(50)])

    second = start(available_now=True)
    assert second.awaitTermination(DEADLINE)  # type: ignore[attr-defined]
    batches = [p["numInputRows"] for p in second.recentProgress]  # type: ignore[attr-defined]
    assert batches and max(batches) <= 100  # maxOffsetsPerTrigger bounds each micro-batch
    assert sum(batches) == 650 - rows_before  # the restart went on from the checkpoint, not from earliest
    per_stream = [stream_metrics(p) for p in second.recentProgress]  # type: ignore[attr-defined]
    assert [sum(m["numInputRows"] or 0 for m in s.values()) for s in per_stream] == batches
    # What waits after each batch. A batch the first query had planned but not committed is run again without
    # asking the source for its latest offsets: Spark reports none for it (None), so only the others are checked.
    waiting = list(itertools.accumulate(batches, lambda left, rows: left - rows, initial=650 - rows_before))[1:]
    behind = [_behind(s) for s in per_stream]
    assert behind[-1] == 0
    assert [b for b in behind if b is not None] == [w for w, b in zip(waiting, behind, strict=True) if b is not None]
    assert _sink_offsets(spark, sink) == sorted([(a, o) for o in range(350)] + [(b, o) for o in range(300)])
    last = max((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    assert json.loads(last.read_text().splitlines()[-1]) == {a: 350, b: 300}  # next offset per stream


def test_a_stream_starting_at_latest_reads_only_what_comes_after_the_query_started(
    spark: SparkSession, broker: BrokerProcess, stream_name: Callable[[str], str], tmp_path: Path
) -> None:
    name = stream_name("latest")
    declare_stream(broker, name)
    publish(broker, name, [b"before"] * 20)
    df = reader(spark, broker, name, streaming=True)  # Kafka's default for a stream: latest
    query = (
        df.writeStream.format("memory")
        .queryName("latest_q")
        .option("checkpointLocation", str(tmp_path))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.1)
        publish(broker, name, [b"after"] * 5)
        got: list = []
        while len(got) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
            got = spark.sql("select offset, body from latest_q").collect()
    finally:
        query.stop()
    assert sorted((r.offset, r.body) for r in got) == [(o, b"after") for o in range(20, 25)]
