"""The cluster latency bench (bench/spark_latency.py) in miniature, as a user runs it: its own amqpd and
standalone cluster, a few hundred messages through the pipeline, every one of them in the target stream. The
figure itself is the full run's (`python -m bench.spark_latency`, docs/performance.md): nothing here is timed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.spark_latency import batch_summary

pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parents[2]


def test_the_latency_bench_gets_every_message_through_the_cluster_and_reports_its_percentiles() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "bench.spark_latency", "--rate", "200", "--seconds", "3", "--warmup", "1"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1100, env=env, cwd=ROOT)
    assert run.returncode == 0, f"the bench failed:\n{run.stderr[-4000:]}"
    report = run.stdout
    counts = re.search(r"published ([\d,]+) at .* received ([\d,]+) in the target stream; ([\d,]+) measured", report)
    assert counts, report
    published, received, measured = (int(n.replace(",", "")) for n in counts.groups())
    assert published > 0 and received == published, report  # every message came through, once
    assert 0 < measured < published, report  # the warm-up's are left out
    assert re.search(r"p50 [\d,]+ ms +p99 [\d,]+ ms +p99.9 [\d,]+ ms +max [\d,]+ ms", report), report
    # the measured run's micro-batches read the published messages: at least one, each part of its durationMs
    batches = re.search(r"micro-batches: ([\d,]+) with rows, rows [\d,]+ median / ([\d,]+) max; durationMs", report)
    assert batches and int(batches[1].replace(",", "")) >= 1 and int(batches[2].replace(",", "")) >= 1, report
    for part in ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution"):
        assert re.search(rf"{part} [\d,]+/[\d,]+", report), (part, report)
    assert "load average" in report


def _progress(batch: int, rows: int, add_batch: int) -> dict[str, object]:
    """A query progress report as Spark gives it (StreamingQueryProgress.json), reduced to what the summary reads."""
    durations = {"latestOffset": 3, "queryPlanning": 20, "walCommit": 10, "getBatch": 0, "commitOffsets": 12}
    durations |= {"addBatch": add_batch, "triggerExecution": add_batch + 45}
    return {"batchId": batch, "timestamp": "2026-11-29T03:00:00.000Z", "numInputRows": rows, "durationMs": durations}


def test_the_micro_batch_summary_gives_median_and_max_of_the_batches_that_read_rows() -> None:
    progress = [_progress(0, 0, 1), _progress(1, 100, 300), _progress(2, 5_000, 900), _progress(3, 2_000, 500)]
    summary = batch_summary(progress)
    assert summary.count == 3  # the empty trigger is left out
    assert summary.rows == (2_000, 5_000)
    assert summary.parts["addBatch"] == (500, 900)
    assert summary.parts["triggerExecution"] == (545, 945)
    line = summary.report()
    assert "3 with rows, rows 2,000 median / 5,000 max" in line
    assert "addBatch 500/900" in line and "walCommit 10/10" in line
    assert batch_summary([_progress(0, 0, 1)]).report().endswith("none with rows in the query progress")
