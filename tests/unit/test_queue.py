"""A queue as its consumers see it: order, fairness, priorities, prefetch, requeue, TTL and length limits.

The queue talks to consumers through Consumer/Channel objects; here a recording channel stands in for
the real one, and time is injected through the queue's hooks (RecordingHooks(clock)).
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes import header_payload
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqpd.broker.delivery.consumer import Consumer
from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.queues.queue import Queue, QueueHooks
from amqpd.protocol.fastpath import shortstr


def msg(body: bytes, **properties: Any) -> Message:
    hdr = header_payload(len(body), **properties)
    return Message("", "q", shortstr("") + shortstr("q"), hdr, body, int.from_bytes(hdr[12:14], "big"))


class RecordingChannel:
    """Takes every delivery while open; a consumer's unacked count goes up as the real channel's does."""

    def __init__(self) -> None:
        self.open = True
        self.got: list[tuple[str, Entry]] = []

    def can_deliver(self) -> bool:
        return self.open

    def can_deliver_acked(self) -> bool:
        return self.open

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        if not consumer.no_ack:
            consumer.unacked += 1
            queue.unacked += 1
        self.got.append((consumer.tag, entry))

    def prefetch_room(self) -> int:
        return 1 << 30

    def deliver_batch(self, consumer: Consumer, queue: Queue, entries: list[Entry]) -> None:
        for entry in entries:
            self.deliver(consumer, queue, entry)

    def bodies(self) -> list[bytes]:
        return [e.msg.body for _, e in self.got]

    def tags(self) -> list[str]:
        return [t for t, _ in self.got]

    def settle(self, queue: Queue, consumer: Consumer, n: int = 1) -> None:
        """The client acked n messages of this consumer."""
        consumer.unacked -= n
        queue.unacked -= n
        queue.dispatch()


class RecordingHooks(QueueHooks):
    def __init__(self, clock: list[int] | None = None) -> None:
        self.dropped_entries: list[tuple[bytes, str]] = []
        self.clock = clock

    def now_ms(self) -> int:
        return self.clock[0] if self.clock is not None else super().now_ms()

    def dropped(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.dropped_entries.append((entry.msg.body, reason))


@pytest.fixture
def clock() -> list[int]:
    """A queue's clock in ms, for RecordingHooks(clock); tests move it by assigning clock[0]."""
    return [1_000_000]


def consumer(
    q: Queue, ch: RecordingChannel, tag: str, *, prefetch: int = 0, priority: int = 0, no_ack: bool = False
) -> Consumer:
    c = Consumer(tag, ch, q, no_ack=no_ack, exclusive=False, prefetch=prefetch, priority=priority)  # type: ignore[arg-type]
    q.add_consumer(c)
    return c


def drain(q: Queue) -> list[bytes]:
    out = []
    while (entry := q.get()) is not None:
        out.append(entry.msg.body)
    return out


# -- order and fairness --------------------------------------------------------------------------------


def test_messages_are_delivered_in_publish_order() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    for b in (b"1", b"2", b"3"):
        q.push(msg(b))
    consumer(q, ch, "c")
    q.push(msg(b"4"))
    assert ch.bodies() == [b"1", b"2", b"3", b"4"]
    assert q.message_count == 0


class Taker:
    """Anything that subscribes (amqpd.broker.queues.subscriber): no channel behind it."""

    def __init__(self, room: int) -> None:
        self.priority, self.exclusive, self.no_ack = 0, False, False
        self.limit = room
        self.got: list[bytes] = []

    def can_accept(self) -> bool:
        return len(self.got) < self.limit

    def room(self) -> int:
        return max(self.limit - len(self.got), 0)

    def deliver(self, queue: Any, entry: Entry) -> None:
        self.got.append(entry.msg.body or b"")

    def deliver_many(self, queue: Any, entries: list[Entry]) -> None:
        for entry in entries:
            self.deliver(queue, entry)


def test_a_queue_serves_any_subscriber_whether_a_message_goes_straight_out_or_waits() -> None:
    q: Queue[Taker] = Queue("/", "q")
    taker = Taker(room=2)
    q.add_consumer(taker)
    q.push(msg(b"first"))  # straight out
    q.push(msg(b"second"))
    q.push(msg(b"third"))  # no room: waits
    assert taker.got == [b"first", b"second"]
    taker.limit = 3
    q.dispatch()
    assert taker.got == [b"first", b"second", b"third"]
    assert q.message_count == 0


def test_basic_get_takes_messages_in_publish_order() -> None:
    q = Queue("/", "q")
    for b in (b"a", b"b", b"c"):
        q.push(msg(b))
    assert drain(q) == [b"a", b"b", b"c"]


def test_consumers_share_messages_round_robin() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "a")
    consumer(q, ch, "b")
    consumer(q, ch, "c")
    for i in range(7):
        q.push(msg(str(i).encode()))
    assert ch.tags() == ["a", "b", "c", "a", "b", "c", "a"]


def test_higher_priority_consumer_gets_every_message_while_it_has_room() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "low", priority=0)
    consumer(q, ch, "high", priority=10)
    for i in range(4):
        q.push(msg(str(i).encode()))
    assert ch.tags() == ["high"] * 4


def test_lower_priority_consumer_gets_messages_when_the_higher_one_is_full() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "low", priority=0)
    high = consumer(q, ch, "high", priority=10, prefetch=1)
    for i in range(3):
        q.push(msg(str(i).encode()))
    assert ch.tags() == ["high", "low", "low"]
    ch.settle(q, high)
    q.push(msg(b"3"))
    assert ch.tags()[-1] == "high"


def test_consumers_of_equal_priority_share_round_robin() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "low", priority=1)
    consumer(q, ch, "a", priority=5)
    consumer(q, ch, "b", priority=5)
    for i in range(4):
        q.push(msg(str(i).encode()))
    assert ch.tags() == ["a", "b", "a", "b"]


def test_middle_priority_consumer_goes_before_the_lowest_when_the_top_is_full() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "top", priority=10, prefetch=1)
    consumer(q, ch, "middle", priority=5)
    consumer(q, ch, "bottom", priority=1)
    for i in range(4):
        q.push(msg(str(i).encode()))
    assert ch.tags() == ["top", "middle", "middle", "middle"]


def test_prefetch_limits_unacked_deliveries_per_consumer() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    c = consumer(q, ch, "c", prefetch=2)
    for i in range(5):
        q.push(msg(str(i).encode()))
    assert ch.bodies() == [b"0", b"1"]
    assert q.message_count == 3
    ch.settle(q, c)
    assert ch.bodies() == [b"0", b"1", b"2"]
    ch.settle(q, c, 2)
    assert ch.bodies() == [b"0", b"1", b"2", b"3", b"4"]


def test_no_ack_consumer_ignores_prefetch() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "c", prefetch=1, no_ack=True)
    for i in range(3):
        q.push(msg(str(i).encode()))
    assert ch.bodies() == [b"0", b"1", b"2"]


def test_messages_wait_while_the_channel_cannot_take_them() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    consumer(q, ch, "c")
    ch.open = False
    q.push(msg(b"1"))
    q.push(msg(b"2"))
    assert ch.got == [] and q.message_count == 2
    ch.open = True
    q.dispatch()
    assert ch.bodies() == [b"1", b"2"]


def test_removed_consumer_gets_nothing_more() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    a = consumer(q, ch, "a")
    consumer(q, ch, "b")
    q.remove_consumer(a)
    q.push(msg(b"1"))
    q.push(msg(b"2"))
    assert ch.tags() == ["b", "b"]


# -- requeue ------------------------------------------------------------------------------------------


def test_requeued_messages_return_to_their_original_position_marked_redelivered() -> None:
    q = Queue("/", "q")
    for b in (b"1", b"2", b"3", b"4"):
        q.push(msg(b))
    first, second = q.get(), q.get()
    assert first is not None and second is not None
    q.push(msg(b"5"))  # newer message arrives while 1 and 2 are out
    q.requeue([second, first])
    entries = list(q.ready)
    assert [e.msg.body for e in entries] == [b"1", b"2", b"3", b"4", b"5"]
    assert [e.redelivered for e in entries] == [True, True, False, False, False]


def test_requeue_of_a_middle_message_puts_it_between_its_neighbours() -> None:
    q = Queue("/", "q")
    for b in (b"1", b"2", b"3"):
        q.push(msg(b))
    one, two = q.get(), q.get()
    assert one is not None and two is not None
    q.requeue([one])
    assert [e.msg.body for e in q.ready] == [b"1", b"3"]
    q.requeue([two])
    assert [e.msg.body for e in q.ready] == [b"1", b"2", b"3"]


def test_requeued_message_goes_to_a_waiting_consumer_first() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    c = consumer(q, ch, "c", prefetch=1)
    q.push(msg(b"1"))
    q.push(msg(b"2"))
    ((_, entry),) = ch.got
    c.unacked -= 1
    q.unacked -= 1
    q.requeue([entry])
    assert ch.bodies() == [b"1", b"1"]
    assert ch.got[-1][1].redelivered


# -- priority queues ------------------------------------------------------------------------------------


def test_priority_queue_delivers_highest_priority_first_fifo_within_a_level() -> None:
    q = Queue("/", "q", arguments={"x-max-priority": 5})
    for body, prio in ((b"none", None), (b"p1", 1), (b"p5a", 5), (b"p3", 3), (b"p5b", 5), (b"p1b", 1)):
        q.push(msg(body, priority=prio) if prio is not None else msg(body))
    assert drain(q) == [b"p5a", b"p5b", b"p3", b"p1", b"p1b", b"none"]


def test_priority_above_the_maximum_counts_as_the_maximum() -> None:
    q = Queue("/", "q", arguments={"x-max-priority": 2})
    q.push(msg(b"p2", priority=2))
    q.push(msg(b"p9", priority=9))
    q.push(msg(b"p1", priority=1))
    assert drain(q) == [b"p2", b"p9", b"p1"]


def test_priority_queue_requeue_keeps_the_original_position_in_its_level() -> None:
    q = Queue("/", "q", arguments={"x-max-priority": 5})
    q.push(msg(b"a", priority=5))
    q.push(msg(b"b", priority=5))
    q.push(msg(b"low", priority=0))
    a = q.get()
    assert a is not None
    q.push(msg(b"c", priority=5))
    q.requeue([a])
    assert drain(q) == [b"a", b"b", b"c", b"low"]
    assert q.message_count == 0


def test_queue_without_max_priority_ignores_message_priority() -> None:
    q = Queue("/", "q")
    q.push(msg(b"p0", priority=0))
    q.push(msg(b"p9", priority=9))
    assert drain(q) == [b"p0", b"p9"]


# -- TTL ------------------------------------------------------------------------------------------------


def test_queue_ttl_expires_messages_at_the_head(clock: list[int]) -> None:
    hooks = RecordingHooks(clock)
    q = Queue("/", "q", arguments={"x-message-ttl": 100}, hooks=hooks)
    q.push(msg(b"old"))
    clock[0] += 50
    q.push(msg(b"new"))
    clock[0] += 50  # old is now 100 ms old
    entry = q.get()
    assert entry is not None and entry.msg.body == b"new"
    assert hooks.dropped_entries == [(b"old", "expired")]


def test_message_is_alive_until_its_ttl_has_fully_passed(clock: list[int]) -> None:
    q = Queue("/", "q", arguments={"x-message-ttl": 100}, hooks=RecordingHooks(clock))
    q.push(msg(b"m"))
    clock[0] += 99
    assert drain(q) == [b"m"]


def test_per_message_ttl_shorter_than_the_queue_ttl_wins(clock: list[int]) -> None:
    q = Queue("/", "q", arguments={"x-message-ttl": 1000}, hooks=RecordingHooks(clock))
    q.push(msg(b"short", expiration="10"))
    q.push(msg(b"long"))
    clock[0] += 10
    assert drain(q) == [b"long"]


def test_queue_ttl_shorter_than_the_per_message_ttl_wins(clock: list[int]) -> None:
    q = Queue("/", "q", arguments={"x-message-ttl": 10}, hooks=RecordingHooks(clock))
    q.push(msg(b"m", expiration="5000"))
    clock[0] += 10
    assert drain(q) == []


def test_expired_message_behind_a_live_one_goes_when_it_reaches_the_head(clock: list[int]) -> None:
    hooks = RecordingHooks(clock)
    q = Queue("/", "q", hooks=hooks)
    q.push(msg(b"live", expiration="10000"))
    q.push(msg(b"dead", expiration="10"))
    clock[0] += 20
    q.expire_head()
    assert q.message_count == 2  # RabbitMQ only expires at the head
    assert drain(q) == [b"live"]
    assert hooks.dropped_entries == [(b"dead", "expired")]


def test_expired_messages_are_not_delivered_to_a_new_consumer(clock: list[int]) -> None:
    hooks = RecordingHooks(clock)
    q, ch = Queue("/", "q", arguments={"x-message-ttl": 5}, hooks=hooks), RecordingChannel()
    q.push(msg(b"old"))
    clock[0] += 10
    q.push(msg(b"fresh"))
    consumer(q, ch, "c")
    assert ch.bodies() == [b"fresh"]
    assert hooks.dropped_entries == [(b"old", "expired")]


def test_ttl_zero_message_reaches_a_consumer_that_can_take_it_at_once(clock: list[int]) -> None:
    q, ch = Queue("/", "q", arguments={"x-message-ttl": 0}, hooks=RecordingHooks(clock)), RecordingChannel()
    consumer(q, ch, "c")
    q.push(msg(b"now"))
    assert ch.bodies() == [b"now"]


def test_ttl_zero_message_without_a_consumer_is_dropped(clock: list[int]) -> None:
    q = Queue("/", "q", arguments={"x-message-ttl": 0}, hooks=RecordingHooks(clock))
    q.push(msg(b"gone"))
    assert q.get() is None


def test_ttl_timer_is_armed_for_the_head_message(clock: list[int]) -> None:
    scheduled: list[float] = []

    class Hooks(RecordingHooks):
        def schedule(self, delay_s: float, callback: Any) -> Any:
            scheduled.append(delay_s)
            self.fire = callback
            return None

    hooks = Hooks(clock)
    q = Queue("/", "q", arguments={"x-message-ttl": 250}, hooks=hooks)
    q.push(msg(b"m"))
    assert len(scheduled) == 1 and 0.25 <= scheduled[0] < 0.3
    clock[0] += 250
    hooks.fire()
    assert hooks.dropped_entries == [(b"m", "expired")]
    assert q.message_count == 0


# -- length limits and purge -----------------------------------------------------------------------------


def test_max_length_drops_the_oldest_messages() -> None:
    hooks = RecordingHooks()
    q = Queue("/", "q", arguments={"x-max-length": 2}, hooks=hooks)
    for b in (b"1", b"2", b"3", b"4"):
        q.push(msg(b))
    assert drain(q) == [b"3", b"4"]
    assert hooks.dropped_entries == [(b"1", "maxlen"), (b"2", "maxlen")]


def test_max_length_bytes_drops_the_oldest_messages() -> None:
    q = Queue("/", "q", arguments={"x-max-length-bytes": 10})
    q.push(msg(b"aaaa"))
    q.push(msg(b"bbbb"))
    q.push(msg(b"cccc"))
    assert drain(q) == [b"bbbb", b"cccc"]


def test_max_length_zero_keeps_nothing() -> None:
    q = Queue("/", "q", arguments={"x-max-length": 0})
    q.push(msg(b"1"))
    assert q.message_count == 0


def test_reject_publish_refuses_new_messages_once_full() -> None:
    q = Queue("/", "q", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    assert not q.would_overflow()
    q.push(msg(b"1"))
    assert not q.would_overflow()
    q.push(msg(b"2"))
    assert q.would_overflow()
    q.get()
    assert not q.would_overflow()


def test_drop_head_queue_never_refuses_publishes() -> None:
    q = Queue("/", "q", arguments={"x-max-length": 1})
    q.push(msg(b"1"))
    assert not q.would_overflow()


def test_purge_empties_the_queue_and_returns_what_was_ready() -> None:
    q, ch = Queue("/", "q"), RecordingChannel()
    c = consumer(q, ch, "c", prefetch=1)
    for b in (b"1", b"2", b"3"):
        q.push(msg(b))
    gone = q.purge()
    assert [e.msg.body for e in gone] == [b"2", b"3"]  # the unacked delivery is not purged
    assert q.message_count == 0
    ch.settle(q, c)
    assert ch.bodies() == [b"1"]


def test_requeue_into_a_full_queue_drops_from_the_head() -> None:
    hooks = RecordingHooks()
    q = Queue("/", "q", arguments={"x-max-length": 2}, hooks=hooks)
    q.push(msg(b"1"))
    q.push(msg(b"2"))
    one = q.get()
    assert one is not None
    q.push(msg(b"3"))
    q.requeue([one])
    assert q.message_count == 2
    assert drain(q) == [b"2", b"3"]
    assert hooks.dropped_entries == [(b"1", "maxlen")]


def test_single_active_consumer_gets_every_message_until_it_leaves() -> None:
    q, ch = Queue("/", "q", arguments={"x-single-active-consumer": True}), RecordingChannel()
    first = consumer(q, ch, "first")
    consumer(q, ch, "second")
    for i in range(3):
        q.push(msg(str(i).encode()))
    assert ch.tags() == ["first"] * 3
    q.remove_consumer(first)
    q.push(msg(b"3"))
    assert ch.tags()[-1] == "second"


# -- model-based: random publish / get / requeue / ack sequences ------------------------------------------


class QueueModel(RuleBasedStateMachine):
    """The queue against a list kept in the order RabbitMQ defines: by priority level (when the queue has
    x-max-priority), then by publish order, requeued messages back in their original place."""

    MAX_PRIORITY: int | None = None

    def __init__(self) -> None:
        super().__init__()
        args = {"x-max-priority": self.MAX_PRIORITY} if self.MAX_PRIORITY else {}
        self.q = Queue("/", "q", arguments=args)
        self.n = 0
        self.model: list[tuple[int, int, bytes]] = []  # (level, seq, body)
        self.redelivered: set[bytes] = set()
        self.out: dict[bytes, Entry] = {}

    def _key(self, item: tuple[int, int, bytes]) -> tuple[int, int]:
        return (-item[0], item[1])

    @rule(priority=st.none() | st.integers(0, 9))
    def publish(self, priority: int | None) -> None:
        self.n += 1
        body = str(self.n).encode()
        self.q.push(msg(body, priority=priority) if priority is not None else msg(body))
        level = min(priority or 0, self.MAX_PRIORITY) if self.MAX_PRIORITY else 0
        self.model.append((level, self.n, body))
        self.model.sort(key=self._key)

    @rule()
    def get(self) -> None:
        entry = self.q.get()
        if not self.model:
            assert entry is None
            return
        _, _, body = self.model.pop(0)
        assert entry is not None and entry.msg.body == body
        assert entry.redelivered == (body in self.redelivered)
        self.out[body] = entry

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.out)), min_size=1, unique=True))
        entries = [self.out.pop(b) for b in chosen]
        self.q.requeue(entries)
        for e in entries:
            level = min(e.msg.priority or 0, self.MAX_PRIORITY) if self.MAX_PRIORITY else 0
            self.model.append((level, int(e.msg.body), e.msg.body))
            self.redelivered.add(e.msg.body)
        self.model.sort(key=self._key)

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        self.out.pop(data.draw(st.sampled_from(sorted(self.out))))

    @invariant()
    def same_order(self) -> None:
        assert [e.msg.body for e in self.q.ready] == [b for _, _, b in self.model]
        assert self.q.message_count == len(self.model)


class PriorityQueueModel(QueueModel):
    MAX_PRIORITY = 3


_model_settings = hsettings(max_examples=60, stateful_step_count=30, deadline=None)
TestQueueAgainstModel = QueueModel.TestCase
TestQueueAgainstModel.settings = _model_settings
TestPriorityQueueAgainstModel = PriorityQueueModel.TestCase
TestPriorityQueueAgainstModel.settings = _model_settings
