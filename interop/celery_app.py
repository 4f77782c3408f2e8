"""The Celery app of the interop Celery scenarios: `celery -A interop.celery_app worker`.

Configured from the environment by the scenario that starts the worker: INTEROP_CELERY_BROKER (pyamqp URL),
INTEROP_CELERY_QUEUE (a per-run queue name) and INTEROP_CELERY_QUEUE_TYPE (classic or quorum; quorum turns
on Celery's native delayed delivery, which needs x-queue-type quorum, x-overflow reject-publish,
dead-lettering and exchange-to-exchange bindings)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from kombu import Exchange, Queue

QUEUE = os.environ.get("INTEROP_CELERY_QUEUE", "interop-celery")
QUEUE_TYPE = os.environ.get("INTEROP_CELERY_QUEUE_TYPE", "classic")

app = Celery(
    "interop", broker=os.environ.get("INTEROP_CELERY_BROKER", "pyamqp://guest:guest@127.0.0.1//"), backend="rpc://"
)
_queue_args = {"x-queue-type": "quorum"} if QUEUE_TYPE == "quorum" else None
app.conf.update(
    task_queues=[
        Queue(
            QUEUE,
            Exchange(QUEUE, "direct", durable=QUEUE_TYPE == "quorum"),
            routing_key=QUEUE,
            queue_arguments=_queue_args,
            durable=QUEUE_TYPE == "quorum",
        )
    ],
    task_default_queue=QUEUE,
    task_default_exchange=QUEUE,
    task_default_routing_key=QUEUE,
    task_default_queue_type=QUEUE_TYPE,
    worker_enable_remote_control=False,  # no pidbox queues/exchanges left behind
    worker_send_task_events=False,
    task_send_sent_event=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=False,
    broker_connection_max_retries=0,
    result_expires=60,
    worker_prefetch_multiplier=4,
    task_acks_late=True,
)

ATTEMPTS: dict[str, int] = {}


@app.task(name="interop.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="interop.flaky", bind=True, max_retries=3, default_retry_delay=0.2)
def flaky(self: Any, key: str, fail_times: int) -> dict[str, Any]:
    """Fails `fail_times` times, retrying with a short countdown, then reports its retry count."""
    if self.request.retries < fail_times:
        raise self.retry(countdown=0.2)
    return {"key": key, "retries": self.request.retries}


@app.task(name="interop.always_fails", bind=True, max_retries=2)
def always_fails(self: Any) -> None:
    raise self.retry(countdown=0.1, exc=ValueError("nope"))


@app.task(name="interop.echo_headers", bind=True)
def echo_headers(self: Any, payload: Any) -> dict[str, Any]:
    return {"payload": payload, "delivery_info_rk": (self.request.delivery_info or {}).get("routing_key")}
