"""The broker: users, virtual hosts, and the bridge from queues to the durable store and the clock."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
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
        store.ack_many(queue.store_id, [msg.store_offset for msg in msgs])
        for msg in msgs:
            if msg.on_settled is not None:
                msg.holders -= 1
                if msg.holders <= 0:
                    confirm, msg.on_settled = msg.on_settled, None
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
        read = store.in_reader(store.read_ahead(offsets))
        read.add_done_callback(lambda f: _read_done(f, queue, done))
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

    def read_bodies(self, queue: Queue, msgs: list[Message], done: Callable[[], None]) -> bool:
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
        read = store.in_reader(store.read_many, offsets)
        read.add_done_callback(lambda f: _bodies_read(f, queue, offsets, by_offset, done))
        return True

    def forget(self, queue: Queue, offsets: list[int]) -> None:
        store = self.broker.store
        if store is not None and queue.store_id is not None:
            store.purge(queue.store_id, offsets)

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


def _read_done(read: asyncio.Future[Any], queue: Queue, done: Callable[[Any], None]) -> None:
    """A read-ahead is in: hand it to the backlog. A failed one is only logged: the refill reads for itself."""
    error = None if read.cancelled() else read.exception()
    if error is not None:
        log.warning("%s: reading ahead failed (%s); the backlog reads when it needs to", queue, error)
    done(None if read.cancelled() or error is not None else read.result())


def _bodies_read(
    read: asyncio.Future[Any], queue: Queue, offsets: list[int], msgs: dict[int, Message], done: Callable[[], None]
) -> None:
    """Paged-out bodies read back: set them (one the read could not give is read when delivered)."""
    error = None if read.cancelled() else read.exception()
    if error is not None:
        log.warning("%s: reading paged-out bodies back failed (%s); they are read when delivered", queue, error)
    elif not read.cancelled():
        for offset, record in zip(offsets, read.result(), strict=True):
            msg = msgs[offset]
            if record is not None and msg.body is None:
                msg.body = bytes(record.body)
    done()


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
        self._dead_letters_reading = 0  # dead letters waiting for a body read back (dead_letter_later)
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
        return self._scheduler(delay_s, callback)

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

    async def page_in(self, msgs: list[Message]) -> None:
        """Give these messages their paged-out bodies back, read in the store's read worker (the HTTP API's
        get and peek: the loop never reads the disk). One the store cannot give stays paged out."""
        store = self.store
        by_offset = {m.store_offset: m for m in msgs if m.body is None and m.store_offset is not None}
        if store is None or not by_offset:
            return
        offsets = sorted(by_offset)
        for offset, record in zip(offsets, await store.in_reader(store.read_many, offsets), strict=True):
            if record is not None and by_offset[offset].body is None:
                by_offset[offset].body = bytes(record.body)

    async def ready_to_take(self, queue: Queue) -> None:
        """Wait until taking the queue's head will not read the disk on the loop: a backlog's next batch,
        when its window is down to one entry, is in (the HTTP API's get, which can wait)."""
        ready, store = queue.ready, self.store
        while isinstance(ready, Backlog) and store is not None and ready.would_read():
            await store.after_reads()  # the read-ahead runs there: its batch is in once this resolves

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
        if msg.body is not None and not self._dead_letters_reading:
            return False
        if msg.body is None and msg.store_offset is None:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests): read now
            return False
        read = store.in_reader(store.read, msg.store_offset) if msg.body is None else store.after_reads()
        self._dead_letters_reading += 1
        read.add_done_callback(lambda f: self._dead_letter_read(f, queue, entry, reason))
        return True

    def _dead_letter_read(self, read: asyncio.Future[Any], queue: Queue, entry: Entry, reason: str) -> None:
        self._dead_letters_reading -= 1
        msg = entry.msg
        if msg.body is None:
            error = None if read.cancelled() else read.exception()
            if error is None and not read.cancelled():
                msg.body = bytes(read.result().body)
            else:  # dead_letter reads it again, on the loop: the last chance to keep it
                log.warning("%s: reading a dead letter's body back failed (%s)", queue, error)
        self.hooks.settled(queue, entry)
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
