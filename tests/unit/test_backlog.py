"""A durable queue whose backlog lives in the store (amqpd/broker/queues/backlog.py): after a restart its recovered
messages are store offsets, and persistent messages deep in a backlog are dropped from memory; both are read
back in batches as they near the head. To a consumer it must look exactly like a queue holding everything in
memory: same order, same flags, purge and TTL as usual."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from test_queue import QueueModel, RecordingChannel, clock, consumer, drain, msg  # noqa: F401 - clock is a fixture

from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.queue import Queue, QueueHooks


class StoreHooks(QueueHooks):
    """Stands in for the store: offset -> body; offsets in `damaged` read back as None."""

    def __init__(
        self,
        count: int,
        damaged: set[int] | None = None,
        ttl_ms: int | None = None,
        now: list[int] | None = None,
        ahead: str | None = None,
    ) -> None:
        """ahead: None (no read-ahead), "immediate" (the worker finishes at once), "held" (it finishes when
        the test calls finish_reads())."""
        self.now = now
        self.ahead = ahead
        self.ahead_reads: list[list[int]] = []
        self.held: list[tuple[list[int], Any]] = []
        self.bodies = {o: f"m{o}".encode() for o in range(count)}
        self.damaged = damaged or set()
        self.ttl_ms = ttl_ms
        self.reads: list[list[int]] = []  # offsets read on the loop, not read ahead
        self.loads: list[int] = []  # how many offsets each load (one decode step on the loop) handled
        self.forgotten: list[int] = []
        self.dropped_bodies: list[bytes] = []  # what left the queue unacked (x-max-length), in order

    def read_ahead(self, queue: Queue, offsets: list[int], done: Any) -> bool:
        if self.ahead is None:
            return False
        self.ahead_reads.append(offsets)
        if self.ahead == "immediate":
            done(self._read(offsets))
        else:
            self.held.append((offsets, done))
        return True

    def finish_reads(self) -> None:
        held, self.held = self.held, []
        for offsets, done in held:
            done(self._read(offsets))

    def _read(self, offsets: list[int]) -> dict[int, bytes | None]:
        """What the worker hands back: each offset's body (None: damaged), to build entries from on the loop."""
        return {o: None if o in self.damaged else self.bodies[o] for o in offsets}

    def load(self, queue: Queue, offsets: list[int], ahead: Any = None) -> list[Message | None]:
        self.loads.append(len(offsets))
        unread = [o for o in offsets if ahead is None or o not in ahead]
        if unread:
            self.reads.append(unread)  # read now, on the loop
        records = {**self._read(unread), **(ahead or {})}
        found: list[Message | None] = []
        for offset in offsets:
            body = records[offset]
            if body is None:
                found.append(None)
                continue
            m = msg(body, expiration=str(self.ttl_ms)) if self.ttl_ms is not None else msg(body)
            m.timestamp_ms = 1_000_000 - 10
            found.append(m)
        return found

    def page_in(self, queue: Queue, m: Message, ahead: Any) -> None:
        body = ahead.get(m.store_offset)
        if body is not None:
            m.body = body

    def forget(self, queue: Queue, offsets: list[int]) -> None:
        self.forgotten.extend(offsets)

    def dropped(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.dropped_bodies.append(
            entry.msg.body if entry.msg.body is not None else self.bodies[entry.msg.store_offset]
        )  # type: ignore[index]

    def dropped_stored(self, queue: Queue, offsets: list[int], reason: str) -> None:
        self.dropped_bodies.extend(self.bodies[o] for o in offsets)
        self.forget(queue, offsets)

    def now_ms(self) -> int:
        return self.now[0] if self.now is not None else super().now_ms()


def recovered(count: int, flagged: set[int] | None = frozenset(), **kw: object) -> tuple[Queue, StoreHooks]:  # type: ignore[assignment]
    hooks = StoreHooks(count, **kw)  # type: ignore[arg-type]
    q = Queue("/", "q", durable=True, hooks=hooks)
    q.store_id = 1
    assert q.holds_offsets
    q.adopt_backlog(list(range(count)), None if flagged is None else set(flagged))
    return q, hooks


def test_recovered_messages_come_back_in_order_and_are_read_a_slice_at_a_time() -> None:
    q, hooks = recovered(5000)
    assert q.message_count == 5000
    assert [len(r) for r in hooks.reads] == [Backlog.SLICE]  # the head only: a TTL at the head is checked
    assert drain(q) == [f"m{o}".encode() for o in range(5000)]
    assert sorted(o for r in hooks.reads for o in r) == list(range(5000))  # each record read once
    assert max(len(r) for r in hooks.reads) == Backlog.SLICE


def test_messages_published_after_the_restart_queue_behind_the_recovered_ones() -> None:
    q, _ = recovered(2500)
    q.push(msg(b"new1"))
    assert q.get().msg.body == b"m0"  # type: ignore[union-attr]
    q.push(msg(b"new2"))
    rest = drain(q)
    assert rest[:-2] == [f"m{o}".encode() for o in range(1, 2500)]
    assert rest[-2:] == [b"new1", b"new2"]


def test_a_consumer_gets_the_backlog_then_new_messages() -> None:
    q, _ = recovered(10)
    ch = RecordingChannel()
    consumer(q, ch, "c", no_ack=True)
    q.push(msg(b"new"))
    assert ch.bodies() == [*(f"m{o}".encode() for o in range(10)), b"new"]
    assert q.message_count == 0


def test_redelivered_flags_follow_what_the_store_recorded() -> None:
    q, _ = recovered(4, flagged={1, 3})
    flags = [q.get().redelivered for _ in range(4)]  # type: ignore[union-attr]
    assert flags == [False, True, False, True]


def test_after_a_crash_every_recovered_message_is_flagged() -> None:
    q, _ = recovered(3, flagged=None)
    q.push(msg(b"new"))
    entries = [q.get() for _ in range(4)]
    assert [e.redelivered for e in entries] == [True, True, True, False]  # type: ignore[union-attr]


def test_requeued_messages_go_back_before_the_rest_of_the_backlog() -> None:
    q, _ = recovered(3000)
    first = [q.get() for _ in range(3)]
    q.requeue([e for e in first if e is not None])
    got = drain(q)
    assert got[:4] == [b"m0", b"m1", b"m2", b"m3"]
    assert len(got) == 3000


def test_unreadable_records_are_skipped() -> None:
    q, _ = recovered(5, damaged={0, 2})
    assert drain(q) == [b"m1", b"m3", b"m4"]


def test_a_backlog_whose_records_are_all_unreadable_is_empty() -> None:
    q, _ = recovered(3, damaged={0, 1, 2})
    assert not q.ready
    assert q.get() is None


def test_purge_counts_the_unread_messages_and_tells_the_store() -> None:
    q, hooks = recovered(5000)
    q.get()
    q.push(msg(b"new"))
    count = q.message_count
    gone = q.purge()
    assert count == 5000
    assert [e.msg.body for e in gone][-1] == b"new"  # entries in memory come back for settling
    assert len(gone) == Backlog.SLICE  # the rest of the head's slice, and "new"
    assert hooks.forgotten == list(range(Backlog.SLICE, 5000))  # the rest never left the store
    assert q.message_count == 0 and q.get() is None


def test_deleting_the_queue_leaves_the_unread_offsets_to_the_store() -> None:
    q, hooks = recovered(5000)
    q.close()
    q.purge()
    assert hooks.forgotten == []


def test_queue_ttl_counts_from_the_original_publish(clock: list[int]) -> None:  # noqa: F811
    hooks = StoreHooks(3, now=clock)
    q = Queue("/", "q", durable=True, arguments={"x-message-ttl": 5}, hooks=hooks)
    q.store_id = 1
    q.adopt_backlog([0, 1, 2], set())
    assert q.get() is None  # published 10 ms before "now": expired when read back


def test_per_message_ttl_still_applies(clock: list[int]) -> None:  # noqa: F811
    q, _ = recovered(2, ttl_ms=60_000, now=clock)
    entry = q.get()
    assert entry is not None and entry.expires_at == 1_000_000 - 10 + 60_000


def test_only_durable_fifo_queues_without_a_byte_limit_hold_offsets() -> None:
    queues = [
        Queue("/", "p", arguments={"x-max-priority": 5}),
        Queue("/", "b", arguments={"x-max-length-bytes": 100}),
        Queue("/", "n", arguments={"x-max-length": 100}),
    ]
    for q in queues:
        q.store_id = 1
    assert [q.holds_offsets for q in queues] == [False, False, True]
    assert not Queue("/", "transient").holds_offsets


def test_max_length_drops_recovered_messages_from_the_head() -> None:
    hooks = StoreHooks(10)
    q = Queue("/", "q", durable=True, arguments={"x-max-length": 10}, hooks=hooks)
    q.store_id = 1
    q.adopt_backlog(list(range(10)), set())
    q.push(msg(b"new"))
    assert q.message_count == 10
    assert drain(q)[0] == b"m1"


def test_flagged_offsets_are_what_to_mark_delivered_at_a_clean_stop() -> None:
    """Offsets not read back yet that are flagged; the head's slice is in the window, its entries flagged."""
    n = Backlog.SLICE
    q, _ = recovered(n + 3, flagged={1, n + 1})
    assert isinstance(q.ready, Backlog)
    assert q.ready.flagged_offsets() == [n + 1]
    assert [e.redelivered for e in q.ready.entries()][:3] == [False, True, False]
    everything, _ = recovered(n + 2, flagged=None)
    assert isinstance(everything.ready, Backlog)
    assert everything.ready.flagged_offsets() == [n, n + 1]


@pytest.mark.parametrize("count", [0, 1, 2000, 2001])
def test_length_matches_what_drains(count: int) -> None:
    q, _ = recovered(count)
    assert q.message_count == count
    assert len(drain(q)) == count


# -- spilling: persistent messages deep in a live backlog wait as offsets -------------------------------------


def stored(offset: int, body: bytes | None = None, **properties: object) -> Message:
    m = msg(body if body is not None else f"m{offset}".encode(), **properties)
    m.store_offset = offset
    m.timestamp_ms = 1_000_000
    return m


def spilling_queue(count: int, window: int = 3, **arguments: object) -> tuple[Queue, StoreHooks]:
    hooks = StoreHooks(count)
    q = Queue("/", "q", durable=True, arguments=dict(arguments), hooks=hooks)
    q.store_id = 1
    q.PAGE_WINDOW = window  # type: ignore[misc]
    return q, hooks


def test_persistent_messages_beyond_the_window_wait_as_offsets_and_come_back_in_order() -> None:
    q, hooks = spilling_queue(10)
    for o in range(10):
        q.push(stored(o))
    assert isinstance(q.ready, Backlog)
    assert len(q.ready.window) == 3 and len(q.ready.spill) == 7
    assert all(isinstance(item, int) for item in q.ready.spill)  # no message objects behind the window
    assert q.message_count == 10
    got = [q.get() for _ in range(10)]
    assert [e.msg.body for e in got] == [f"m{o}".encode() for o in range(10)]  # type: ignore[union-attr]
    assert not any(e.redelivered for e in got)  # type: ignore[union-attr]
    assert hooks.reads == [list(range(3, 10))]


def test_messages_the_store_does_not_hold_keep_their_place_in_memory() -> None:
    q, _ = spilling_queue(10)
    for o in range(5):
        q.push(stored(o))
    q.push(msg(b"transient"))
    q.push(stored(5))
    assert drain(q) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"transient", b"m5"]


def test_messages_with_a_ttl_are_not_spilled() -> None:
    q, hooks = spilling_queue(10)
    for o in range(6):
        q.push(stored(o, expiration="60000"))
    assert drain(q) == [f"m{o}".encode() for o in range(6)]
    assert hooks.reads == []


def test_a_consumer_gets_the_spilled_backlog_in_order_with_requeues_in_place() -> None:
    q, _ = spilling_queue(20)
    for o in range(20):
        q.push(stored(o))
    first = [q.get() for _ in range(5)]
    q.requeue([e for e in first[1:3] if e is not None])
    ch = RecordingChannel()
    consumer(q, ch, "c", no_ack=True)
    assert ch.bodies() == [b"m1", b"m2", *(f"m{o}".encode() for o in range(5, 20))]


def test_purge_of_a_spilled_backlog_tells_the_store_and_returns_entries_in_memory() -> None:
    q, hooks = spilling_queue(10)
    for o in range(8):
        q.push(stored(o))
    q.push(msg(b"transient"))
    assert q.message_count == 9
    gone = q.purge()
    assert sorted(e.msg.body for e in gone) == [b"m0", b"m1", b"m2", b"transient"]  # type: ignore[type-var]
    assert hooks.forgotten == [3, 4, 5, 6, 7]
    assert q.message_count == 0


def test_max_length_counts_spilled_messages() -> None:
    q, _ = spilling_queue(10, **{"x-max-length": 5})
    for o in range(10):
        q.push(stored(o))
    assert q.message_count == 5
    assert drain(q) == [f"m{o}".encode() for o in range(5, 10)]


def test_spilled_messages_follow_a_recovered_backlog() -> None:
    q, hooks = recovered(4)
    hooks.bodies[4] = b"m4"  # published after the restart
    q.PAGE_WINDOW = 2  # type: ignore[misc]
    q.push(stored(4))
    q.push(msg(b"transient"))
    assert drain(q) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"transient"]


class SpillingQueueModel(QueueModel):
    """test_queue's model of RabbitMQ's queue order, with a durable queue whose window is 3 messages: stored
    messages beyond it wait as offsets, transient ones as entries among them, requeues go back in place."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks = StoreHooks(0)
        self.q = Queue("/", "q", durable=True, hooks=self.hooks)
        self.q.store_id = 1
        self.q.PAGE_WINDOW = 3  # type: ignore[misc]

    @rule(persistent=st.booleans())
    def publish(self, persistent: bool) -> None:  # type: ignore[override]
        self.n += 1
        body = str(self.n).encode()
        if persistent:
            self.hooks.bodies[self.n] = body
            self.q.push(stored(self.n, body))
        else:
            self.q.push(msg(body))
        self.model.append((0, self.n, body))

    @invariant()
    def same_order(self) -> None:  # the backlog cannot be listed without reading it back: get checks order
        assert self.q.message_count == len(self.model)


TestSpillingQueueAgainstModel = SpillingQueueModel.TestCase
TestSpillingQueueAgainstModel.settings = hsettings(max_examples=80, stateful_step_count=40, deadline=None)


class ReadAheadQueueModel(SpillingQueueModel):
    """The same, with the batch behind the window read ahead by a worker that finishes at once."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks.ahead = "immediate"


class SlowReadAheadQueueModel(SpillingQueueModel):
    """The same, with a worker that never finishes in time: every refill reads for itself."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks.ahead = "held"


TestReadAheadQueueAgainstModel = ReadAheadQueueModel.TestCase
TestReadAheadQueueAgainstModel.settings = hsettings(max_examples=80, stateful_step_count=40, deadline=None)
TestSlowReadAheadQueueAgainstModel = SlowReadAheadQueueModel.TestCase
TestSlowReadAheadQueueAgainstModel.settings = hsettings(max_examples=60, stateful_step_count=40, deadline=None)


class MaxLengthQueueModel(SpillingQueueModel):
    """The same at an x-max-length of 5, with a worker that finishes its reads only when told: a publish or
    a requeue past the limit drops the head at once, in queue order, whether it is in the window or still
    being read; the count is right at once, and what was dropped went without a read on the loop."""

    MAX_LENGTH = 5

    def __init__(self) -> None:
        super().__init__()
        self.hooks.ahead = "held"
        self.q = Queue("/", "q", durable=True, arguments={"x-max-length": self.MAX_LENGTH}, hooks=self.hooks)
        self.q.store_id = 1
        self.q.PAGE_WINDOW = 3  # type: ignore[misc]
        self.dropped: list[bytes] = []

    def _trim(self) -> None:
        while len(self.model) > self.MAX_LENGTH:
            self.dropped.append(self.model.pop(0)[2])

    @rule(persistent=st.booleans())
    def publish(self, persistent: bool) -> None:  # type: ignore[override]
        reads = len(self.hooks.reads)
        super().publish(persistent)
        self._trim()
        assert len(self.hooks.reads) == reads, "a drop read the store on the loop"

    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:  # type: ignore[override]
        if self.out:
            super().requeue(data)
            self._trim()

    @rule()
    def finish_reads(self) -> None:
        self.hooks.finish_reads()

    @invariant()
    def dropped_in_order(self) -> None:
        assert self.hooks.dropped_bodies == self.dropped


TestMaxLengthQueueAgainstModel = MaxLengthQueueModel.TestCase
TestMaxLengthQueueAgainstModel.settings = hsettings(max_examples=80, stateful_step_count=40, deadline=None)


def test_the_batch_behind_the_window_is_read_ahead_and_the_refill_does_not_read() -> None:
    q, hooks = recovered(5000, ahead="held")
    assert hooks.reads == [list(range(Backlog.SLICE))]  # the head's slice, at recovery
    assert hooks.ahead_reads == [list(range(2000))]  # its batch goes to the worker
    hooks.finish_reads()  # the worker thread is done
    bodies = [q.get().msg.body for _ in range(1000)]  # type: ignore[union-attr]
    assert hooks.ahead_reads[1] == list(range(2000, 4000))  # half the batch in hand gone: the next goes out
    hooks.finish_reads()
    bodies += [q.get().msg.body for _ in range(2000)]  # type: ignore[union-attr]
    assert hooks.ahead_reads[2] == list(range(4000, 5000))
    hooks.finish_reads()
    bodies += drain(q)
    assert bodies == [f"m{o}".encode() for o in range(5000)]
    assert hooks.reads == [list(range(Backlog.SLICE))]  # everything else was built from what the worker read


def test_no_refill_step_decodes_more_than_a_slice() -> None:
    """A refill runs on the event loop: each step builds at most SLICE entries (about a millisecond), so a
    consumer of a deep backlog never holds up other connections for a whole batch's decoding."""
    for ahead in (None, "immediate"):
        q, hooks = recovered(5000, ahead=ahead)
        assert drain(q) == [f"m{o}".encode() for o in range(5000)]
        assert sum(hooks.loads) == 5000 and max(hooks.loads) <= Backlog.SLICE


def test_a_truthiness_check_never_reads() -> None:
    """Whether a queue has a message is asked all the time (dispatch, basic.get, TTL): it is answered from
    what the backlog holds, never by reading the store, even when the window was just emptied."""
    q, hooks = recovered(5000, ahead="held")
    seen = 0
    while True:
        loads = len(hooks.loads)
        nonempty = bool(q.ready)
        assert len(hooks.loads) == loads
        if not nonempty:
            break
        q.get()
        seen += 1
    assert seen == 5000


def test_a_paged_out_body_comes_back_from_the_read_ahead() -> None:
    """A message kept as an entry deep in a backlog (a TTL: not spilled) whose body was paged out gets it
    back from the worker's read of its batch, not from a read at delivery."""
    q, hooks = spilling_queue(10)
    hooks.ahead = "immediate"
    for o in range(6):
        q.push(stored(o))
    paged = stored(6, expiration="60000")
    paged.body = None  # paged out: the store holds it
    q.push(paged)
    assert paged.body is None
    assert drain(q) == [f"m{o}".encode() for o in range(7)]
    assert any(6 in r for r in hooks.ahead_reads)


def test_a_refill_before_the_read_ahead_is_done_reads_for_itself_in_order() -> None:
    q, hooks = recovered(5000, ahead="held")
    assert drain(q) == [f"m{o}".encode() for o in range(5000)]
    assert sum(len(r) for r in hooks.reads) == 5000  # every record read exactly once, on the loop
    hooks.finish_reads()  # late results change nothing
    assert q.message_count == 0


def test_length_and_purge_count_the_batch_read_ahead() -> None:
    q, hooks = recovered(5000, ahead="held")
    for _ in range(1500):
        q.get()
    assert len(hooks.ahead_reads) == 2 and q.message_count == 3500
    gone = q.purge()  # the window's entries; the store forgets the rest, read ahead or not
    assert sorted(hooks.forgotten) == list(range(1500 + len(gone), 5000))
    assert q.message_count == 0


def test_everything_queued_is_listed_in_order_with_the_batches_in_hand() -> None:
    """What the management peek lists: the window, the batches taken off the deques (the one being decoded
    and the one read ahead) and the rest, in queue order."""
    q, hooks = recovered(5000, ahead="held")
    for _ in range(1500):
        q.get()
    assert len(hooks.ahead_reads) == 2  # the current batch and the one after it are in hand
    assert isinstance(q.ready, Backlog)
    listed = [i if isinstance(i, int) else int(i.msg.body[1:]) for i in q.ready.queued()]  # type: ignore[index]
    assert listed == list(range(1500, 5000))
