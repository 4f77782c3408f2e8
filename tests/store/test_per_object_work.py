"""One queue's declare, bind, unbind, delete, and one connection's close do the same work whether the vhost holds
a few queues or many (issue 30): a step that walks every queue made deleting 20,000 queues take half a minute.

Work is counted, not timed: the Python lines executed during the operation (sys.settrace), which a loop or a
comprehension over all queues multiplies by their number. The durable store is real, so its bookkeeping counts."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from amqpd.broker.broker import Broker
from amqpd.broker.recovery import restore
from amqpd.broker.routing.vhost import VirtualHost
from amqpd.config import Settings
from store import MessageStore

pytestmark = pytest.mark.anyio

SMALL, LARGE = 20, 1_000
OWNER = object()


def lines_executed(operation: Callable[[], Any]) -> int:
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        operation()
    finally:
        sys.settrace(None)
    return count


def declare(vh: VirtualHost, name: str, exclusive: bool = False) -> None:
    vh.declare_queue(
        name, passive=False, durable=not exclusive, exclusive=exclusive, auto_delete=False, arguments={}, owner=OWNER
    )


async def work_per_operation(path: Path, queues: int) -> dict[str, int]:
    """Lines executed by one of each operation in a vhost that already holds `queues` durable queues, each bound
    to amq.direct, and as many exclusive queues of other connections."""
    store = MessageStore(path, fsync="none")
    restore(broker := Broker(Settings(data_dir=str(path)), store=store), await store.open(load_records=False))
    vh = broker.vhosts["/"]
    for i in range(queues):
        declare(vh, f"q{i}")
        vh.bind("amq.direct", vh.queues[f"q{i}"], f"q{i}", {})
        vh.declare_queue(
            f"x{i}", passive=False, durable=False, exclusive=True, auto_delete=False, arguments={}, owner=object()
        )
    declare(vh, "mine", exclusive=True)
    work = {
        "declare": lines_executed(lambda: declare(vh, "new")),
        "bind": lines_executed(lambda: vh.bind("amq.direct", vh.queues["new"], "new", {})),
        "unbind": lines_executed(lambda: vh.unbind("amq.direct", vh.queues["new"], "new", {})),
        "delete": lines_executed(lambda: vh.delete_queue("q0", if_unused=False, if_empty=False, owner=OWNER)),
        "close a connection": lines_executed(lambda: vh.drop_exclusive(OWNER)),
    }
    await store.close()
    return work


async def test_one_queue_operation_does_not_look_at_the_other_queues(tmp_path: Path) -> None:
    small = await work_per_operation(tmp_path / "small", SMALL)
    large = await work_per_operation(tmp_path / "large", LARGE)
    assert large == small
