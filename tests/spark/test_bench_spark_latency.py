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
    assert "load average" in report
