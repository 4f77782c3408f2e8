"""Celery's retry with a countdown, on top of amqpd's x-delayed-message exchange (issue 15).

Celery does not use rabbitmq_delayed_message_exchange by itself (a countdown on a classic queue is an `eta`
the worker holds; its native delayed delivery needs quorum queues, covered by interop/scenarios/celery_e2e.py).
Setups that use the plugin bind the task queue to an x-delayed-message exchange and send the countdown as
the `x-delay` header (the plugin's README: "publish messages with the header x-delay, in milliseconds");
tests/integration/celery_delayed_app.py is that wiring. A real worker runs the task; it fails twice and
retries with a countdown; each retry must run only after its countdown, exactly once, having waited in the
exchange (it arrives with the plugin's `x-delay: -ms` and no eta), and nothing is left waiting afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from celery_delayed_app import make_app
from waiting import wait_for

from amqpd.testing import BrokerProcess

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
QUEUE = "celery-delayed"
COUNTDOWN_S = 1.0
FAILURES = 2
pytestmark = pytest.mark.amqpd_only  # the reference RabbitMQ has no delayed-message plugin


def _start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        CELERY_DELAYED_BROKER=url,
        CELERY_DELAYED_QUEUE=QUEUE,
        CELERY_DELAYED_LOG=str(log),
        PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [sys.executable, "-m", "celery", "-A", "celery_delayed_app", "worker", "-P", "solo", "-c", "1"]
    cmd += ["--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "warning", "-n", "delayed@%h"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _stop_worker(worker: subprocess.Popen[bytes]) -> str:
    """Killed: the work is done by now and its shutdown is not under test (a warm or cold shutdown waits for
    the idle worker's event loop to wake up, 10 s here)."""
    if worker.poll() is None:
        worker.kill()
        worker.wait(10)
    return worker.stdout.read().decode(errors="replace")[-2000:] if worker.stdout else ""


def _queue_holds(broker: BrokerProcess) -> int:
    """Messages in the task queue, unacknowledged ones included."""
    queue = httpx.get(f"{broker.mgmt_url}/api/queues/%2F/{QUEUE}", auth=("guest", "guest"))
    return int(queue.json()["messages"])


def _left_over(broker: BrokerProcess) -> tuple[int, Any]:
    """Messages still in the task queue, and still waiting in the delayed exchange."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    in_queue = conn.channel().queue_declare(QUEUE, passive=True).method.message_count
    conn.close()
    exchange = httpx.get(f"{broker.mgmt_url}/api/exchanges/%2F/{QUEUE}.delayed", auth=("guest", "guest"))
    return in_queue, exchange.json()["messages_delayed"]


def test_celery_retry_with_countdown_waits_in_the_delayed_exchange_and_runs_once_per_retry(tmp_path: Path) -> None:
    log = tmp_path / "runs.jsonl"
    with BrokerProcess(management=True) as broker:
        url = broker.url.replace("amqp://", "pyamqp://", 1)
        worker = _start_worker(url, log)
        app = make_app(url, QUEUE)
        try:
            result = app.send_task("delayed.flaky", args=(FAILURES, COUNTDOWN_S))
            assert result.get(timeout=60) == FAILURES  # a bound on a hang; the run takes ~2 s plus start-up
            # The result comes back on another connection than the worker's ack of the last task message: a
            # kill before the broker has read that ack would requeue the message.
            wait_for(lambda: _queue_holds(broker) == 0, "the worker's ack of the last run", timeout=30)
        finally:
            output = _stop_worker(worker)
            app.close()
        runs_seen = log.read_text() if log.exists() else "(no run logged)"
        # no further run can come: nothing queued, nothing waiting
        assert _left_over(broker) == (0, 0), f"{output}\nruns:\n{runs_seen}"
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["retries"] for r in runs] == list(range(FAILURES + 1)), output  # exactly once per attempt
    for before, after in zip(runs, runs[1:], strict=False):
        # the retry was published during `before`, so it is due at least a countdown later (1 ms: the
        # broker's clock counts whole milliseconds)
        assert after["at"] >= before["at"] + COUNTDOWN_S - 0.001
        assert after["x_delay"] == -int(COUNTDOWN_S * 1000)  # delayed by the exchange (the plugin's -delay)
        assert after["eta"] is None  # not held by the worker
