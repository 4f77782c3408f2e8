"""A Celery app wired to delayed delivery the way setups that use rabbitmq_delayed_message_exchange do it:
the task queue is bound to an `x-delayed-message` exchange (`x-delayed-type: direct`), and a task base class
turns a countdown into the plugin's `x-delay` header (milliseconds) instead of Celery's `eta`, so the broker
holds the message until it is due and the worker only ever sees work it can run now.

Celery itself never uses the plugin: a countdown on a classic queue becomes an `eta` the worker holds in
memory, and its native delayed delivery (`celery_delayed_*` topic exchanges) needs quorum queues.

Run by tests/integration/test_celery_delayed_retry.py as `celery -A celery_delayed_app worker` with
CELERY_DELAYED_BROKER (pyamqp URL), CELERY_DELAYED_QUEUE and CELERY_DELAYED_LOG (a file each run of the
task appends a line to) in the environment.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery, Task
from kombu import Exchange, Queue

DELAY_HEADER = "x-delay"


class DelayedTask(Task):
    """A countdown (from apply_async or retry) becomes the x-delay header: the exchange delays the message."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        countdown = options.pop("countdown", None)
        if countdown:
            options["headers"] = {**(options.get("headers") or {}), DELAY_HEADER: int(countdown * 1000)}
        return super().apply_async(args, kwargs, **options)


def make_app(broker_url: str, queue: str) -> Celery:
    app = Celery("delayed", broker=broker_url, backend="rpc://", task_cls=DelayedTask)
    exchange = Exchange(f"{queue}.delayed", type="x-delayed-message", arguments={"x-delayed-type": "direct"})
    app.conf.update(
        task_queues=[Queue(queue, exchange, routing_key=queue)],
        task_default_queue=queue,
        task_default_exchange=exchange.name,
        task_default_exchange_type="x-delayed-message",
        task_default_routing_key=queue,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=0,
    )
    return app


app = make_app(
    os.environ.get("CELERY_DELAYED_BROKER", "pyamqp://guest:guest@127.0.0.1//"),
    os.environ.get("CELERY_DELAYED_QUEUE", "celery-delayed"),
)


@app.task(name="delayed.flaky", bind=True, max_retries=5)
def flaky(self: Any, fail_times: int, countdown: float) -> int:
    """Logs each run (time, retries, the x-delay header it came with, its eta), fails `fail_times` times
    with a retry after `countdown` seconds, then returns its retry count."""
    run = {
        "at": time.time(),
        "retries": self.request.retries,
        "x_delay": getattr(self.request, DELAY_HEADER, None),
        "eta": self.request.eta,
    }
    with open(os.environ["CELERY_DELAYED_LOG"], "a") as log:
        log.write(json.dumps(run) + "\n")
    if self.request.retries < fail_times:
        raise self.retry(countdown=countdown)
    return int(self.request.retries)
