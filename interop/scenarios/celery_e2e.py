"""Celery end to end: a worker (`celery -A interop.celery_app worker -P solo`) and a producer on kombu,
with results over the rpc:// backend, retries, countdown and ETA tasks, against both brokers."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from interop import pika_tools as pt
from interop.registry import scenario
from interop.runner import scenario_failure
from interop.scope import Scope

ROOT = Path(__file__).resolve().parents[2]
DELAYED_NAMES = [f"celery_delayed_{i}" for i in range(28)]


def _start_worker(url: str, queue: str, queue_type: str) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        INTEROP_CELERY_BROKER=url.replace("amqp://", "pyamqp://", 1),
        INTEROP_CELERY_QUEUE=queue,
        INTEROP_CELERY_QUEUE_TYPE=queue_type,
        PYTHONUNBUFFERED="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "interop.celery_app",
        "worker",
        "-P",
        "solo",
        "-c",
        "1",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "warning",
        "-n",
        f"interop-{queue}@%h",
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop_worker(p: subprocess.Popen[bytes]) -> str:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(8)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
    out = p.stdout.read().decode(errors="replace") if p.stdout else ""
    return out[-2000:]


def _producer_app(url: str, queue: str, queue_type: str) -> Any:
    os.environ["INTEROP_CELERY_QUEUE"] = queue  # celery_app reads its config at import; rebuild it here
    from celery import Celery
    from kombu import Exchange, Queue

    app = Celery("interop-producer", broker=url.replace("amqp://", "pyamqp://", 1), backend="rpc://")
    args = {"x-queue-type": "quorum"} if queue_type == "quorum" else None
    app.conf.update(
        task_queues=[
            Queue(
                queue,
                Exchange(queue, "direct", durable=queue_type == "quorum"),
                routing_key=queue,
                queue_arguments=args,
                durable=queue_type == "quorum",
            )
        ],
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        task_default_queue_type=queue_type,
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=0,
        task_send_sent_event=False,
    )
    return app


def _delayed_topology_exists(url: str) -> bool:
    conn = pt.connect(url)
    try:
        return "ok" in pt.expect_close(lambda: conn.channel().exchange_declare("celery_delayed_delivery", passive=True))
    finally:
        pt.close_quietly(conn)


def _run(url: str, queue_type: str, work: Any) -> Any:
    with Scope(url) as s:
        queue = s.queue("celery")
        s.track_exchange(queue)
        if queue_type == "quorum" and not _delayed_topology_exists(url):
            # Celery's native delayed delivery declares fixed, global names: delete them afterwards
            # only when this scenario is what created them.
            for n in DELAYED_NAMES:
                s.track_queue(n)
                s.track_exchange(n)
            s.track_exchange("celery_delayed_delivery")
        app = _producer_app(url, queue, queue_type)
        worker = _start_worker(url, queue, queue_type)
        log = ""
        try:
            result = work(app, s)
        finally:
            log = _stop_worker(worker)
            try:
                s.track_queue(app.backend.oid)  # the rpc:// reply queue (auto-delete, but be sure)
            except AttributeError:
                pass
            app.close()
        if scenario_failure(result) is not None:
            result["worker_log_tail"] = [ln for ln in log.splitlines() if "ERROR" in ln or "rror" in ln][-3:]
        return result


def _get(res: Any, timeout: float = 20) -> Any:
    try:
        return res.get(timeout=timeout, propagate=False)
    except Exception as e:  # celery.exceptions.TimeoutError etc.: the kind of failure is the observation
        return {"celery_failed": type(e).__name__}


def _basic(app: Any, s: Scope) -> Any:
    r1 = app.send_task("interop.add", args=(2, 3))
    r2 = app.send_task("interop.echo_headers", args=({"ü": [1, 2]},))
    return {"add": _get(r1), "echo": _get(r2), "state": r1.state}


def _retries(app: Any, s: Scope) -> Any:
    r = app.send_task("interop.flaky", args=("k", 2))
    bad = app.send_task("interop.always_fails")
    out = {"flaky": _get(r), "always_fails_state": None}
    _get(bad)
    out["always_fails_state"] = bad.state
    return out


def _countdown_eta(app: Any, s: Scope) -> Any:
    t0 = time.monotonic()
    r1 = app.send_task("interop.add", args=(1, 1), countdown=2)
    eta = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    r2 = app.send_task("interop.add", args=(2, 2), eta=eta)
    v1 = _get(r1, 25)
    v2 = _get(r2, 25)
    took = time.monotonic() - t0
    return {"countdown": v1, "eta": v2, "waited_at_least_1_5s": took >= 1.5, "done_within_20s": took < 20}


@scenario("celery", timeout=60)
def celery_tasks_with_results(url: str) -> Any:
    return _run(url, "classic", _basic)


@scenario("celery", timeout=60)
def celery_retries(url: str) -> Any:
    return _run(url, "classic", _retries)


@scenario("celery", timeout=60)
def celery_countdown_and_eta(url: str) -> Any:
    return _run(url, "classic", _countdown_eta)


# Celery >= 5.5 native delayed delivery: quorum queues (x-queue-type), x-overflow reject-publish,
# dead-lettering and exchange-to-exchange bindings. (While amqpd lacked them this scenario carried
# `needs=...`, which makes it xfail(strict=True) against amqpd; it passes there since quorum declarations.)
@scenario("celery", timeout=90)
def celery_native_delayed_delivery_quorum(url: str) -> Any:
    return _run(url, "quorum", _countdown_eta)


# Retries with a countdown through Celery's native delayed delivery (quorum queues): the retried task goes
# through the celery_delayed_* levels (TTL and dead-lettering) before it comes back to the worker.
@scenario("celery", timeout=90)
def celery_retries_native_delayed_delivery_quorum(url: str) -> Any:
    return _run(url, "quorum", _retries)
