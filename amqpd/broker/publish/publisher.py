"""The one way in: every message that enters the broker's queues goes through `Publisher.publish` (or, for a
route decided elsewhere, `Publisher.deliver`), whoever sends it — a client's channel, the management API's
publish and move, a delayed exchange releasing a message, dead-lettering.

The steps, each written once, in RabbitMQ's order: route (the vhost's plan, routing/plan.py) -> delay
(x-delayed-message holds it, publish/delayed_release.py) -> unroutable (returned when mandatory) -> BCC
stripped -> time-ordered id stamped (queues/message_ids.py) -> admission (length limits with reject-publish,
deduplication) -> store (one record, Broker.store_message) -> push to each queue (which delivers it when a
consumer has room) -> the publisher's confirm. What differs between senders is only who hears the outcome: an
`Origin` (a channel: returns, confirms, flow control) or `UNATTENDED` (nobody: the API awaits the store
itself, a release or a dead letter has no publisher).

Many publishes at once (a channel's runs and groups, session/publish_groups.py) take the same steps where the
plan says that none applies but the push (and the store): `deliver_run`, `enqueue_group`, `store_group` and
`store_stream_group` below; tests/unit/test_publish_run.py checks that both ways leave the same bytes and state.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.queues.message_ids import MessageIds, stamp
from amqpd.broker.routing.exchanges.delayed import delay_of
from amqpd.broker.routing.plan import NOWHERE, PublishPlan, count_publishes
from amqpd.protocol.constants import FLAG_HEADERS
from amqpd.protocol.field_tables import table_entries
from amqpd.protocol.methods import MAX_TABLE_DEPTH
from amqpd.protocol.properties import PropertyScan, rewrite_properties

if TYPE_CHECKING:
    from amqpd.broker.delivery.consumer import Consumer
    from amqpd.broker.queues.queue import Queue
    from amqpd.broker.routing.exchanges.delayed import DelayedExchange
    from amqpd.broker.routing.vhost import VirtualHost

Callback = Callable[[], None]
Settle = Callable[[bool], None]  # a group's one confirm: settle(ok) acks (or nacks) every publish in it


class Origin(Protocol):
    """Who hears how a publish went (a client's channel). `seq` is its confirm number, 0 outside confirm mode."""

    def publish_returned(self, msg: Message) -> None:
        """A mandatory message that nothing routes (basic.return, 312 NO_ROUTE)."""

    def publish_durable(self, seq: int, on_stored: Callback | None) -> Callback | None:
        """What runs once the store has the message on disk (the confirm waits for it)."""

    def publish_failed(self, seq: int, on_stored: Callback | None, on_failed: Callback | None) -> Callback | None:
        """What runs when the store cannot write it."""

    def publish_settled(self, seq: int, ok: bool) -> None:
        """The confirm, when nothing is left to wait for (ok False: a queue refused it)."""

    def publish_flow(self, queue: Queue) -> None:
        """The message was pushed to `queue`: pause this publisher if the queue is falling behind."""


class Unattended:
    """Nobody to tell: the management API (which waits on `on_stored` itself), a delayed release, a dead letter."""

    def publish_returned(self, msg: Message) -> None:
        """No publisher to return it to: dropped, as RabbitMQ drops an unroutable internal publish."""

    def publish_durable(self, seq: int, on_stored: Callback | None) -> Callback | None:
        return on_stored

    def publish_failed(self, seq: int, on_stored: Callback | None, on_failed: Callback | None) -> Callback | None:
        return on_failed or on_stored

    def publish_settled(self, seq: int, ok: bool) -> None:
        """No confirm to send."""

    def publish_flow(self, queue: Queue) -> None:
        """No connection to pause."""


UNATTENDED = Unattended()


class Delays(Protocol):
    """Delayed delivery (delayed_release.py, which releases through this module)."""

    def delay(self, ex: DelayedExchange, msg: Message, delay_ms: int, on_durable: Callback | None) -> bool: ...


class Host(Protocol):
    """What publishing needs of the broker (broker.py, which owns the Publisher)."""

    store: Any
    delayed: Delays

    def store_message(
        self, msg: Message, queues: list[Queue], on_durable: Callback | None, on_failed: Callback | None = None
    ) -> bool: ...

    def store_group(self, msgs: list[Message], queue: Queue, on_durable: Callback, on_failed: Callback) -> None: ...

    def store_stream_group(
        self,
        stream: Queue,
        exchange: str,
        routing_key: str,
        headers: list[bytes],
        bodies: list[bytes],
        on_durable: Callback,
        on_failed: Callback,
    ) -> None: ...

    def dead_letter(self, queue: Queue, entry: Entry, reason: str) -> None: ...

    def now_ms(self) -> int: ...


class Publisher:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.ids = MessageIds()

    def publish(
        self,
        origin: Origin,
        vhost: VirtualHost,
        msg: Message,
        mandatory: bool,
        seq: int,
        on_stored: Callback | None = None,
        on_failed: Callback | None = None,
        *,
        released: bool = False,
    ) -> bool:
        """Route and enqueue one message; True when the store took it and on_stored will fire after its fsync.
        released: a delayed exchange's release, whose publish_in was counted when the message arrived."""
        ex = vhost.exchanges.get(msg.exchange)
        plan = vhost.plan_for(ex, msg) if ex is not None else NOWHERE
        if ex is not None and not released:
            ex.publish_in += 1
        if plan.delays and (plan.queues or not mandatory) and msg.has_headers:
            delay = delay_of(msg.headers)
            if delay is not None:  # x-delayed-message: it waits, confirmed once stored (or at once when transient)
                stored = self.host.delayed.delay(ex, msg, delay, origin.publish_durable(seq, on_stored))  # type: ignore[arg-type]
                if seq and not stored:
                    origin.publish_settled(seq, True)
                return stored
        if not plan.queues:
            if mandatory:
                origin.publish_returned(msg)
            origin.publish_settled(seq, True)
            return False
        return self.deliver(origin, msg, plan, seq, on_stored, on_failed)

    def deliver(
        self,
        origin: Origin,
        msg: Message,
        plan: PublishPlan,
        seq: int,
        on_stored: Callback | None = None,
        on_failed: Callback | None = None,
    ) -> bool:
        """Enqueue a routed message to the plan's queues (at least one): every step after routing."""
        if msg.may_carry_cc and msg.headers and "BCC" in msg.headers:
            strip_bcc(msg)
        if plan.stamps:
            stamp(msg, self.ids.next(self.host.now_ms()))
        accepting = plan.queues
        refused = False
        always_stored = plan.always_stored
        if plan.limited:
            accepting, refused = self.admit(msg, accepting)
            always_stored = _any_stored(accepting)
        stored = False
        if self.host.store is not None and (msg.persistent or always_stored):
            stored = self.host.store_message(
                msg, accepting, origin.publish_durable(seq, on_stored), origin.publish_failed(seq, on_stored, on_failed)
            )
        if plan.exchange is not None:
            plan.exchange.publish_out += len(accepting)
        for q in accepting:
            q.push(msg)
            origin.publish_flow(q)
        if refused:
            origin.publish_settled(seq, False)
        elif seq and not stored:
            origin.publish_settled(seq, True)
        return stored

    def admit(self, msg: Message, queues: list[Queue]) -> tuple[list[Queue], bool]:
        """The queues that take the message, and whether one refused it (the publisher then gets a nack).
        x-overflow reject-publish(-dlx): a full queue refuses it (and with -dlx dead-letters it, reason
        maxlen). x-message-deduplication: a queue that saw its id drops it quietly (the publisher's confirm
        is an ack). The others still take it."""
        accepting = []
        refused = False
        for q in queues:
            if q.would_overflow():
                refused = True
                if q.overflow == "reject-publish-dlx":
                    self.host.dead_letter(q, Entry(msg, 0, None), "maxlen")
            elif q.dedup is None or not q.dedup.is_duplicate(msg, self.host.now_ms()):  # a refused one is not "seen"
                accepting.append(q)
        return accepting, refused

    # -- many at once: publishes whose plan (PublishPlan.plain, straight_to, stored_to) has no step but these

    def deliver_run(
        self, plan: PublishPlan, consumer: Consumer, route: bytes, header: bytes, bodies: list[bytes]
    ) -> None:
        """No-ack publishes with one header, straight to the one consumer their plan's queue hands each to as it
        comes (Queue.run_consumer)."""
        _take_run(plan, consumer, len(bodies))
        consumer.channel.deliver_run(consumer, route, header, bodies)

    def deliver_each(
        self, plan: PublishPlan, consumer: Consumer, route: bytes, headers: list[bytes], bodies: list[bytes]
    ) -> None:
        """deliver_run for publishes each with its own header."""
        _take_run(plan, consumer, len(bodies))
        consumer.channel.deliver_each(consumer, route, headers, bodies)

    def enqueue_group(self, origin: Origin, plan: PublishPlan, queue: Queue, msgs: list[Message]) -> None:
        """Messages that go straight to `queue`, pushed there at once (Queue.take_group)."""
        count_publishes(plan, len(msgs))
        queue.take_group(msgs)
        origin.publish_flow(queue)

    def store_group(self, origin: Origin, plan: PublishPlan, queue: Queue, msgs: list[Message], settle: Settle) -> None:
        """Messages that go to one durable queue alone with nothing on the way but the store: one append, one
        confirm for all (settle), each pushed in order."""
        count_publishes(plan, len(msgs))
        self.host.store_group(msgs, queue, lambda: settle(True), lambda: settle(False))
        queue.push_many(msgs)
        origin.publish_flow(queue)

    def store_stream_group(
        self,
        origin: Origin,
        plan: PublishPlan,
        stream: Queue,
        exchange: str,
        routing_key: str,
        headers: list[bytes],
        bodies: list[bytes],
        settle: Settle,
    ) -> None:
        """store_group for a stream, from the checked headers and bodies: a stream keeps nothing of a publish in
        memory (its readers read the store), so no message is made."""
        count_publishes(plan, len(headers))
        self.host.store_stream_group(
            stream, exchange, routing_key, headers, bodies, lambda: settle(True), lambda: settle(False)
        )
        origin.publish_flow(stream)


def strip_bcc(msg: Message) -> None:
    """BCC routes the message but is not delivered (RabbitMQ removes the header): the header table loses that
    entry, every other entry keeps its bytes."""
    headers = msg.headers or {}
    bcc = headers.get("BCC")
    msg.bcc = [k.decode() if isinstance(k, bytes) else k for k in bcc or [] if isinstance(k, (str, bytes))]
    raw = PropertyScan(msg.header, msg.flags).headers_raw
    entries = [(k, v) for k, v in (table_entries(raw, MAX_TABLE_DEPTH) if raw else []) if k != b"BCC"]
    inner = b"".join(bytes((len(key),)) + key + value for key, value in entries)
    table = struct.pack(">I", len(inner)) + inner if entries else None
    header = rewrite_properties(msg.header, msg.size, {FLAG_HEADERS: table})
    msg.header = header
    msg.flags = struct.unpack_from(">H", header, 12)[0]
    msg._headers = {k: v for k, v in headers.items() if k != "BCC"}  # noqa: SLF001 - the message's own cache


def _take_run(plan: PublishPlan, consumer: Consumer, n: int) -> None:
    count_publishes(plan, n)
    consumer.queue.take_run(n)


def _any_stored(queues: list[Queue]) -> bool:
    """Whether a transient message must be written anyway (a stream is among its queues)."""
    return queues[0].always_stored if len(queues) == 1 else any(q.always_stored for q in queues)
