"""The broker: users, virtual hosts, and the bridge from queues to the durable store and the clock."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import Any

from amqpd import errors
from amqpd.broker.access.control import AccessControl, User
from amqpd.broker.connections import Connections
from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.parameters import Parameters
from amqpd.broker.publish.dead_letter import dead_letter
from amqpd.broker.publish.delayed_release import DelayedDelivery
from amqpd.broker.publish.publisher import UNATTENDED, Publisher
from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.flow import TurnClock
from amqpd.broker.queues.queue import Queue, QueueHooks, wall_clock_ms
from amqpd.broker.recovery import message_from_record
from amqpd.broker.routing.exchanges import Exchange
from amqpd.broker.routing.plan import PublishPlan
from amqpd.broker.routing.policy import QUEUE_KEYS, Policies, merge
from amqpd.broker.routing.vhost import VirtualHost
from amqpd.broker.store_reads import read_in_worker
from amqpd.broker.streams.stream import StreamQueue
from amqpd.config import Settings
from store import AccessRows, MessageRecord

Scheduler = Callable[[float, Callable[[], None]], Any]
log = logging.getLogger("amqpd.broker")


class Once:
    """A confirm that is settled at most once, whichever outcome comes first: the message is safe (called:
    stored and fsync'd, or consumed and acked everywhere) or it could not be stored (`failed`)."""

    __slots__ = ("fn", "on_failed")

    def __init__(self, fn: Callable[[], None], on_failed: Callable[[], None] | None = None) -> None:
        self.fn: Callable[[], None] | None = fn
        self.on_failed = on_failed

    def __call__(self) -> None:
        fn, self.fn, self.on_failed = self.fn, None, None  # dropping the closures frees what they hold
        if fn is not None:
            fn()

    def failed(self) -> None:
        fail, self.fn, self.on_failed = self.on_failed, None, None
        if fail is not None:
            fail()


class Countdown:
    """Calls `fn` on its n-th call: a group's confirm (Once), when the queue's consumers have acked every
    message of the group before the fsync did (each message's on_settled, see BrokerHooks.settled)."""

    __slots__ = ("n", "fn")

    def __init__(self, n: int, fn: Callable[[], None]) -> None:
        self.n = n
        self.fn = fn

    def __call__(self) -> None:
        self.n -= 1
        if self.n == 0:
            self.fn()


_store_offset = attrgetter("store_offset")
_on_settled = attrgetter("on_settled")


class ChannelTotals:
    """Message counts of closed channels, so that the broker-wide totals do not go down when one closes."""

    def __init__(self) -> None:
        self.published = self.delivered = self.acked = self.confirmed = 0

    def add(self, channel: Any) -> None:
        self.published += channel.published
        self.delivered += channel.last_tag
        self.acked += channel.acked
        self.confirmed += channel.confirms.confirmed_upto


class BrokerHooks(QueueHooks):
    """Queue events → store bookkeeping, dead-lettering and timers."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def dropped(self, queue: Queue, entry: Entry, reason: str) -> None:
        if self.broker.dead_letter_later(queue, entry, reason):
            return
        self.settled(queue, entry)
        self.broker.dead_letter(queue, entry, reason)

    def settled(self, queue: Queue, entry: Entry) -> None:
        store = self.broker.store
        msg = entry.msg
        if store is None or queue.store_id is None or msg.store_offset is None or msg.for_streams:
            return  # a transient message is in the store only for the streams it reached
        store.ack(queue.store_id, msg.store_offset)
        if msg.on_settled is not None:
            # Every durable queue is done with it before its fsync: confirm now, as RabbitMQ does
            # (nothing confirmed can be lost: it has been consumed).
            msg.holders -= 1
            if msg.holders <= 0:
                confirm, msg.on_settled = msg.on_settled, None
                confirm()

    def settled_many(self, queue: Queue, entries: list[Entry]) -> None:
        store = self.broker.store
        if store is None or queue.store_id is None:
            return  # none of them is in the store for this queue (settled() would return for each)
        # settled() of each, the store's part for all of them in one call
        msgs = [msg for entry in entries if (msg := entry.msg).store_offset is not None and not msg.for_streams]
        store.ack_many(queue.store_id, list(map(_store_offset, msgs)))
        for msg in filter(_on_settled, msgs):  # those whose confirm waits on their acks
            msg.holders -= 1
            confirm = msg.on_settled
            if msg.holders <= 0 and confirm is not None:  # not None: filtered (for the type checker)
                msg.on_settled = None
                confirm()

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Any:
        return self.broker.schedule(delay_s, callback)

    def now_ms(self) -> int:
        return self.broker.now_ms()

    def turn_clock(self) -> TurnClock:
        return self.broker.turns

    def read_ahead(self, queue: Queue, offsets: list[int], done: Callable[[Any], None]) -> bool:
        store = self.broker.store
        if store is None:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests): load() reads when needed
            return False
        # The worker only preads (releasing the GIL); load() decodes on the loop, a slice at a time. Decoding
        # in the worker held the GIL against the loop: slower drains and a longer loop lag (measured).
        read_in_worker(
            store, f"{queue}: reading ahead", done, store.read_ahead(offsets), wanted=lambda: not queue.deleted
        )
        return True

    def load(self, queue: Queue, offsets: list[int], ahead: Any = None) -> list[Message | None]:
        store = self.broker.store
        if store is None:
            return [None] * len(offsets)
        found: list[Message | None] = []
        unreadable = []
        for offset, record in zip(offsets, store.read_many(offsets, ahead), strict=True):
            if record is None:
                unreadable.append(offset)
                found.append(None)
            else:
                found.append(message_from_record(record, offset))
        if unreadable:
            # Damaged on disk since the last checkpoint (recovery does not re-read checkpointed records):
            # the message is lost either way; forget it so it does not come back at every restart.
            log.error(
                "%s: %d recovered messages could not be read back from the store and were dropped",
                queue,
                len(unreadable),
            )
            if queue.store_id is not None:
                store.purge(queue.store_id, unreadable)
        return found

    def page_in(self, queue: Queue, msg: Message, ahead: Any) -> None:
        """A paged-out body comes back from the bytes read ahead, so that delivering it does not read."""
        store = self.broker.store
        if store is not None and msg.store_offset is not None:
            record = store.read_many([msg.store_offset], ahead)[0]
            if record is not None:
                msg.body = bytes(record.body)

    def read_bodies(self, queue: Queue, msgs: list[Message], done: Callable[[list[Message]], None]) -> bool:
        """The store's read worker reads the records back (it decodes them too: a few hundred at the head of
        a queue, not a backlog's drain); their bodies are set on the loop."""
        store = self.broker.store
        if store is None or not msgs:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests): delivering reads them
            return False
        by_offset = {msg.store_offset: msg for msg in msgs if msg.store_offset is not None}
        offsets = sorted(by_offset)
        read_in_worker(
            store,
            f"{queue}: reading paged-out bodies back",
            lambda records: _bodies_read(records, offsets, by_offset, done),
            store.read_many,
            offsets,
            wanted=lambda: not queue.deleted,
        )
        return True

    def unreadable(self, queue: Queue, entry: Entry) -> None:
        # As a backlog's record that fails its checks (load): the message is lost either way; acked so that
        # it does not come back at every restart.
        offset = entry.msg.store_offset
        log.error("%s: a message (store offset %s) could not be read back and was dropped", queue, offset)
        self.settled(queue, entry)

    def forget(self, queue: Queue, offsets: list[int]) -> None:
        store = self.broker.store
        if store is not None and queue.store_id is not None:
            store.purge(queue.store_id, offsets)

    def dropped_stored(self, queue: Queue, offsets: list[int], reason: str) -> None:
        if self.broker.dead_letter_stored(queue, offsets, reason):
            return
        store, ready = self.broker.store, queue.ready
        if store is None or not (isinstance(ready, Backlog) and ready.reading()):
            self.forget(queue, offsets)
            return
        # The read worker may be reading them as part of the queue's next batch: the store holds them until it
        # is done (a segment nobody holds may be deleted under a read).
        done = store.after_reads()
        done.add_done_callback(lambda f: None if f.cancelled() else self.forget(queue, offsets))

    def created(self, vhost: str, obj: Any) -> None:
        self.broker.apply_policy(vhost, obj)

    def counted(self, queue: Queue, entry: Entry, count: int) -> None:
        store = self.broker.store
        offset = entry.msg.store_offset
        if store is not None and queue.store_id is not None and offset is not None:
            store.set_delivery_count(queue.store_id, offset, count)

    def unused(self, queue: Queue) -> None:
        vhost = self.broker.vhosts.get(queue.vhost)
        if vhost is not None:
            vhost.remove_queue(queue)


def _bodies_read(
    records: list[MessageRecord | None],
    offsets: list[int],
    msgs: dict[int, Message],
    done: Callable[[list[Message]], None],
) -> None:
    """Paged-out bodies read back: set them; `done` gets those the store could not give back (damaged)."""
    done(_set_bodies(records, offsets, msgs))


def _set_bodies(records: list[MessageRecord | None], offsets: list[int], msgs: dict[int, Message]) -> list[Message]:
    """The bodies read back for these store offsets set on their messages still paged out; those the store
    could not give back (damaged) are returned."""
    lost = []
    for offset, record in zip(offsets, records, strict=True):
        msg = msgs[offset]
        if msg.body is None:
            if record is None:
                lost.append(msg)
            else:
                msg.body = bytes(record.body)
    return lost


class HeldTimer:
    """A timer asked for while timers are held (Broker.hold_timers): started when they are let go."""

    __slots__ = ("due", "callback", "handle", "cancelled")

    def __init__(self, delay_s: float, callback: Callable[[], None]) -> None:
        self.due, self.callback = time.monotonic() + delay_s, callback
        self.handle: Any = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()


class Broker:
    def __init__(
        self,
        settings: Settings,
        store: Any = None,
        scheduler: Scheduler | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """`now_ms`: the wall clock in ms (TTL, publish timestamps, x-death times); tests inject their own."""
        self.settings = settings
        self.now_ms = now_ms
        self.store = store
        self._scheduler = scheduler
        self.held_timers: list[HeldTimer] | None = None  # while recovery restores (hold_timers)
        self.hooks = BrokerHooks(self)
        self.vhosts: dict[str, VirtualHost] = {}
        self.connections = Connections()  # the sessions open (connection.open-ok sent), by user and vhost
        # Users, vhosts and permissions. Seeded from the settings (guest/guest on "/"); the store's copy
        # replaces this at recovery on a data dir that has been seeded before (attach_access).
        self.access = AccessControl(observer=self)
        self.access.seed(settings.seed_users(), settings.seed_vhosts())
        self.alarms: frozenset[str] = frozenset()  # resource alarms in force (server/alarms.py sets them)
        self.clock = time.monotonic()  # coarse, refreshed by the housekeeping timer: stamps deliveries cheaply
        self.turns = TurnClock()  # the event loop's turns: the unit of consumer pace (flow.py)
        # Dead letters waiting for a body read back, or behind one that is (dead_letter_later), in order:
        # [queue, entry, reason, ready to go]
        self._dead_letter_line: deque[list[Any]] = deque()
        self.busy = False  # the loop's CPU is saturated (server/load.py): publishers to deep queues pause too
        self.throttling: set[Queue] = set()  # queues with paused publishers
        self.policies = Policies(store)
        self.policies.changed = self.apply_policies
        self.parameters = Parameters(store)  # runtime parameters; components (amqpd/shovel) register on it
        self.closed_totals = ChannelTotals()  # message counts of channels that have closed (overview totals)
        self.started_at = time.time()
        self.publisher = Publisher(self)  # the one way in
        self.delayed = DelayedDelivery(self)
        self.store_pressure = False  # the store has more unwritten bytes than it may: publishers pause
        if store is not None:
            store.on_pressure = self.set_store_pressure

    def set_store_pressure(self, on: bool) -> None:
        """Backpressure from the disk: while the store's unwritten bytes are over its bound, reading from
        every publishing connection pauses (no connection.blocked: RabbitMQ's credit flow is silent too)."""
        self.store_pressure = on
        for session in list(self.connections):
            if session.publishes:
                session.hold_reading_for("store", on)

    def throttled(self, q: Queue) -> None:
        """A publisher into q was paused (Channel._flow)."""
        self.throttling.add(q)

    def set_busy(self, busy: bool) -> None:
        """Sampled load (server/load.py), the second reason to pause: when the broker has time to spare again,
        the publishers it paused go on; those paused because their queue's consumers wait on the broker
        (flow.py) stay paused."""
        self.busy = busy
        if not busy and self.throttling:
            for q in list(self.throttling):
                if not q.pace.lagging():
                    self.throttling.discard(q)
                    q.release_publishers()

    def check_flow(self) -> None:
        """Housekeeping: every paused publisher goes on, and its queue's consumers must show again that they
        wait on the broker (come back within PACE_TURNS turns while it is read, flow.py) before it pauses
        again. Behind consumers the broker starves, that takes a turn or two (one read of publishes). Behind
        consumers slow on their own, whose acks came one turn apart only because nothing else was read while
        the publisher was paused (a burst of tasks behind busy workers), it keeps going, as RabbitMQ's
        publishers do; so it does behind consumers that went quiet."""
        queues, self.throttling = self.throttling, set()
        for q in queues:
            q.pace.forget()
            q.release_publishers()

    def authenticate(self, user: str, password: str) -> bool:
        """Does the password match the user's? (PLAIN/AMQPLAIN logins, connection.update-secret.)"""
        return self.access.authenticate(user, password) is not None

    def login(self, user: str, password: str) -> User | None:
        return self.access.authenticate(user, password)

    def attach_access(self, rows: Any) -> None:
        """At recovery: the catalogue's users, vhosts and permissions (or, on a fresh data dir, write the
        seeded defaults to it)."""
        if self.store is not None:
            self.access.attach(self.store, rows if rows is not None else AccessRows())

    # -- AccessObserver: what follows from a change of the access model ----------------------------------

    def vhost_added(self, name: str) -> None:
        self.vhosts[name] = VirtualHost(name, self.hooks, self.store)

    def vhost_deleted(self, name: str) -> None:
        """RabbitMQ: its connections are closed with 320, then its queues (and their messages) and
        exchanges are deleted."""
        vhost = self.vhosts.pop(name, None)
        self.policies.drop_vhost(name)
        self.parameters.drop_vhost(name)
        if vhost is None:
            return
        for conn in self.connections.in_vhost(name):
            conn.close_forced(f"vhost '{name}' is deleted")
        for q in list(vhost.queues.values()):
            vhost.remove_queue(q)

    def vhost_message_ids(self, name: str, on: bool) -> None:
        vhost = self.vhosts.get(name)
        if vhost is not None:
            vhost.set_message_ids(on)

    def user_deleted(self, name: str) -> None:
        for conn in self.connections.of_user(name):
            conn.close_forced(f"user '{name}' is deleted")

    def connection_count(self, vhost: str) -> int:
        return self.connections.count_in_vhost(vhost)

    def check_queue_limit(self, vhost: VirtualHost, name: str) -> None:
        """Per-vhost max-queues, for newly declared queues only (rabbit_channel:check_vhost_queue_limit)."""
        limit = self.access.vhost_limit(vhost.name, "max-queues")
        if limit is not None and len(vhost.queues) >= limit:
            raise errors.precondition_failed(
                f"cannot declare queue '{name}': queue limit in vhost '{vhost.name}' ({limit}) is reached"
            )

    # -- policies ---------------------------------------------------------------------------------------

    def apply_policies(self, vhost_name: str) -> None:
        """Policies changed in a vhost (or it was recovered): every queue and exchange gets what applies now."""
        vhost = self.vhosts.get(vhost_name)
        if vhost is None:
            return
        for q in list(vhost.queues.values()):
            self.apply_policy(vhost_name, q)
        for ex in vhost.exchanges.values():
            self.apply_policy(vhost_name, ex)
        vhost.clear_route_cache()  # an alternate exchange may have come or gone

    def apply_policy(self, vhost: str, obj: Queue | Exchange) -> None:
        if isinstance(obj, Queue):
            policy = self.policies.match(vhost, "queue", obj.name)
            if policy is not None or obj.policy is not None:
                obj.configure(merge(obj.arguments, policy, QUEUE_KEYS), policy)
        elif obj.name:
            policy = self.policies.match(vhost, "exchange", obj.name)
            obj.policy = policy
            alternate = policy.definition.get("alternate-exchange") if policy is not None else None
            obj.policy_alternate = alternate if isinstance(alternate, str) else None

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Any:
        if self._scheduler is None:
            return None
        if self.held_timers is not None:
            held = HeldTimer(delay_s, callback)
            self.held_timers.append(held)
            return held
        return self._scheduler(delay_s, callback)

    def hold_timers(self) -> None:
        """Timers asked for from now on start only at start_timers(): recovery reads in the store's read
        worker between restoring one queue and the next, and a queue's TTL or a delayed exchange's release
        must not fire into a broker whose bindings are not all back yet."""
        self.held_timers = []

    def start_timers(self) -> None:
        held, self.held_timers = self.held_timers or [], None
        now = time.monotonic()
        for timer in held:
            if not timer.cancelled:  # due when it would have been: holding it made it no later
                timer.handle = self.schedule(max(timer.due - now, 0.0), timer.callback)

    def accepts_secret(self, user: str, secret: str) -> bool:
        """connection.update-secret: may `user`'s connection carry on with this new secret?

        RabbitMQ (rabbit_access_control:update_state) asks only backends whose credentials expire (OAuth 2
        tokens) to check a new secret; a password never expires, so its internal backend accepts any secret
        and client test suites rely on that (amqplib sends 'new secret' on a guest connection). Ours are
        passwords: the user must still exist, the secret itself is not compared."""
        return self.access.get_user(user) is not None

    # -- durability -------------------------------------------------------------------------------------

    def store_message(
        self,
        msg: Message,
        queues: list[Queue],
        on_durable: Callable[[], None] | None,
        on_failed: Callable[[], None] | None = None,
    ) -> bool:
        """Write a persistent message for the durable queues it reached; True when on_durable will fire
        after the fsync that covers it (the publisher's confirm waits for that), or on_failed if the store
        could not write it (a full or failing disk: the publisher gets a nack). A transient message is written
        for the streams among the queues only."""
        if self.store is None:
            return False
        if len(queues) == 1:
            q = queues[0]
            ids = [q.store_id] if q.store_id is not None and (msg.persistent or q.always_stored) else []
        else:  # a transient message is written for the streams among them only
            ids = [q.store_id for q in queues if q.store_id is not None and (msg.persistent or q.always_stored)]
        if not ids:
            return False
        if msg.timestamp_ms == 0:
            msg.timestamp_ms = self.now_ms()
        expires = msg.timestamp_ms + msg.ttl_ms if msg.ttl_ms is not None else None
        body = msg.body if msg.body is not None else self.body_of(msg)
        record = MessageRecord(msg.exchange, msg.routing_key, msg.header, body, msg.timestamp_ms, expires)
        failed = None
        if on_durable is not None:
            on_durable = once = Once(on_durable, on_failed)
            msg.on_settled, msg.holders = on_durable, len(ids)
            failed = once.failed
        msg.store_offset = self.store.append(record, ids, on_durable, failed)
        msg.for_streams = not msg.persistent
        msg.pageable = len(ids) == len(queues)
        return on_durable is not None

    def store_group(
        self,
        msgs: list[Message],
        queue: Queue,
        on_durable: Callable[[], None],
        on_failed: Callable[[], None],
    ) -> None:
        """Write messages that all go to one durable queue or stream alone (each persistent, or the queue a
        stream), as store_message writes one, in one append: one on_durable (or on_failed) for them all, once
        the fsync covering them is done. The confirm also goes once the queue's consumers have acked every one
        of them, as store_message's does for one message."""
        assert self.store is not None and queue.store_id is not None
        now = self.now_ms()
        records = []
        for msg in msgs:
            if msg.timestamp_ms == 0:
                msg.timestamp_ms = now
            expires = msg.timestamp_ms + msg.ttl_ms if msg.ttl_ms is not None else None
            body = msg.body if msg.body is not None else self.body_of(msg)
            records.append(MessageRecord(msg.exchange, msg.routing_key, msg.header, body, msg.timestamp_ms, expires))
        once = Once(on_durable, on_failed)
        settled = Countdown(len(msgs), once)
        offset = self.store.append_many(records, [queue.store_id], once, once.failed)
        for msg in msgs:
            msg.on_settled, msg.holders = settled, 1
            msg.store_offset = offset
            msg.for_streams = not msg.persistent
            msg.pageable = True
            offset += 1

    def store_stream_group(
        self,
        stream: Queue,
        exchange: str,
        routing_key: str,
        headers: list[bytes],
        bodies: list[bytes],
        on_durable: Callable[[], None],
        on_failed: Callable[[], None],
    ) -> None:
        """store_group for publishes to one stream alone, from their checked headers and bodies: the records
        store_group writes for their messages (none has an expiration), without the messages, which a stream
        does not keep. The stream counts them in (StreamQueue.push_stored)."""
        assert self.store is not None and stream.store_id is not None and isinstance(stream, StreamQueue)
        now = self.now_ms()
        records = [MessageRecord(exchange, routing_key, h, b, now) for h, b in zip(headers, bodies, strict=True)]
        once = Once(on_durable, on_failed)
        first = self.store.append_many(records, [stream.store_id], once, once.failed)
        stream.push_stored(first, [len(h) + len(b) for h, b in zip(headers, bodies, strict=True)], now)

    def save_stream_segments(self) -> None:
        """At a clean stop: each stream's open segment as it is (commits save it only now and then, see
        StreamQueue._on_commit), written by the store's closing commit."""
        for vhost in self.vhosts.values():
            for q in vhost.queues.values():
                if isinstance(q, StreamQueue):
                    q.save_active()

    def save_redelivered_flags(self) -> None:
        """At a clean stop, once every connection has returned its unacked messages: tell the store which
        messages were delivered, so they come back flagged. Writing this once here instead of once per
        delivery keeps the store off the delivery path; after a crash every message is flagged anyway."""
        if self.store is None:
            return
        for vhost in self.vhosts.values():
            for q in vhost.queues.values():
                if q.store_id is None or q.is_stream:
                    continue
                ready = q.ready
                entries = ready.entries() if isinstance(ready, Backlog) else ready
                for entry in entries:
                    if entry.redelivered and entry.msg.store_offset is not None:
                        self.store.mark_delivered(q.store_id, entry.msg.store_offset)
                if isinstance(ready, Backlog):
                    for offset in ready.flagged_offsets():
                        self.store.mark_delivered(q.store_id, offset)

    async def page_in(self, msgs: list[Message]) -> list[Message]:
        """Give these messages their paged-out bodies back, read in the store's read worker (the HTTP API's
        get and peek: the loop never reads the disk). Returns those the store could not give back (damaged):
        they stay paged out."""
        store = self.store
        by_offset = {m.store_offset: m for m in msgs if m.body is None and m.store_offset is not None}
        if store is None or not by_offset:
            return []
        offsets = sorted(by_offset)
        return _set_bodies(await store.in_reader(store.read_many, offsets), offsets, by_offset)

    async def ready_to_take(self, queue: Queue) -> None:
        """Wait until taking the queue's head will not read the disk on the loop: a backlog's next batch,
        when its window is down to one entry, is in (the HTTP API's get, which can wait)."""
        ready, store = queue.ready, self.store
        while isinstance(ready, Backlog) and store is not None and ready.would_read():
            await store.after_reads()  # the read-ahead runs there: its batch is in once this resolves

    def get_would_read(self, queue: Queue) -> bool:
        """Whether a basic.get of the queue's head now would read the disk on the loop: its body is paged out,
        or it is a backlog's last window entry and the next batch is not in. (An expired head is dropped
        first, as the get would.) False with no event loop to wait on (unit tests): the get reads."""
        if self.store is None or isinstance(queue, StreamQueue):
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        queue.expire_head()
        while queue.drop_lost_head():
            queue.expire_head()
        ready = queue.ready
        if not ready:
            return False
        if isinstance(ready, Backlog) and ready.would_read():
            return True
        return ready[0].msg.body is None

    async def ready_to_get(self, queue: Queue) -> None:
        """Wait until get_would_read is False: the backlog's next batch in, the head's body read back in the
        store's read worker (another client may take the head meanwhile: the new one is looked at again)."""
        while self.get_would_read(queue):
            ready = queue.ready
            if isinstance(ready, Backlog) and ready.would_read():
                await self.ready_to_take(queue)
                continue
            head = ready[0].msg
            lost = await self.page_in([head])
            if lost:
                queue.lost(lost)  # damaged on disk: get_would_read drops it
            elif head.body is None and queue.ready and queue.ready[0].msg is head:
                return  # nothing could read it back: the get reads it

    async def read_messages(self, offsets: list[int]) -> list[Message | None]:
        """Messages for ascending store offsets (None: not readable), read in the store's read worker."""
        if self.store is None or not offsets:
            return [None] * len(offsets)
        records = await self.store.in_reader(self.store.read_many, offsets)
        return [None if r is None else message_from_record(r, o) for o, r in zip(offsets, records, strict=True)]

    def body_of(self, msg: Message) -> bytes:
        """The body, read back from the store when the queue paged it out."""
        if msg.body is not None:
            return msg.body
        assert self.store is not None and msg.store_offset is not None
        return bytes(self.store.read(msg.store_offset).body)

    # -- dead-lettering ----------------------------------------------------------------------------------

    def dead_letter_later(self, queue: Queue, entry: Entry, reason: str) -> bool:
        """A message to dead-letter whose body is paged out is read back by the store's read worker first
        (the loop never reads the disk), and those dropped after it wait their turn behind it, so that dead
        letters keep their order. The store keeps holding it for the queue meanwhile. False: dead-letter it
        now (no dead-letter exchange, nothing being read, or no loop to wait on)."""
        msg, store = entry.msg, self.store
        if not isinstance(queue.effective.get("x-dead-letter-exchange"), str) or store is None:
            return False
        if msg.body is not None and not self._dead_letter_line:
            return False
        if msg.body is None and msg.store_offset is None:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests): read now
            return False
        waiting = [queue, entry, reason, msg.body is not None]
        self._dead_letter_line.append(waiting)
        if msg.body is None:
            done = partial(self._dead_letter_read, waiting)
            what = f"{queue}: reading a dead letter's body back"
            read_in_worker(store, what, done, store.read_many, [msg.store_offset])
        return True

    def dead_letter_stored(self, queue: Queue, offsets: list[int], reason: str) -> bool:
        """Messages only the store holds, dropped in queue order (x-max-length's drop-head while a backlog's
        next part is being read), are dead-lettered once the store's read worker has read them back, in the
        line of dead letters, so that their order is kept; the store holds them for the queue meanwhile.
        False: the queue has no dead-letter exchange."""
        store = self.store
        if not isinstance(queue.effective.get("x-dead-letter-exchange"), str) or store is None:
            return False
        waiting = [[queue, offset, reason, False] for offset in offsets]
        self._dead_letter_line.extend(waiting)
        done = partial(self._stored_dead_letters_read, waiting)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests): read now
            done(store.read_many(offsets))
            return True
        read_in_worker(store, f"{queue}: reading dead letters back", done, store.read_many, offsets)
        return True

    def _stored_dead_letters_read(self, waiting: list[list[Any]], records: list[MessageRecord | None]) -> None:
        """Dead letters only the store held are in: each becomes an entry (one not read back stays its offset),
        and the line goes on."""
        for item, record in zip(waiting, records, strict=True):
            if record is not None:
                item[1] = Entry(message_from_record(record, item[1]), 0, None)
            item[3] = True
        self._send_dead_letters()

    def _dead_letter_read(self, waiting: list[Any], records: list[MessageRecord | None]) -> None:
        """A body is in (a read tried again after a failure may come after later ones): the dead letters at
        the head of the line that are ready go, in order."""
        msg = waiting[1].msg
        if msg.body is None and records[0] is not None:
            msg.body = bytes(records[0].body)
        waiting[3] = True
        self._send_dead_letters()

    def _send_dead_letters(self) -> None:
        line = self._dead_letter_line
        while line and line[0][3]:
            queue, entry, reason, _ready = line.popleft()
            if isinstance(entry, int):  # a stored one damaged on disk: nothing to send
                log.error("%s: a dead letter (store offset %s) could not be read back", queue, entry)
                self.hooks.forget(queue, [entry])
                continue
            self.hooks.settled(queue, entry)
            if entry.msg.body is None:  # damaged on disk since it was stored: there is nothing to send
                log.error("%s: a dead letter (store offset %s) could not be read back", queue, entry.msg.store_offset)
                continue
            self.dead_letter(queue, entry, reason)

    def dead_letter(self, queue: Queue, entry: Entry, reason: str) -> None:
        dlx = queue.effective.get("x-dead-letter-exchange")
        if not isinstance(dlx, str):
            return
        dead_letter(self, queue, entry, reason, dlx)

    def has_exchange(self, vhost: str, name: str) -> bool:
        """dead_letter.Router: whether the exchange exists."""
        v = self.vhosts.get(vhost)
        return v is not None and name in v.exchanges

    def enqueue(self, msg: Message, queues: list[Queue]) -> None:
        """dead_letter.Router: a dead letter enters its queues as any publish does, with nobody to confirm to."""
        self.publisher.deliver(UNATTENDED, msg, PublishPlan(None, queues, False), 0)

    def route_to(self, vhost: str, exchange: str, msg: Message) -> list[Queue]:
        """dead_letter.Router: the queues msg goes to from an existing exchange."""
        v = self.vhosts[vhost]
        return v.route(v.exchanges[exchange], msg)
