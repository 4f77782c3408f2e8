"""Unacked deliveries have one owner (amqpd/broker/unacked.py): the channel's, consumers' and queues' counts
change there only, so they cannot drift apart."""

from __future__ import annotations

import ast
from pathlib import Path

from test_queue import msg

from amqpd.broker.entry import Entry
from amqpd.broker.queue import Queue
from amqpd.broker.unacked import Outstanding

AMQPD = Path(__file__).resolve().parents[2] / "amqpd"


class Sub:
    priority, exclusive, no_ack = 0, False, False
    unacked = 0


def test_only_the_owner_changes_unacked_counts() -> None:
    changes = []
    for path in sorted(AMQPD.rglob("*.py")):
        if path.name == "unacked.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
                if node.target.attr in ("unacked", "unacked_count"):
                    changes.append(f"{path.relative_to(AMQPD)}:{node.lineno}")
    assert changes == []


def test_deliveries_count_until_released_and_come_back_in_tag_order() -> None:
    q: Queue = Queue("/", "q")
    consumer = Sub()
    out = Outstanding()
    entries = [Entry(msg(bytes([65 + i])), i, None) for i in range(4)]
    out.add(1, q, entries[0], consumer, 0.0)  # type: ignore[arg-type]
    out.add_many(2, q, entries[1:3], consumer, 0.0)  # type: ignore[arg-type]
    out.add(4, q, entries[3], None, 0.0)  # a basic.get: counted for the queue only
    assert (out.count, consumer.unacked, q.unacked) == (3, 3, 4)
    held = [(t, out.pop(t)) for t in (1, 2)]  # a transaction holds two acks
    assert (out.count, consumer.unacked, q.unacked) == (3, 3, 4)
    out.restore(held)  # rolled back
    assert list(out) == [1, 2, 3, 4]
    _queue, _entry, owner, _at = out.pop(3)
    out.release(q, owner)
    assert (out.count, consumer.unacked, q.unacked) == (2, 2, 3)
