"""The connector on a Spark standalone cluster: a master and two workers started from pyspark's own
bin/spark-class, each a JVM of its own, executors started by the workers, drivers in processes of their own
(tests/spark/cluster_jobs.py). A batch read across both executors; a streaming query whose driver is killed
in a micro-batch and restarted from its checkpoint; the exactly-once writer with an executor killed in a
micro-batch, after it published part of it; examples/spark_pipeline.py pointed at the cluster's master."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_streams import declare_stream, publish, reader
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from amqpd.spark.positions import AmqpPositions
from amqpd.spark.wire import Endpoint
from amqpd.testing import BrokerProcess
from amqpd.testing.spark_cluster import StandaloneCluster
from examples import spark_pipeline as pipeline

pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).with_name("cluster_jobs.py")
WAIT_S = 600.0
DEDUP = {"x-message-deduplication": True, "x-cache-size": 100_000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), root=ROOT)
    try:
        yield c.start()
    finally:
        c.stop()


def _launch(cluster: StandaloneCluster, job: str, tmp_path: Path, **args: Any) -> subprocess.Popen[str]:
    # rows reach the writer in Arrow batches of this many: small, so that a task publishes some before it is held
    args["conf"] = {**cluster.conf, "spark.sql.execution.arrow.maxRecordsPerBatch": "200"}
    return subprocess.Popen(
        [sys.executable, str(JOBS), job, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / f"{job}-driver.log").open("a"),
        text=True,
        env=cluster.env,
    )


def _result(driver: subprocess.Popen[str], tmp_path: Path, job: str) -> dict[str, Any]:
    try:
        out, _ = driver.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        driver.kill()
        driver.wait()
        raise
    log = (tmp_path / f"{job}-driver.log").read_text(errors="replace")
    assert driver.returncode == 0, f"the {job} driver failed:\n{log[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def _run(cluster: StandaloneCluster, job: str, tmp_path: Path, **args: Any) -> dict[str, Any]:
    return _result(_launch(cluster, job, tmp_path, **args), tmp_path, job)


def _wait_for(what: str, check: Callable[[], bool], driver: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert driver.poll() is None, f"the driver ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        time.sleep(0.1)


def test_a_batch_read_runs_on_both_executors_and_returns_every_message(
    cluster: StandaloneCluster, broker: BrokerProcess, stream_name: Callable[[str], str], tmp_path: Path
) -> None:
    import pika

    name = stream_name("cluster-batch")
    declare_stream(broker, name)
    publish(
        broker,
        name,
        [f"m{i}".encode() for i in range(2000)],
        lambda i: pika.BasicProperties(message_id=f"id{i}", headers={"n": i}),
    )
    result = _run(cluster, "batch", tmp_path, uri=broker.url, queue=name, per_partition=500)
    assert result["executors"] == 2 and result["partitions"] == 4
    rows = sorted(tuple(r) for r in result["rows"])
    assert rows == [(name, i, f"m{i}", f"id{i}", {"n": str(i)}) for i in range(2000)]


def _sink_offsets(spark: SparkSession, path: Path) -> Counter[tuple[str, int]]:
    return Counter((r.stream, r.offset) for r in spark.read.parquet(str(path)).select("stream", "offset").collect())


def test_a_query_whose_driver_is_killed_mid_batch_goes_on_from_its_checkpoint_once_each(
    cluster: StandaloneCluster,
    broker: BrokerProcess,
    spark: SparkSession,
    stream_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    a, b = stream_name("cluster-sa"), stream_name("cluster-sb")
    for name in (a, b):
        declare_stream(broker, name)
        publish(broker, name, [f"{name}-{i}".encode() for i in range(300)])
    sink, checkpoint, marker = tmp_path / "sink", tmp_path / "checkpoint", tmp_path / "held"
    common = {"uri": broker.url, "queue": f"{a},{b}", "per_trigger": 100, "sink": str(sink)}
    # batches of 100 offsets shared by backlog: the third batch holds a's offset 120
    driver = _launch(cluster, "stream", tmp_path, checkpoint=str(checkpoint), marker=str(marker), stop_at=120, **common)
    try:
        _wait_for("held batch", marker.exists, driver)
        assert (checkpoint / "commits" / "1").exists() and not (checkpoint / "commits" / "2").exists()
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    publish(broker, a, [f"{a}-late-{i}".encode() for i in range(50)])

    result = _run(cluster, "stream", tmp_path, checkpoint=str(checkpoint), **common)
    assert sum(result["batches"]) == 650 - 200  # two batches were committed before the kill
    assert max(result["batches"]) <= 100
    expected = Counter([(a, o) for o in range(350)] + [(b, o) for o in range(300)])
    assert _sink_offsets(spark, sink) == expected  # every offset once: the killed batch's files are not in the sink


def test_the_exactly_once_writer_leaves_each_row_once_when_an_executor_is_killed_mid_batch(
    cluster: StandaloneCluster,
    broker: BrokerProcess,
    spark: SparkSession,
    stream_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = stream_name("cluster-src"), stream_name("cluster-dst")
    declare_stream(broker, source)
    declare_stream(broker, target, **DEDUP)
    # bodies of 1 kB: what the held task published passes every 64 kB buffer on its way (Python workers', ours)
    publish(broker, source, [f"row-{i}-".encode() + b"x" * 1000 for i in range(3000)])
    marker = tmp_path / "held"
    positions = AmqpPositions(Endpoint.parse(broker.url))
    driver = _launch(
        cluster,
        "sink",
        tmp_path,
        uri=broker.url,
        queue=source,
        target=target,
        per_trigger=1000,
        checkpoint=str(tmp_path / "checkpoint"),
        marker=str(marker),
        stop_at=1700,  # in the second micro-batch, 700 rows in
    )
    try:
        _wait_for("held batch", marker.exists, driver)
        # the first batch is all in, and part of the second: the held task had published before it stopped
        _wait_for("part of the held batch published", lambda: positions.bounds(target).end > 1000, driver)
        executor = cluster.executor_of(int(marker.read_text()))
        os.kill(executor, signal.SIGKILL)
        result = _result(driver, tmp_path, "sink")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert sum(result["batches"]) == 3000
    ids = Counter(r.message_id for r in reader(spark, broker, target).select("message_id").collect())
    assert ids == Counter(f"{source}:{o}" for o in range(3000))  # every row once


def _apps(cluster: StandaloneCluster) -> list[set[str]]:
    """Each worker's application directories: one per application it ran an executor for."""
    return [{d.name for d in (cluster.work / f"worker{i}").glob("app-*")} for i in range(cluster.worker_count)]


def test_the_example_pipeline_runs_on_the_cluster_given_its_master(
    cluster: StandaloneCluster, spark: SparkSession, tmp_path: Path
) -> None:
    before = _apps(cluster)
    settings = [f"--conf={k}={v}" for k, v in cluster.conf.items() if k != "spark.master"]
    with BrokerProcess() as own:  # the example's streams have fixed names: a broker of its own
        command = [sys.executable, str(ROOT / "examples" / "spark_pipeline.py"), "--uri", own.url]
        run = subprocess.run(
            [*command, "--master", cluster.master_url, "--events", "2000", *settings],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            env=cluster.env,
        )
        assert run.returncode == 0, f"the example failed:\n{run.stderr[-4000:]}"
        assert "published 2001 events" in run.stdout
        per_minute = pipeline.body_json(
            pipeline.source(spark, own.url, None, pipeline.PER_MINUTE, streaming=False),
            StructType.fromDDL("minute string, action string, count long"),
        ).collect()
    assert sum(r["count"] for r in per_minute) == 2000  # all but the tick, whose minute is not final
    assert max(Counter((r.minute, r.action) for r in per_minute).values()) == 1
    assert all(after - was for was, after in zip(before, _apps(cluster), strict=True))  # on both workers
