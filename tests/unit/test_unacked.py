"""Unacked deliveries have one owner (amqpd/broker/delivery/unacked.py): the channel's, consumers' and queues' counts
change there only, so they cannot drift apart."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from test_queue import msg

from amqpd.broker.delivery.unacked import RANGE_MAX, Outstanding, Run
from amqpd.broker.entry import Entry
from amqpd.broker.queues.queue import Queue
from amqpd.broker.streams.cursor import StreamRun

AMQPD = Path(__file__).resolve().parents[2] / "amqpd"


class Sub:
    priority, exclusive, no_ack = 0, False, False

    def __init__(self) -> None:
        self.unacked = 0


def test_only_the_owner_changes_unacked_counts() -> None:
    changes = []
    for path in sorted(AMQPD.rglob("*.py")):
        if path.name == "unacked.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
                if node.target.attr in ("unacked", "unacked_count", "unacked_bytes"):
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
    held = out.take_upto(2)  # a transaction holds two acks
    assert held is not None
    assert (out.count, consumer.unacked, q.unacked) == (3, 3, 4)
    out.restore(held)  # rolled back
    assert list(out) == [1, 2, 3, 4]
    (third,) = out.take(3) or []
    out.release(third)
    assert (out.count, consumer.unacked, q.unacked, q.unacked_bytes) == (2, 2, 3, 3)


Delivery = tuple[object, object, object, float, object]  # queue, entry or offset, consumer, at, cursor


def _flat(taken: list[Run]) -> list[tuple[int, Delivery]]:
    """What runs hold, one delivery per tag (a queue's run has no cursor)."""
    return [
        (t, (r.queue, item, r.consumer, r.at, getattr(r, "cursor", None)))
        for r in taken
        for t, item in zip(r.tags(), r.items, strict=True)
    ]


def _offsets(start: int, n: int) -> range | list[int]:
    """A stream run's offsets: consecutive, or with gaps where records on disk were damaged."""
    return range(start, start + n % 9 + 1) if n % 2 else [start + 2 * i for i in range(n % 9 + 1)]


@settings(max_examples=600, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "many", "stream", "take", "upto", "all", "hold", "restore"]), st.integers(0, 40)
        ),
        max_size=60,
    )
)
def test_runs_of_queues_and_streams_hold_what_a_table_of_one_delivery_per_tag_holds(ops: list[tuple[str, int]]) -> None:
    """Outstanding against the plainest model: a dict of tag -> (queue, entry or offset, consumer, at, cursor)
    in tag order. Queues' runs and streams' runs mixed, deliveries one by one right after a stream's run of the
    same consumer at the same clock reading, takes inside runs, multiple takes ending inside runs, transactions
    held and restored in any order: every operation leaves the same tags, takes out the same deliveries in the
    same order, and keeps the same counts (and the queues' unacked bytes: a stream's count none)."""
    queues: list[Queue] = [Queue("/", "a"), Queue("/", "b")]
    consumers = [Sub(), Sub(), None]
    cursors = [object(), object()]
    out, model = Outstanding(), {}
    held: list[list[Run]] = []
    held_model: list[dict[int, Delivery]] = []
    tag = offset = 0
    for op, n in ops:
        q, c, at = queues[n % 2], consumers[n % 3], float(n % 4 // 3)  # mostly equal clock readings
        if op in ("add", "many", "stream"):
            tag += 1 + (n % 5 == 4)  # a gap: a no-ack delivery's tag, never outstanding
        if op == "add":
            e = Entry(msg(b"x" * n), tag, None)
            out.add(tag, q, e, c, at)  # type: ignore[arg-type]
            model[tag] = (q, e, c, at, None)
        elif op == "many" and c is not None:
            es = [Entry(msg(b"x" * (n + i)), tag + i, None) for i in range(n % 7 + 1)]
            out.add_many(tag, q, es, c, at)  # type: ignore[arg-type]
            model.update({tag + i: (q, e, c, at, None) for i, e in enumerate(es)})
            tag += len(es) - 1
        elif op == "stream":
            c, cursor, offsets = consumers[n % 2], cursors[n % 2], _offsets(offset, n)
            out.add_run(StreamRun(tag, offsets, q, c, cursor, at))  # type: ignore[arg-type]
            model.update({tag + i: (q, o, c, at, cursor) for i, o in enumerate(offsets)})
            tag += len(offsets) - 1
            offset = offsets[-1] + 1
        elif op in ("take", "upto"):
            t = n if n % 3 else (sorted(model)[n % len(model)] if model else 1)
            got = out.take(t) if op == "take" else out.take_upto(t)
            if t not in model:
                assert got is None
                continue
            assert got is not None
            keys = [t] if op == "take" else [k for k in model if k <= t]
            assert _flat(got) == [(k, model.pop(k)) for k in sorted(keys)]
            for r in got:
                out.release(r)
        elif op == "all":
            got = out.take_all()
            assert _flat(got) == sorted(model.items())
            for r in got:
                out.release(r)
            model.clear()
        elif op == "hold" and model:  # a transaction's multiple-ack
            t = sorted(model)[n % len(model)]
            got = out.take_upto(t)
            assert got is not None
            held.append(got)
            held_model.append({k: model.pop(k) for k in sorted(model) if k <= t})
        elif op == "restore" and held:  # its rollback
            out.restore(held.pop(n % len(held)))
            model.update(held_model.pop(n % len(held_model)))
            model = dict(sorted(model.items()))
        assert list(out) == sorted(model)
        assert len(out) == len(model)
        assert out.oldest_at() == (model[min(model)][3] if model else None)
    counted = list(model.values()) + [v for h in held_model for v in h.values()]
    assert out.count == sum(1 for v in counted if v[2] is not None)
    for q in queues:
        assert q.unacked == sum(1 for v in counted if v[0] is q)
        assert q.unacked_bytes == sum(v[1].msg.size for v in counted if v[0] is q and isinstance(v[1], Entry))
    for c in consumers[:2]:
        assert c.unacked == sum(1 for v in counted if v[2] is c)  # type: ignore[union-attr]


def test_one_by_one_deliveries_join_ranges_of_a_bounded_size() -> None:
    """An ack inside a range copies part of it: however many single deliveries follow on at one clock reading,
    no range grows past RANGE_MAX (acking 100k of them out of order stays linear)."""
    q: Queue = Queue("/", "q")
    consumer = Sub()
    out = Outstanding()
    for tag in range(1, 1001):
        out.add(tag, q, Entry(msg(b"x"), tag, None), consumer, 0.0)  # type: ignore[arg-type]
    sizes = [len(r.items) for r in out.ranges()]
    assert sum(sizes) == 1000 and max(sizes) == RANGE_MAX and len(sizes) == -(-1000 // RANGE_MAX)
