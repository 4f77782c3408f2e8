"""A queue: ready messages in order, consumers served round-robin, TTL, length limits.

Plain object: delivery goes to its subscribers through a small protocol (subscriber.py: can_accept, deliver),
never past them into channels; the wall clock comes from the hooks (QueueHooks.now_ms), durability and
dead-lettering go through the hooks. No sockets here; a durable queue's backlog is read back through
QueueHooks.read_ahead (the store's read worker) and QueueHooks.load, and paged-out bodies near the head
through QueueHooks.read_bodies: dispatch waits for them rather than read on the loop (see backlog.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, Generic, TypeVar

from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.dedup import Deduplicator
from amqpd.broker.queues.delivery_count import counts_deliveries, delivery_limit
from amqpd.broker.queues.flow import Pace, TurnClock
from amqpd.broker.queues.message_ids import wants_ids
from amqpd.broker.queues.ready import FifoReady, PriorityReady
from amqpd.broker.queues.subscriber import Subscriber
from amqpd.protocol.properties import with_delivery_count


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class QueueHooks:
    """What a queue tells the outside world; the vhost wires these to the store and dead-lettering."""

    def dropped(self, queue: Queue, entry: Entry, reason: str) -> None:  # expired, maxlen, rejected
        """A message left the queue without being acked by a consumer."""

    def settled(self, queue: Queue, entry: Entry) -> None:
        """A message was acked (or delivered with no-ack): the queue needs it no more."""

    def settled_many(self, queue: Queue, entries: list[Entry]) -> None:
        """settled() for each of these (a multiple-ack's range): a hook with nothing to do for a queue says so once."""
        for entry in entries:
            self.settled(queue, entry)

    def unused(self, queue: Queue) -> None:
        """x-expires ran out: the queue should be deleted."""

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Any:
        """Run callback later on the broker's loop; returns a handle with cancel()."""
        return None

    def load(self, queue: Queue, offsets: list[int], ahead: Any = None) -> list[Message | None]:
        """Messages for store offsets (None: no longer readable), from `ahead` (what read_ahead read) where it
        has them, else read from the store now."""
        return [None] * len(offsets)

    def read_ahead(self, queue: Queue, offsets: list[int], done: Callable[[Any], None]) -> bool:
        """Start reading these offsets' records in a worker thread; `done(ahead)` on the loop when they are
        in. False: not possible here (load() will read them when needed)."""
        return False

    def page_in(self, queue: Queue, msg: Message, ahead: Any) -> None:
        """Give a paged-out message its body back from what read_ahead read, if it has it."""

    def read_bodies(self, queue: Queue, msgs: list[Message], done: Callable[[list[Message]], None]) -> bool:
        """Start reading these paged-out messages' bodies back in a worker thread; they are set and `done(lost)`
        is called on the loop once they are, with those the store could not give back (damaged on disk).
        False: not possible here (they are read when delivered)."""
        return False

    def unreadable(self, queue: Queue, entry: Entry) -> None:
        """A message whose body the store could not give back (damaged on disk) left the queue: it is lost."""

    def forget(self, queue: Queue, offsets: list[int]) -> None:
        """Recovered messages that were never read back left the queue (purge)."""

    def dropped_stored(self, queue: Queue, offsets: list[int], reason: str) -> None:
        """Messages only the store holds (these offsets, in queue order, never read back) left the queue
        without being acked: dropped() for each, reading them back only if they are to be dead-lettered."""
        self.forget(queue, offsets)

    def created(self, vhost: str, obj: Any) -> None:
        """A queue or exchange was declared: the policies that match apply to it."""

    def counted(self, queue: Queue, entry: Entry, count: int) -> None:
        """A message goes back to a queue that counts deliveries: its new count should survive a restart."""

    def now_ms(self) -> int:
        """The wall clock in ms (TTL), injected so that tests can move it."""
        return wall_clock_ms()

    def turn_clock(self) -> TurnClock:
        """The event loop's turns (flow.py: consumer pace); a queue on its own gets a clock nobody moves."""
        return TurnClock()


S = TypeVar("S", bound=Subscriber)  # the consumers' type: Consumer in the broker, anything that subscribes in tests


class Queue(Generic[S]):
    def __init__(
        self,
        vhost: str,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict | None = None,
        hooks: QueueHooks | None = None,
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or {}
        self.hooks = hooks or QueueHooks()
        self.now_ms = self.hooks.now_ms
        max_priority = (arguments or {}).get("x-max-priority")
        self.ready: FifoReady | PriorityReady | Backlog = PriorityReady(max_priority) if max_priority else FifoReady()
        self.consumers: list[S] = []
        self.unacked = 0
        self.unacked_bytes = 0  # their body bytes (both kept by the channels' unacked tables, unacked.py)
        self.deleted = False
        self.had_consumers = False
        self.store_id: int | None = None
        # Message counters for the management API (rates are sampled from them by a timer, mgmt/stats.py);
        # publishes are counted by _seq, which every push advances anyway.
        self.delivered = 0  # to consumers and basic.get
        self.acked = 0
        self._rr = 0
        self._seq = 0
        self._ttl_timer: Any = None
        self.message_ttl: int | None = self.arguments.get("x-message-ttl")
        self.max_length: int | None = self.arguments.get("x-max-length")
        self.max_length_bytes: int | None = self.arguments.get("x-max-length-bytes")
        self.overflow: str = self.arguments.get("x-overflow", "drop-head")
        self.ready_bytes = 0
        self.dedup = Deduplicator.from_arguments(self.arguments)
        # limited: publishes to it go through Publisher.admit (length limits, duplicates)
        self.limited = self.max_length is not None or self.max_length_bytes is not None or self.dedup is not None
        self.exclusive_consumer: S | None = None
        self.throttled: set[Any] = set()  # publishing connections paused until the backlog drains
        self.pace = Pace(self.hooks.turn_clock())  # whether its consumers wait on the broker (flow.py)
        self.single_active = self.arguments.get("x-single-active-consumer") is True
        # Quorum queues, and any queue with x-delivery-limit, count returns and send x-delivery-count.
        self.counts_deliveries = counts_deliveries(self.arguments)
        self._prioritised = False
        self._rr_levels: dict[int, int] = {}
        self.expires_ms: int | None = self.arguments.get("x-expires")
        self._expiry_timer: Any = None
        self.effective: dict = self.arguments  # arguments in force: the declared ones combined with a policy
        self.policy: Any = None  # the policy that applies (routing/policy.py), if any
        self.delivery_limit = delivery_limit(self.arguments)
        self.recovered_counts: dict[int, int] = {}  # store offset -> delivery count, until read back
        self.stamps_ids = wants_ids(self.arguments)  # x-amqpd-message-id (message_ids.py)
        self._paging_in = False  # bodies near the head are being read back (_wait_for_head)
        self._paged_in_for: Entry | None = None  # the head the last read was for
        self._lost: set[Message] = set()  # paged out, and the store could not give their bodies back

    is_stream = False  # a StreamQueue (streams/stream.py) answers True
    always_stored = False  # True: the store takes its messages persistent or not (streams)

    # Ready messages, with consumers waiting on the broker (flow.py), before publishers pause; they go on
    # when it drains to FLOW_LOW, when its consumers leave, or at housekeeping (Broker.check_flow), until
    # the consumers show again that they wait on the broker. One slow return does not release them.
    FLOW_HIGH = 20_000
    FLOW_LOW = 10_000
    # Most deliveries handed to one consumer at once (dispatch): a batch is encoded as one buffer, and a few
    # hundred keep it in cache where a whole drained backlog (megabytes) would not; no-ack consumers have no limit.
    HAND_OUT = 256
    PAGE_WINDOW = 2_000  # messages kept in memory at the head of a durable queue; the store holds the rest
    # Queues that cannot hold bare offsets (priorities, a byte limit) page out only the bodies of their deep
    # persistent messages, and only big ones: the message object stays (~600 bytes) either way.
    PAGE_MIN_BODY = 512
    PAGE_IN_AHEAD = 256  # entries from the head whose paged-out bodies are read back together

    def __repr__(self) -> str:
        return f"<Queue {self.vhost}:{self.name}>"

    def configure(self, effective: dict, policy: Any = None) -> None:
        """A policy changed what applies (routing/policy.py merged it with the declared arguments): the limits,
        TTLs, overflow and expiry in `effective` apply from now on, to the messages already queued too."""
        self.effective, self.policy = effective, policy
        self.message_ttl = effective.get("x-message-ttl")
        self.max_length = effective.get("x-max-length")
        self.max_length_bytes = effective.get("x-max-length-bytes")
        self.overflow = effective.get("x-overflow", "drop-head")
        self.limited = self.max_length is not None or self.max_length_bytes is not None
        # A delivery-limit policy makes any queue count returns (x-delivery-count), as the argument does.
        self.delivery_limit = delivery_limit(effective)
        self.counts_deliveries = counts_deliveries(effective)
        if effective.get("x-expires") != self.expires_ms:
            self.expires_ms = effective.get("x-expires")
            self._cancel_expiry()
            self.touch()
        if self.limited:
            self._drop_head_over_limit()

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def published(self) -> int:
        """Messages that entered the queue (recovered ones included)."""
        return self._seq

    def takes_as_sent(self) -> bool:
        """Whether push() of a new message without a TTL that no store holds does nothing but queue it or hand
        it to a consumer as it was sent: no queue TTL, no delivery count in its header, no stream log. A
        publish plan (routing/plan.py) lets a run or group of publishes skip push() on such a queue
        (take_run, take_group): every rule that push() or deliver() applies to a new message must make this
        False."""
        return self.message_ttl is None and not self.counts_deliveries and not self.is_stream

    def run_consumer(self) -> S | None:
        """The consumer push() would hand each of a run of new messages to, as they come: the queue is empty and
        its one consumer (or single active one) takes them without acks and can take them now. None when
        push() would queue one, or could pick another consumer for the next."""
        if self.ready:
            return None
        consumer = self.sole_consumer()
        if consumer is None or not consumer.no_ack or not consumer.can_accept():
            return None
        return consumer

    def take_run(self, n: int) -> None:
        """n messages went straight through to run_consumer() without a push (PublishGroups.run): counted
        as published, as push() counts them (their delivery counts where every delivery does: Deliveries)."""
        self._seq += n

    def take_group(self, msgs: list[Message]) -> None:
        """push() of each of these new messages, for which the queue takes them as sent (takes_as_sent(), and
        no TTL, store offset or delivery count of their own: PublishGroups.group checks that with the
        publish plan): handed to consumers with room while nothing waits, as push() hands them, to a consumer
        with no other to share them with as many at once as it has room for; the rest wait in order."""
        seq = self._seq
        self._seq = seq + len(msgs)
        entries = [Entry(m, s, None) for s, m in enumerate(msgs, seq + 1)]
        done = 0
        if self.consumers and not self.ready:
            done = self._hand_out(entries)
            if done < len(entries):
                self.pace.stalled()
        ready = self.ready
        append = ready.append
        for entry in entries[done:] if done else entries:
            append(entry)
        self.ready_bytes += sum(m.size for m in msgs[done:])

    def _hand_out(self, entries: list[Entry]) -> int:
        """How many of these new entries, from the first, consumers with room took (round-robin, as push())."""
        done, n = 0, len(entries)
        while done < n:
            consumer = self._next_consumer()
            if consumer is None:
                break
            room = min(consumer.room(), self.HAND_OUT) if self.sole_consumer() is consumer else 1
            if room > 1:
                batch = entries[done : done + room]
                consumer.deliver_many(self, batch)
                done += len(batch)
            else:
                consumer.deliver(self, entries[done])
                done += 1
        return done

    # -- publishing ------------------------------------------------------------------------------------

    def would_overflow(self) -> bool:
        """reject-publish: the queue is full and refuses new messages (the publisher gets a nack)."""
        if not self.overflow.startswith("reject-publish"):
            return False
        return self._over_limit(1, 0)

    def _over_limit(self, extra: int, extra_bytes: int) -> bool:
        if self.max_length is not None and len(self.ready) + extra > self.max_length:
            return True
        return self.max_length_bytes is not None and self.ready_bytes + extra_bytes > self.max_length_bytes

    def push(self, msg: Message, redelivered: bool = False, enqueued_ms: int | None = None) -> None:
        """Append a newly routed message, or hand it straight to a consumer that can take it.
        enqueued_ms: when it first entered the queue (recovery), so TTLs keep counting from then."""
        self._seq += 1
        if msg.store_offset is not None and len(self.ready) >= self.PAGE_WINDOW and self._spills(msg, redelivered):
            # Deep in a durable queue's backlog: keep its place only; it is read back when its turn comes.
            self._backlog().spill_offset(self._seq, msg.store_offset)
            if self.limited:
                self._drop_head_over_limit()
            return
        expires = None if self.message_ttl is None and msg.ttl_ms is None else self._expiry(msg, enqueued_ms)
        entry = Entry(msg, self._seq, expires)
        entry.redelivered = redelivered
        if self.recovered_counts:
            entry.returns = self.recovered_counts.pop(msg.store_offset, 0)  # type: ignore[arg-type]
        if self.consumers and not self.ready:
            consumer = self._next_consumer()
            if consumer is not None:
                consumer.deliver(self, entry)
                return
            self.pace.stalled()
        self.ready.append(entry)
        self.ready_bytes += msg.size
        if msg.pageable and msg.size >= self.PAGE_MIN_BODY and len(self.ready) > self.PAGE_WINDOW:
            msg.body = None  # deep in a backlog: the store holds it, and it is read back when its turn comes
        if self.limited:
            self._drop_head_over_limit()
        if expires is not None:
            self._arm_ttl_timer()

    def push_many(self, msgs: list[Message]) -> None:
        """Newly routed messages published together, in order (a stream gives their offsets in one step): push()
        of each. While nothing waits and none has an expiry or a recovered delivery count, those consumers
        take are handed out as take_group hands them (to a sole consumer as many at once as it has room for:
        one encoding pass, one unacked run); the rest are pushed one by one."""
        done = 0
        if self.consumers and not self.ready and self.message_ttl is None and not self.recovered_counts:
            if all(m.ttl_ms is None for m in msgs):
                seq = self._seq
                entries = [Entry(m, s, None) for s, m in enumerate(msgs, seq + 1)]
                done = self._hand_out(entries)
                self._seq = seq + done  # push() numbers the rest (and marks the stall, if any)
        for msg in msgs[done:] if done else msgs:
            self.push(msg)

    def _spills(self, msg: Message, redelivered: bool) -> bool:
        """Whether a stored message can wait as its offset alone. Not with a TTL: read back, its expiry
        would count from the record's publish time, which a dead-lettered message keeps from its first life."""
        # A transient message stored only for a stream it also reached: that record is the stream's.
        return (
            not redelivered
            and not msg.for_streams
            and msg.ttl_ms is None
            and self.message_ttl is None
            and self.holds_offsets
        )

    @property
    def holds_offsets(self) -> bool:
        """Whether messages the store holds for this queue may wait as bare store offsets (Backlog): a durable
        FIFO queue that needs no per-message size up front (x-max-length-bytes counts every ready byte)."""
        return self.store_id is not None and self.max_length_bytes is None and not isinstance(self.ready, PriorityReady)

    def _backlog(self) -> Backlog:
        ready = self.ready
        if not isinstance(ready, Backlog):
            assert isinstance(ready, FifoReady)
            ready = self.ready = Backlog(ready, self._load_entries, self._read_ahead, self._page_in)
        return ready

    def adopt_backlog(self, offsets: list[int], flagged: set[int] | None, ahead: Any = None) -> None:
        """Recovery: the queue's messages are these store offsets, read back when their turn comes.
        flagged: offsets to deliver as redelivered, None for all. ahead: Backlog.adopt's."""
        self._seq = self._backlog().adopt(offsets, flagged, self._seq + 1, ahead) - 1
        self._arm_ttl_timer()

    def _read_ahead(self, offsets: list[int], done: Callable[[Any], None]) -> bool:
        def read(ahead: Any) -> None:
            if self.deleted:
                return
            done(ahead)  # a window that waited for it is refilled
            if self.consumers:
                self.dispatch()  # a consumer may wait for it (Backlog.would_read)
            self._arm_ttl_timer()

        return self.hooks.read_ahead(self, offsets, read)

    def _page_in(self, entry: Entry, ahead: Any) -> None:
        self.hooks.page_in(self, entry.msg, ahead)

    def _load_entries(self, offsets: list[int], seqs: list[int], flags: list[bool], ahead: Any = None) -> list[Entry]:
        entries = []
        for msg, seq, flag in zip(self.hooks.load(self, offsets, ahead), seqs, flags, strict=True):
            if msg is None:
                continue
            ttl = self.message_ttl is not None or msg.ttl_ms is not None
            entry = Entry(msg, seq, self._expiry(msg, msg.timestamp_ms) if ttl else None)
            entry.redelivered = flag
            if self.recovered_counts:
                entry.returns = self.recovered_counts.pop(msg.store_offset, 0)  # type: ignore[arg-type]
            self.ready_bytes += msg.size
            entries.append(entry)
        return entries

    def _expiry(self, msg: Message, enqueued_ms: int | None) -> int | None:
        ttl = self.message_ttl
        if msg.ttl_ms is not None and (ttl is None or msg.ttl_ms < ttl):
            ttl = msg.ttl_ms
        return None if ttl is None else (enqueued_ms or self.now_ms()) + ttl

    def _drop_head_over_limit(self) -> None:
        ready = self.ready
        while ready and self._over_limit(0, 0):
            if isinstance(ready, Backlog) and ready.waiting():
                over = len(ready) - self.max_length if self.max_length is not None else 1
                self._drop_unread(ready.take_unread(max(over, 1)), "maxlen")
                continue
            entry = self._popleft()
            self.hooks.dropped(self, entry, "maxlen")

    def _drop_unread(self, items: list[Entry | int], reason: str) -> None:
        """Drop these items off a waiting backlog's head (Backlog.take_unread), in order: the messages only the
        store holds as offsets, without reading them back unless they are dead-lettered."""
        offsets: list[int] = []
        for item in items:
            if isinstance(item, int):
                offsets.append(item)
                if self.recovered_counts:
                    self.recovered_counts.pop(item, None)
                continue
            if offsets:
                self.hooks.dropped_stored(self, offsets, reason)
                offsets = []
            self.ready_bytes -= item.msg.size
            self.hooks.dropped(self, item, reason)
        if offsets:
            self.hooks.dropped_stored(self, offsets, reason)

    def _popleft(self) -> Entry:
        entry = self.ready.popleft()
        self.ready_bytes -= entry.msg.size
        return entry

    # -- consuming -------------------------------------------------------------------------------------

    def add_consumer(self, consumer: S) -> None:
        self.consumers.append(consumer)
        if not self.single_active:  # a single active consumer is the longest-waiting one, priority aside
            self.consumers.sort(key=lambda c: -c.priority)  # stable: equal priorities keep arrival order
        self._prioritised = len({c.priority for c in self.consumers}) > 1
        self.had_consumers = True
        self._cancel_expiry()
        if consumer.exclusive:
            self.exclusive_consumer = consumer
        self.dispatch()

    def remove_consumer(self, consumer: S) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._prioritised = len({c.priority for c in self.consumers}) > 1
        if not self.consumers and self.throttled:
            self.release_publishers()
        if self.exclusive_consumer is consumer:
            self.exclusive_consumer = None
        if not self.consumers:
            self.touch()

    def dispatch(self) -> None:
        """Deliver ready messages while some consumer has room: to a consumer that has no other to share them
        with, as many as it has room for in one hand-over."""
        ready = self.ready
        waited = bool(ready)
        backlog = ready if isinstance(ready, Backlog) else None
        while ready:
            if backlog is not None and backlog.would_read():
                break  # _read_ahead's done dispatches again
            if ready[0].msg.body is None:
                if self._lost and self.drop_lost_head():
                    continue
                if self._wait_for_head():
                    break
            consumer = self._next_consumer()
            if consumer is None:
                if not waited:  # they took what they could; the rest waits for them to come back
                    self.pace.stalled()
                break
            if waited:
                waited = False
                self.pace.came_back()
            room = min(consumer.room(), self.HAND_OUT) if self.sole_consumer() is consumer else 1
            if room > 1 and ready[0].expires_at is None:
                consumer.deliver_many(self, self._take_ready(room))
                continue
            entry = self._popleft()
            if entry.expires_at is not None and entry.expires_at <= self.now_ms():
                self.hooks.dropped(self, entry, "expired")
                continue
            consumer.deliver(self, entry)
        if self.throttled and len(ready) < self.FLOW_LOW:
            self.release_publishers()
        if self._head_in() and ready[0].expires_at is not None:
            self._arm_ttl_timer()

    def _head_in(self) -> bool:
        """Whether the head is there to look at without reading: something is ready, and it is not a backlog
        whose window waits for the worker's read (its arrival looks at the head: _read_ahead)."""
        ready = self.ready
        return bool(ready) and not (isinstance(ready, Backlog) and ready.waiting())

    def _wait_for_head(self) -> bool:
        """The head's body is paged out: whether to wait while the store's read worker reads it back with
        the others near the head (the loop never reads the disk), dispatching again once they are in. False
        where that is not possible (no event loop): delivering it reads it then. One the read found damaged
        is dropped before it gets here (drop_lost_head)."""
        if self._paging_in:
            return True
        head = self.ready[0]
        if head is self._paged_in_for or not self.consumers:
            return False
        ahead = self.ready.window if isinstance(self.ready, Backlog) else self.ready
        wanted = [e.msg for e in islice(ahead, self.PAGE_IN_AHEAD) if e.msg.body is None]
        self._paging_in = self.hooks.read_bodies(self, wanted, self._paged_in)
        self._paged_in_for = head if self._paging_in else None
        return self._paging_in

    def _paged_in(self, lost: list[Message]) -> None:
        self._paging_in = False
        self.lost(lost)
        if not self.deleted:
            self.dispatch()

    def lost(self, msgs: list[Message]) -> None:
        """These paged-out messages' bodies could not be read back (damaged on disk): each leaves the queue
        when it reaches the head, instead of being delivered (drop_lost_head)."""
        self._lost.update(msgs)

    def drop_lost_head(self) -> bool:
        """Drop the head if its body could not be read back (the store's worker read found it damaged), as a
        backlog drops a record it cannot decode: logged and acked, so that it does not come back."""
        if not self._lost or not self._head_in():
            return False
        head = self.ready[0]
        if head.msg not in self._lost:
            return False
        self._lost.discard(head.msg)
        self.hooks.unreadable(self, self._popleft())
        return True

    def _take_ready(self, room: int) -> list[Entry]:
        """Up to `room` ready messages from the head, stopping before one with an expiry (dispatch() looks at
        each of those alone: dropping it may dead-letter it back into this queue)."""
        ready = self.ready
        popleft = ready.popleft
        backlog = ready if isinstance(ready, Backlog) else None
        taken = [popleft()]
        while ready and len(taken) < room:
            if backlog is not None and backlog.would_read():
                break
            if ready[0].expires_at is not None or ready[0].msg.body is None:
                break
            taken.append(popleft())
        self.ready_bytes -= sum(e.msg.size for e in taken)
        return taken

    def header_for(self, entry: Entry, fetched: bool = False) -> bytes:
        """The content header a client gets for this entry: the publisher's, or a quorum queue's copy with
        x-delivery-count. As RabbitMQ 3.10's: a basic.get always shows the count (0 the first time), a
        consumer only once the message has come back (rabbit_fifo_client adds it when a count exists)."""
        if self.counts_deliveries and (fetched or entry.returns):
            return with_delivery_count(entry.msg.header, entry.returns)
        return entry.msg.header

    def sole_consumer(self) -> S | None:
        """The one consumer _next_consumer() can pick, when it has no choice to make (one consumer, or a
        single active one); None when it round-robins or picks by priority."""
        consumers = self.consumers
        if len(consumers) == 1 or (consumers and self.single_active):
            return consumers[0]
        return None

    def _next_consumer(self) -> S | None:
        consumers = self.consumers
        n = len(consumers)
        if n == 1 or (n and self.single_active):
            c = consumers[0]
            return c if c.can_accept() else None
        if self._prioritised:
            return self._next_by_priority()
        for i in range(n):
            c = consumers[(self._rr + i) % n]
            if c.can_accept():
                self._rr = (self._rr + i + 1) % n
                return c
        return None

    def _next_by_priority(self) -> S | None:
        """The highest priority level with a consumer that has room; round-robin within the level."""
        for priority in sorted({c.priority for c in self.consumers}, reverse=True):
            level = [c for c in self.consumers if c.priority == priority]
            start = self._rr_levels.get(priority, 0)
            for i in range(len(level)):
                c = level[(start + i) % len(level)]
                if c.can_accept():
                    self._rr_levels[priority] = (start + i + 1) % len(level)
                    return c
        return None

    def release_publishers(self) -> None:
        throttled, self.throttled = self.throttled, set()
        for conn in throttled:
            conn.unthrottle(self)

    def get(self) -> Entry | None:
        """basic.get: the next live message, or None."""
        self.touch()
        self.expire_head()
        while self._lost and self.drop_lost_head():
            self.expire_head()
        if not self.ready:
            return None
        return self._popleft()

    # -- requeue, purge, expiry --------------------------------------------------------------------------

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put messages back at their original positions, marked redelivered (as RabbitMQ does)."""
        back = sorted(entries, key=lambda e: e.seq)
        if self.counts_deliveries:
            back = self._within_limit(back)
        if not back:
            return
        for e in back:
            e.redelivered = True
            e.returns += 1
            self.ready_bytes += e.msg.size
        self.ready.restore(back)
        if self.limited:
            self._drop_head_over_limit()
        self.dispatch()

    def _within_limit(self, back: list[Entry]) -> list[Entry]:
        """This return counts one more delivery: a message it takes past the delivery limit leaves the queue
        (dead-lettered with reason delivery_limit, or dropped), as rabbit_fifo's return_one does; the others'
        new counts are kept durable."""
        kept = []
        limit = self.delivery_limit
        for e in back:
            if limit is not None and e.returns + 1 > limit:
                e.returns += 1
                self.hooks.dropped(self, e, "delivery_limit")
            else:
                self.hooks.counted(self, e, e.returns + 1)
                kept.append(e)
        return kept

    def purge(self) -> list[Entry]:
        ready = self.ready
        if isinstance(ready, Backlog):
            offsets, spilled = ready.take_stored()
            if offsets and not self.deleted:  # a deleted queue's whole store state goes with it at once
                self.hooks.forget(self, offsets)
            gone = [*ready.window, *spilled]
        else:
            gone = list(ready)
        ready.clear()
        self.ready_bytes = 0
        self._lost.clear()
        return gone

    def expire_head(self) -> None:
        """Drop expired messages from the head (RabbitMQ expires classic-queue messages at the head)."""
        ready = self.ready
        if not self._head_in() or ready[0].expires_at is None:
            return
        now = self.now_ms()
        while self._head_in() and ready[0].expires_at is not None and ready[0].expires_at <= now:  # type: ignore[operator]
            self.hooks.dropped(self, self._popleft(), "expired")
        # Per-message TTLs can leave a live message in front of expired ones; those go when they reach the head.

    def _arm_ttl_timer(self) -> None:
        if self._ttl_timer is not None or not self._head_in() or self.deleted:
            return
        head = self.ready[0].expires_at
        if head is None:
            return
        delay = max(0.0, (head - self.now_ms()) / 1000) + 0.001

        def fire() -> None:
            self._ttl_timer = None
            if self.deleted:
                return
            self.expire_head()
            self.dispatch()
            self._arm_ttl_timer()

        self._ttl_timer = self.hooks.schedule(delay, fire)

    # -- x-expires: an unused queue deletes itself ---------------------------------------------------------

    def touch(self) -> None:
        """The queue was used (declared, polled with basic.get, or lost its last consumer): the
        x-expires countdown starts again."""
        if self.expires_ms is None or self.deleted:
            return
        self._cancel_expiry()
        if not self.consumers:
            self._expiry_timer = self.hooks.schedule(self.expires_ms / 1000, self._expire)

    def _cancel_expiry(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    def _expire(self) -> None:
        self._expiry_timer = None
        if not self.deleted and not self.consumers:
            self.hooks.unused(self)

    def close(self) -> None:
        self.deleted = True
        self._cancel_expiry()
        self.release_publishers()
        if self._ttl_timer is not None:
            self._ttl_timer.cancel()
            self._ttl_timer = None
