"""An AMQP channel's semantics: content assembly, publish, consume, acks, prefetch, confirms, tx.

Plain object: it writes encoded frames through `conn.send()` and never touches a socket. Errors are
raised as AMQPError; the session turns them into channel.close or connection.close.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import base, commands

from amqpd import errors
from amqpd.broker.delivery.consumer import UNLIMITED, Consumer
from amqpd.broker.delivery.deliveries import Deliveries
from amqpd.broker.delivery.unacked import Outstanding, Run
from amqpd.broker.entry import Entry
from amqpd.broker.message import SCANNED_FLAGS, Message, may_name_keys
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.plan import PER_MESSAGE_FLAGS, PublishPlan, count_publishes
from amqpd.broker.routing.vhost import REPLY_TO, REPLY_TO_PREFIX, VirtualHost, server_generated_name
from amqpd.broker.streams.args import check_consumer_arguments, parse_filter, parse_offset_spec
from amqpd.broker.streams.chunks import chunk_records
from amqpd.broker.streams.info import InfoRun, info_body, info_header, wants_info
from amqpd.broker.streams.stream import StreamQueue
from amqpd.protocol.assembler import Assembled, ContentAssembler
from amqpd.protocol.constants import (
    FLAG_REPLY_TO,
)
from amqpd.protocol.fastpath import (
    encode_ack,
    encode_nack,
    encode_return,
    parse_content_header,
    parse_publish_route,
    parse_tag_bits,
    shortstr,
)
from amqpd.protocol.frames import content_frames
from amqpd.protocol.methods import AccessRequest, AccessRequestOk, build, encode_method
from amqpd.protocol.properties import (
    PropertyScan,
    checked_header,
    rewrite_properties,
    scan_published,
)
from amqpd.session.permissions import Permissions

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker


_REPLY_TO_RAW = REPLY_TO.encode()


class PreparedRun:
    """A run's shared method and header, parsed once: message() is what on_whole_publish builds per body."""

    __slots__ = ("exchange", "routing_key", "route", "header", "flags", "mandatory", "scan")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        route: bytes,
        header: bytes,
        flags: int,
        mandatory: bool,
        scan: PropertyScan | None,
    ) -> None:
        self.exchange, self.routing_key, self.route, self.header = exchange, routing_key, route, header
        self.flags, self.mandatory, self.scan = flags, mandatory, scan

    def message(self, body: bytes) -> Message:
        return Message(self.exchange, self.routing_key, self.route, self.header, body, self.flags, self.scan)


class ConnectionLike(Protocol):
    """What a channel needs from its connection."""

    frame_max: int
    user: str
    consumer_cancel_notify: bool
    writable: bool  # False while the socket's output is backed up

    def send(self, data: bytes) -> None: ...
    def send_pieces(self, pieces: list[bytes | memoryview]) -> None: ...
    def confirms_pending(self, channel: Channel) -> None: ...
    def throttle(self, queue: Queue) -> None: ...
    def unconfirmed_changed(self, delta: int) -> None: ...
    def close_channel(self, channel: Channel, exc: errors.AMQPError) -> None: ...


class Channel(Deliveries):
    def __init__(self, conn: ConnectionLike, channel_id: int, vhost: VirtualHost, broker: Broker) -> None:
        self.conn = conn
        self.id = channel_id
        self.vhost = vhost
        self.broker = broker
        self.publisher = broker.publisher  # the one way in (broker/publish/publisher.py)
        self.closing = False
        self.flow_active = True
        self.last_queue: str | None = None
        self.reply_token: str | None = None  # direct reply-to: set while the channel consumes its replies
        # deliveries
        self.last_tag = 0  # the delivery tag given last; basic.deliver and basic.get-ok count from 1
        self.unacked = Outstanding()  # by tag, queues' and streams'; it keeps every unacked count (unacked.py)
        # None: acks resume deliveries at once; else the session will once the acks it is reading end, and
        # True says some did (Session._resume_acked).
        self.resume_after_acks: bool | None = None
        self.consumers: dict[str, Consumer] = {}
        self.prefetch_count = 0  # for consumers created from now on (basic.qos global=false)
        self.global_prefetch = 0  # shared by all consumers of the channel (global=true)
        # publisher confirms
        self.confirm = False
        self.publish_seq = 0
        self.confirmed_upto = 0
        self.pending_confirms: dict[int, None] = {}  # awaiting fsync, in seq order
        self.nacks: set[int] = set()
        # transactions
        self.tx = False
        self.tx_publishes: list[tuple[str, bool, Message]] = []
        self.tx_acks: list[tuple[str, list[Run[Any]], bool]] = []
        self.assembler = ContentAssembler(broker.settings.max_message_size)
        # Counters for the management API (deliveries and gets are last_tag, confirms confirmed_upto).
        self.published = 0
        self.acked = 0
        self.permissions = Permissions(broker, conn, vhost)  # this channel's user's checks (permissions.py)

    # -- content assembly ---------------------------------------------------------------------------------

    def on_publish(self, payload: bytes) -> None:
        self.assembler.begin(payload)

    def on_whole_publish(self, method: bytes, header: bytes, body: bytes) -> None:
        """basic.publish with its header and body all at hand: the straight-line path."""
        exchange, routing_key, route, bits = parse_publish_route(method)
        class_id, body_size, flags = parse_content_header(header)
        if bits & 2 or class_id != 60 or body_size > self.assembler.max_size:
            self.assembler.begin(method)  # the frame-by-frame path raises the right error
            self.assembler.take_header(header)
            return
        self.publish(Message(exchange, routing_key, route, checked_header(header), body, flags), bool(bits & 1))

    def on_publish_run(self, method: bytes, header: bytes, bodies: list[bytes]) -> bool:
        """Publishes that differ only by body (FrameReader's PUBLISH_RUN), delivered in one pass when their
        publish plan sends them straight to a queue that hands each, as it comes, to the same no-ack consumer.
        False, with nothing done, otherwise: the caller then publishes them one by one. In confirm mode, as
        on_publish_group: with one header the plan takes all of them or none."""
        if self.confirm and not self.tx:
            return self._publish_stored_group(method, [header] * len(bodies), bodies) > 0
        target = self._straight_target(method)
        if target is None or not self._goes_straight(target[0], target[2], header):
            return False
        plan, route, consumer = target
        self.published += len(bodies)
        count_publishes(plan, len(bodies))
        consumer.queue.take_run(len(bodies))
        consumer.channel.deliver_run(consumer, route, header, bodies)
        return True

    def on_publish_group(self, method: bytes, headers: list[bytes], bodies: list[bytes]) -> int:
        """Publishes to one place, each with its own properties (FrameReader's PUBLISH_GROUP): the leading ones
        that the publish plan sends straight to one queue go in one pass. To the queue's no-ack consumer as
        on_publish_run does, when it would hand each to that one as it comes; else into the queue at once
        (_queue_group). In confirm mode: _publish_stored_group. How many; the caller publishes the others one
        by one."""
        if self.confirm and not self.tx:
            return self._publish_stored_group(method, headers, bodies)
        target = self._group_target(method)
        if target is None:
            return 0
        plan, route = target
        queue = plan.plain
        assert queue is not None  # _group_target: the plan has a plain queue
        consumer = queue.run_consumer()
        if consumer is None:
            return self._queue_group(plan, queue, method, headers, bodies)
        n = 0
        for header in headers:
            if not self._goes_straight(plan, consumer, header):
                break
            n += 1
        if n:
            self.published += n
            count_publishes(plan, n)
            queue.take_run(n)
            consumer.channel.deliver_each(consumer, route, headers[:n], bodies[:n])
        return n

    def _queue_group(
        self, plan: PublishPlan, queue: Queue, method: bytes, headers: list[bytes], bodies: list[bytes]
    ) -> int:
        """The leading publishes that go straight to `queue`, pushed there at once (Queue.take_group): consumers
        with room get them as push() would hand them out, a consumer alone on the queue in one batch."""
        exchange, routing_key, route, _bits = parse_publish_route(method)
        msgs = []
        for header, body in zip(headers, bodies, strict=True):
            msg = self._straight_message(plan, exchange, routing_key, route, header, body)
            if msg is None:
                break
            msgs.append(msg)
        if msgs:
            self.published += len(msgs)
            count_publishes(plan, len(msgs))
            queue.take_group(msgs)
            self.publish_flow(queue)
        return len(msgs)

    def _publish_stored_group(self, method: bytes, headers: list[bytes], bodies: list[bytes]) -> int:
        """Confirm mode: the leading publishes of a group that the publish plan sends to one durable queue or
        stream with nothing on the way but the store and the push (PublishPlan.stored_to) are stored in one
        append and confirmed together once the fsync covering them is done; each is then pushed as
        Publisher.deliver pushes one. How many; the caller publishes the others one by one."""
        try:
            exchange, routing_key, route, bits = parse_publish_route(method)
        except errors.AMQPError:
            return 0
        ex = self.vhost.exchanges.get(exchange)
        if bits & 2 or ex is None or self.broker.store is None or not self.permissions.cleared(ex, exchange, 0):
            return 0
        plan = self.vhost.plan(ex, routing_key)
        if plan.stored is None:
            return 0
        if plan.stored.is_stream:
            return self._store_stream_group(plan, plan.stored, exchange, routing_key, headers, bodies)
        reads = _stored_reads(plan, headers, self.assembler.max_size)
        msgs = [
            Message(exchange, routing_key, route, header, body, flags, scan)
            for (flags, header, scan), body in zip(reads, bodies, strict=False)  # the reads may stop early
        ]
        if msgs:
            count_publishes(plan, len(msgs))
            self._store_and_push(plan.stored, msgs)
        return len(msgs)

    def _store_and_push(self, queue: Queue, msgs: list[Message]) -> None:
        """Publish messages that go to `queue` alone and are stored (see _publish_stored_group): one append,
        one confirm for all, each pushed in order."""
        settle = self._group_confirm(len(msgs))
        self.broker.store_group(msgs, queue, lambda: settle(True), lambda: settle(False))
        queue.push_many(msgs)
        self.publish_flow(queue)

    def _store_stream_group(
        self,
        plan: PublishPlan,
        stream: Queue,
        exchange: str,
        routing_key: str,
        headers: list[bytes],
        bodies: list[bytes],
    ) -> int:
        """_publish_stored_group for a stream: a stream keeps nothing of a publish in memory (its readers read
        the store), so the publishes are stored from their headers and bodies (Broker.store_stream_group), as
        store_group stores the messages _store_and_push would make, without making them (none has an expiry:
        a publish with an expiration is one of PER_MESSAGE_FLAGS, which end a group). How many."""
        # the headers as checked_header returns them
        stored = [header for _flags, header, _scan in _stored_reads(plan, headers, self.assembler.max_size)]
        n = len(stored)
        if n:
            count_publishes(plan, n)
            settle = self._group_confirm(n)
            self.broker.store_stream_group(
                stream, exchange, routing_key, stored, bodies[:n], lambda: settle(True), lambda: settle(False)
            )
            self.publish_flow(stream)
        return n

    def _group_confirm(self, n: int) -> Callable[[bool], None]:
        """The next n publishes, stored together: one confirm for all. Its settle(ok) acks (or nacks) them."""
        self.published += n
        first = self.publish_seq + 1
        self.publish_seq += n
        # Only the group's first sequence number waits: emit_confirms acks up to the lowest one waiting.
        self.pending_confirms[first] = None
        self.conn.unconfirmed_changed(n)

        def settle(ok: bool) -> None:
            if first in self.pending_confirms:
                del self.pending_confirms[first]
                self.conn.unconfirmed_changed(-n)
            if not ok:
                self.nacks.update(range(first, first + n))
            self.conn.confirms_pending(self)

        return settle

    def _straight_message(
        self, plan: PublishPlan, exchange: str, routing_key: str, route: bytes, header: bytes, body: bytes
    ) -> Message | None:
        """The message on_whole_publish would make of this publish, when the plan sends it straight to its
        queue with no step on the way (None otherwise: the single path then takes it, and reports any error)."""
        scanned = self._straight_scan(plan, header, self.assembler.max_size)
        if scanned is None:
            return None
        flags, header, scan = scanned
        return Message(exchange, routing_key, route, header, body, flags, scan)

    @staticmethod
    def _straight_scan(plan: PublishPlan, header: bytes, max_body: int) -> tuple[int, bytes, PropertyScan] | None:
        """(flags, header as checked_header returns it, scan) of a publish that the plan sends straight to its
        queue, its header read as on_whole_publish and Message read it, its body no larger than max_body; None
        when any of them would refuse it or the plan would not send it straight."""
        scanned = _group_scan(header, max_body)
        if scanned is None:
            return None
        flags, header, scan, persistent, names_keys = scanned
        if plan.straight_to(flags, persistent, names_keys) is None:
            return None
        return flags, header, scan

    def _group_target(self, method: bytes) -> tuple[PublishPlan, bytes] | None:
        """For publishes with this method: their plan and route, when the plan has a queue that messages of
        some property class go straight to (PublishPlan.plain); None when they may go anywhere else, or when
        the channel holds or confirms its publishes (tx, confirm mode)."""
        if self.tx or self.confirm:
            return None
        try:
            exchange, routing_key, route, bits = parse_publish_route(method)
        except errors.AMQPError:
            return None
        ex = self.vhost.exchanges.get(exchange)
        if bits & 2 or ex is None or not self.permissions.cleared(ex, exchange, 0):  # user_id: straight_to() refuses it
            return None
        plan = self.vhost.plan(ex, routing_key)
        return None if plan.plain is None else (plan, route)

    def _straight_target(self, method: bytes) -> tuple[PublishPlan, bytes, Consumer] | None:
        """For publishes with this method: their plan, route and the consumer their plan's plain queue would
        hand each to as it comes (Queue.run_consumer); None when they may go anywhere else, or when the channel
        holds or confirms its publishes (tx, confirm mode)."""
        target = self._group_target(method)
        if target is None:
            return None
        plan, route = target
        consumer = plan.plain.run_consumer() if plan.plain is not None else None
        return None if consumer is None else (plan, route, consumer)

    def _goes_straight(self, plan: PublishPlan, consumer: Consumer, header: bytes) -> bool:
        """Whether the plan sends a publish with this content header straight to its queue (_straight_scan),
        and its body fits one frame to the consumer."""
        max_body = min(self.assembler.max_size, consumer.channel.conn.frame_max - 8)
        return self._straight_scan(plan, header, max_body) is not None

    def prepare_run(self, method: bytes, header: bytes) -> PreparedRun | None:
        """What on_whole_publish would parse from each publish of a run, parsed once; None when it would not
        take the straight-line path (the caller then goes frame by frame, which reports any error)."""
        try:
            exchange, routing_key, route, bits = parse_publish_route(method)
            class_id, body_size, flags = parse_content_header(header)
            scan = PropertyScan(header, flags) if flags & SCANNED_FLAGS else None
        except errors.AMQPError:
            return None
        if bits & 2 or class_id != 60 or body_size > self.assembler.max_size:
            return None
        return PreparedRun(exchange, routing_key, route, checked_header(header), flags, bool(bits & 1), scan)

    def on_header(self, payload: bytes) -> None:
        done = self.assembler.take_header(payload)
        if done is not None:
            self._publish_assembled(done)

    def on_body(self, payload: bytes) -> None:
        done = self.assembler.take_body(payload)
        if done is not None:
            self._publish_assembled(done)

    def _publish_assembled(self, m: Assembled) -> None:
        msg = Message(m.exchange, m.routing_key, m.route, checked_header(m.header), m.body, m.flags)
        self.publish(msg, m.mandatory)

    # -- publishing -----------------------------------------------------------------------------------------

    def publish(self, msg: Message, mandatory: bool) -> None:
        ex = self.vhost.exchanges.get(msg.exchange)
        if not self.permissions.cleared(ex, msg.exchange, msg.flags):
            self.permissions.check_publish(ex, msg)
        if msg.flags & FLAG_REPLY_TO:
            self._rewrite_reply_to(msg)
        self.published += 1
        if self.tx:
            self.tx_publishes.append((msg.exchange, mandatory, msg))
            return
        seq = 0
        if self.confirm:
            self.publish_seq += 1
            seq = self.publish_seq
        self.publisher.publish(self, self.vhost, msg, mandatory, seq)

    def publish_flow(self, q: Queue) -> None:
        """A queue grown past FLOW_HIGH with consumers pauses its publishers while those consumers are waiting
        on the broker (flow.py), or while the broker's CPU is saturated (server/load.py)."""
        if len(q.ready) > q.FLOW_HIGH and q.consumers and (q.pace.lagging() or self.broker.busy):
            self.conn.throttle(q)
            self.broker.throttled(q)

    def publish_durable(self, seq: int, on_stored: Callable[[], None] | None) -> Callable[[], None] | None:
        if not seq:
            return on_stored
        self.pending_confirms[seq] = None
        self.conn.unconfirmed_changed(1)

        def durable() -> None:
            if seq in self.pending_confirms:
                del self.pending_confirms[seq]
                self.conn.unconfirmed_changed(-1)
            self.conn.confirms_pending(self)
            if on_stored is not None:
                on_stored()

        return durable

    def publish_failed(
        self, seq: int, on_stored: Callable[[], None] | None, on_failed: Callable[[], None] | None
    ) -> Callable[[], None] | None:
        """The store could not write the message: the publisher's confirm is a nack; a transaction's commit
        fails (on_failed)."""
        if not seq:
            return on_failed or on_stored
        return lambda: self.publish_settled(seq, False)

    def publish_returned(self, msg: Message) -> None:
        self._send_return(msg, errors.NO_ROUTE, "NO_ROUTE")

    def _send_return(self, msg: Message, code: int, text: str) -> None:
        frames = encode_return(self.id, code, text, msg.route)
        self.conn.send(frames + content_frames(self.id, msg.header, self.broker.body_of(msg), self.conn.frame_max))

    def publish_settled(self, seq: int, ok: bool) -> None:
        if not seq:
            return
        if seq in self.pending_confirms:
            del self.pending_confirms[seq]
            self.conn.unconfirmed_changed(-1)
        if not ok:
            self.nacks.add(seq)
        self.conn.confirms_pending(self)

    def emit_confirms(self) -> None:
        """Called once per loop turn: one basic.ack(multiple) for everything settled in order."""
        if self.closing:
            return
        limit = next(iter(self.pending_confirms)) - 1 if self.pending_confirms else self.publish_seq
        if limit <= self.confirmed_upto:
            return
        out: list[bytes] = []
        start = self.confirmed_upto + 1
        if self.nacks:
            run_end = start - 1
            for seq in range(start, limit + 1):
                if seq in self.nacks:
                    if run_end >= start:
                        out.append(encode_ack(self.id, run_end, run_end > start))
                    out.append(encode_nack(self.id, seq, False))
                    self.nacks.discard(seq)
                    start = seq + 1
                run_end = seq
            if run_end >= start:
                out.append(encode_ack(self.id, run_end, run_end > start))
        else:
            out.append(encode_ack(self.id, limit, limit > start))
        self.confirmed_upto = limit
        self.conn.send(b"".join(out))

    # -- delivering -----------------------------------------------------------------------------------------

    def can_deliver(self) -> bool:
        return self.flow_active and not self.closing and self.conn.writable

    def can_deliver_acked(self) -> bool:
        if self.global_prefetch and self.unacked.count >= self.global_prefetch:
            return False
        return self.flow_active and not self.closing and self.conn.writable

    def prefetch_room(self) -> int:
        """Deliveries the channel's global prefetch still allows (UNLIMITED without one)."""
        return self.global_prefetch - self.unacked.count if self.global_prefetch else UNLIMITED

    # -- acks -----------------------------------------------------------------------------------------------

    def on_ack(self, payload: bytes) -> None:
        tag, bits = parse_tag_bits(payload, "basic.ack")
        self._settle_tags("ack", tag, bool(bits & 1), False, 80)

    def on_nack(self, payload: bytes) -> None:
        tag, bits = parse_tag_bits(payload, "basic.nack")
        self._settle_tags("nack", tag, bool(bits & 1), bool(bits & 2), 120)

    def on_reject(self, payload: bytes) -> None:
        tag, bits = parse_tag_bits(payload, "basic.reject")
        self._settle_tags("reject", tag, False, bool(bits & 1), 90)

    def _settle_tags(self, kind: str, tag: int, multiple: bool, requeue: bool, method_id: int) -> None:
        try:
            taken = self._collect(tag, multiple)
        except errors.AMQPError as exc:
            raise exc.with_method(60, method_id) from None
        if self.tx:
            self.tx_acks.append((kind, taken, requeue))
            return
        self._apply_settle(kind, taken, requeue)

    def _collect(self, tag: int, multiple: bool) -> list[Run[Any]]:
        """The unacked deliveries an ack/nack/reject names, removed from the channel (RabbitMQ's rules:
        the tag must be outstanding, except multiple with tag 0, which means all)."""
        unacked = self.unacked
        if multiple and tag == 0:
            return unacked.take_all()
        taken = unacked.take_upto(tag) if multiple else unacked.take(tag)
        if taken is None:
            raise errors.precondition_failed(f"unknown delivery tag {tag}")
        return taken

    def _apply_settle(self, kind: str, taken: list[Run[Any]], requeue: bool) -> None:
        if kind == "ack":
            self._apply_acks(taken)
            return
        if kind != "requeue":
            try:
                _check_not_stream(kind, taken)
            except errors.AMQPError:
                # 540 closes the connection: back in the table, these go with the rest as its channels shut down
                self.unacked.restore(taken)
                raise
        by_queue: dict[Queue, list[Entry]] = {}
        for run in taken:
            self.unacked.release(run.queue, run.consumer, len(run.items))
            run.give_back(requeue, by_queue)
        for queue, entries in by_queue.items():
            queue.requeue(entries)
        self.resume_deliveries()

    def _apply_acks(self, taken: list[Run[Any]]) -> None:
        """_apply_settle for acks, the per-message path of every manually acking consumer: a run at a time."""
        release = self.unacked.release
        for run in taken:
            queue = run.queue
            n = len(run.items)
            self.acked += n
            release(queue, run.consumer, n)
            queue.acked += n
            run.acked()
        if self.resume_after_acks is None:
            self.resume_deliveries()
        else:  # the session resumes once the acks it is reading end (Session._resume_acked)
            self.resume_after_acks = True

    def resume_deliveries(self) -> None:
        """Room to deliver again (acks freed prefetch, or the connection's socket drained): each consumer's
        queue hands over what waits."""
        for consumer in list(self.consumers.values()):
            if consumer.queue.ready:
                consumer.queue.dispatch()

    def overdue_ack(self, now: float, timeout_s: float) -> bool:
        """RabbitMQ's consumer_timeout: a delivery left unacked this long closes the channel."""
        oldest = self.unacked.oldest_at()
        return oldest is not None and now - oldest > timeout_s

    def requeue_all(self) -> None:
        """Every unacked message goes back to its queue, in order, marked redelivered."""
        self._apply_settle("requeue", self._collect(0, True), True)

    # -- method dispatch -----------------------------------------------------------------------------------

    def handle(self, method: base.Frame) -> None:
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise errors.ConnectionError(errors.COMMAND_INVALID, f"unexpected method {method.name}", *_ids(method))
        try:
            handler(self, method)
        except errors.AMQPError as exc:
            raise exc.with_method(*_ids(method)) from None

    def reply(self, method: base.Frame) -> None:
        self.conn.send(encode_method(self.id, method))

    # exchange class

    def exchange_declare(self, m: commands.Exchange.Declare) -> None:
        self.vhost.declare_exchange(
            m.exchange,
            m.exchange_type,
            passive=m.passive,
            durable=m.durable,
            auto_delete=m.auto_delete,
            internal=m.internal,
            arguments=m.arguments or {},
            checks=self.permissions,
        )
        if not m.nowait:
            self.reply(commands.Exchange.DeclareOk())

    def exchange_delete(self, m: commands.Exchange.Delete) -> None:
        if m.exchange and not m.exchange.startswith("amq."):  # those are refused first, whoever asks
            self.permissions.permit("exchange", m.exchange, "configure")
        self.vhost.delete_exchange(m.exchange, m.if_unused)
        if not m.nowait:
            self.reply(commands.Exchange.DeleteOk())

    def exchange_bind(self, m: commands.Exchange.Bind) -> None:
        self.permissions.permit_binding(m.source, "exchange", m.destination, m.routing_key)
        dest = self._bind_destination_exchange(m.destination)
        self.vhost.exchange(m.source)
        self.vhost.bind(m.source, dest, m.routing_key, m.arguments or {})
        if not m.nowait:
            self.reply(commands.Exchange.BindOk())

    def exchange_unbind(self, m: commands.Exchange.Unbind) -> None:
        self.permissions.permit_binding(m.source, "exchange", m.destination, m.routing_key)
        dest = self.vhost.exchanges.get(m.destination)  # a missing one is unbound OK, as in RabbitMQ
        self.vhost.unbind(m.source, dest, m.routing_key, m.arguments or {})
        if not m.nowait:
            self.reply(commands.Exchange.UnbindOk())

    def _bind_destination_exchange(self, name: str) -> Any:
        if name == "":
            raise errors.access_refused("operation not permitted on the default exchange")
        return self.vhost.exchange(name)

    # queue class

    def queue_declare(self, m: commands.Queue.Declare) -> None:
        if m.queue == REPLY_TO or m.queue.startswith(REPLY_TO_PREFIX):
            self._declare_reply_to(m)
            return
        self._check_queue_name_length(m.queue)
        q = self.vhost.declare_queue(
            m.queue,
            passive=m.passive,
            durable=m.durable,
            exclusive=m.exclusive,
            auto_delete=m.auto_delete,
            arguments=m.arguments or {},
            owner=self.conn,
            checks=self.permissions,
        )
        self.last_queue = q.name
        if not m.nowait:
            self.reply(build(commands.Queue.DeclareOk, q.name, len(q.ready), len(q.consumers)))

    def _declare_reply_to(self, m: commands.Queue.Declare) -> None:
        """Direct reply-to, as RabbitMQ answers a declare of it (passive or not): the pseudo-queue always
        exists with one consumer, a reply address while its requester consumes, anything else is 404."""
        if m.queue != REPLY_TO and m.queue[len(REPLY_TO_PREFIX) :] not in self.vhost.replies:
            raise errors.not_found(f"no queue '{m.queue}' in vhost '{self.vhost.name}'")
        if not m.nowait:
            self.reply(build(commands.Queue.DeclareOk, m.queue, 0, 1))

    def _check_queue_name_length(self, name: str) -> None:
        """max_queue_name_length (at most 255, the protocol's shortstr): a longer name is refused with 406."""
        limit = self.broker.settings.max_queue_name_length
        if len(name) > limit // 4 and len(name.encode()) > limit:  # cheap for the usual short name
            raise errors.precondition_failed(
                f"queue name '{name[:64]}...' is {len(name.encode())} bytes long; max_queue_name_length is {limit}"
            )

    def _queue_name(self, name: str) -> str:
        """An empty queue name means the channel's last declared queue (AMQP 0-9-1)."""
        if name:
            return name
        if self.last_queue is None:
            raise errors.not_found("no previously declared queue")
        return self.last_queue

    def queue_bind(self, m: commands.Queue.Bind) -> None:
        name = self._queue_name(m.queue)
        key = m.routing_key if (m.routing_key or m.queue) else name
        self.permissions.permit_binding(m.exchange, "queue", name, key)
        q = self.vhost.queue(name, self.conn)
        self.vhost.exchange(m.exchange) if m.exchange else None
        self.vhost.bind(m.exchange, q, key, m.arguments or {})
        if not m.nowait:
            self.reply(commands.Queue.BindOk())

    def queue_unbind(self, m: commands.Queue.Unbind) -> None:
        name = self._queue_name(m.queue)
        key = m.routing_key if (m.routing_key or m.queue) else name
        self.permissions.permit_binding(m.exchange, "queue", name, key)
        q = self.vhost.queues.get(name)  # a missing queue or exchange is unbound OK, as in RabbitMQ
        self.vhost.unbind(m.exchange, q, key, m.arguments or {}, owner=self.conn)
        self.reply(commands.Queue.UnbindOk())

    def queue_purge(self, m: commands.Queue.Purge) -> None:
        name = self._queue_name(m.queue)
        self.permissions.permit("queue", name, "read")
        count = self.vhost.purge_queue(name, self.conn)
        if not m.nowait:
            self.reply(commands.Queue.PurgeOk(count))

    def queue_delete(self, m: commands.Queue.Delete) -> None:
        name = self._queue_name(m.queue)
        self.permissions.permit("queue", name, "configure")
        count = self.vhost.delete_queue(name, if_unused=m.if_unused, if_empty=m.if_empty, owner=self.conn)
        if not m.nowait:
            self.reply(commands.Queue.DeleteOk(count))

    # basic class

    def basic_qos(self, m: commands.Basic.Qos) -> None:
        if m.prefetch_size:
            raise errors.not_implemented(f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_:
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch_count = m.prefetch_count
        self.reply(commands.Basic.QosOk())
        self.resume_deliveries()

    def basic_consume(self, m: commands.Basic.Consume) -> None:
        if m.queue == REPLY_TO:
            self._consume_replies(m)
            return
        name = self._queue_name(m.queue)
        self.permissions.permit("queue", name, "read")
        q = self.vhost.queue(name, self.conn)
        tag = m.consumer_tag or server_generated_name("amq.ctag-")
        if tag in self.consumers:
            raise errors.not_allowed(f"attempt to reuse consumer tag '{tag}'")
        stream = isinstance(q, StreamQueue)
        # RabbitMQ 3.10's streams ignore exclusive: every consumer reads the whole log, side by side.
        if not stream and (q.exclusive_consumer is not None or (m.exclusive and q.consumers)):
            raise errors.access_refused(f"queue '{q.name}' in vhost '{self.vhost.name}' in exclusive use")
        args = m.arguments or {}
        priority = args.get("x-priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise errors.precondition_failed(f"invalid x-priority argument: {priority!r}")
        if not stream and "x-stream-offset" in args:
            kind = "rabbit_quorum_queue" if q.arguments.get("x-queue-type") == "quorum" else "rabbit_classic_queue"
            raise errors.precondition_failed(
                f"invalid arg 'x-stream-offset' for queue '{q.name}' in vhost '{self.vhost.name}' of queue type {kind}"
            )
        consumer = Consumer(
            tag,
            self,
            q,
            no_ack=m.no_ack,
            exclusive=m.exclusive and not stream,
            prefetch=self.prefetch_count,
            priority=priority,
            arguments=args,
        )
        if wants_info(args, q.name, self.vhost.name, stream):
            self._answer_info(q, consumer, m.nowait)
            return
        if stream:
            assert isinstance(q, StreamQueue)
            self._consume_stream(q, consumer, m.nowait)
            return
        self.consumers[tag] = consumer
        if not m.nowait:
            self.reply(build(commands.Basic.ConsumeOk, tag))
        q.add_consumer(consumer)

    def _consume_stream(self, q: StreamQueue, consumer: Consumer, nowait: bool) -> None:
        """A stream consumer acks manually with a prefetch of its own, and starts where x-stream-offset (or
        its tracked offset) says: RabbitMQ's rules, LavinMQ's offset tracking, RabbitMQ 3.13's filters."""
        where = f"queue '{q.name}' in vhost '{self.vhost.name}'"
        if consumer.no_ack:
            raise errors.not_implemented(f"automatic acknowledgement not supported by stream queues {where}")
        if not consumer.prefetch:
            raise errors.precondition_failed(f"consumer prefetch count is not set for '{where}'")
        args = consumer.arguments
        check_consumer_arguments(args, q.name, self.vhost.name)
        spec = parse_offset_spec(args.get("x-stream-offset"), q.name, self.vhost.name, self.broker.now_ms())
        filter_values, match_unfiltered = parse_filter(args, q.name, self.vhost.name)
        # LavinMQ: tracking is asked for explicitly, or by an x-stream-offset given as void.
        tracking = args.get("x-stream-automatic-offset-tracking") is True or (
            "x-stream-offset" in args and args["x-stream-offset"] is None
        )
        if "x-stream-offset" in args and args["x-stream-offset"] is None:
            spec = parse_offset_spec("first", q.name, self.vhost.name, 0)
        chunk_records(args, filter_values is not None, tracking, q.name, self.vhost.name)
        self.consumers[consumer.tag] = consumer
        if not nowait:
            self.reply(build(commands.Basic.ConsumeOk, consumer.tag))
        q.subscribe(consumer, spec, filter_values, match_unfiltered, tracking)

    def _answer_info(self, q: Queue, consumer: Consumer, nowait: bool) -> None:
        """x-amqpd-stream-info (streams/info.py): one delivery of the stream's facts, then nothing until the
        consumer is cancelled (it is never subscribed to the stream)."""
        assert isinstance(q, StreamQueue)
        body = info_body(q, consumer.arguments)
        self.consumers[consumer.tag] = consumer
        if not nowait:
            self.reply(build(commands.Basic.ConsumeOk, consumer.tag))
        route = shortstr("") + shortstr(q.name)
        self.deliver_made(consumer, q, route, info_header(body), body, InfoRun)

    def _consume_replies(self, m: commands.Basic.Consume) -> None:
        """Direct reply-to: the channel consumes its own pseudo-queue, auto-ack only, one per channel."""
        if not m.no_ack:
            raise errors.precondition_failed("reply consumer cannot acknowledge")
        if self.reply_token is not None:
            raise errors.precondition_failed("reply consumer already set")
        tag = m.consumer_tag or server_generated_name("amq.ctag-")
        if tag in self.consumers:
            raise errors.not_allowed(f"attempt to reuse consumer tag '{tag}'")
        self.reply_token, q = self.vhost.open_reply_queue()
        consumer = Consumer(tag, self, q, no_ack=True, exclusive=True, prefetch=0)
        self.consumers[tag] = consumer
        if not m.nowait:
            self.reply(build(commands.Basic.ConsumeOk, tag))
        q.add_consumer(consumer)

    def _rewrite_reply_to(self, msg: Message) -> None:
        """reply_to=amq.rabbitmq.reply-to becomes this channel's own reply address."""
        if msg.raw_property(FLAG_REPLY_TO) != _REPLY_TO_RAW:
            return
        if self.reply_token is None:
            raise errors.ChannelError(errors.PRECONDITION_FAILED, "fast reply consumer does not exist", 60, 40)
        address = shortstr(REPLY_TO_PREFIX + self.reply_token)
        msg.header = rewrite_properties(msg.header, msg.size, {FLAG_REPLY_TO: address})

    def basic_cancel(self, m: commands.Basic.Cancel) -> None:
        consumer = self.consumers.pop(m.consumer_tag or "", None)
        if not m.nowait:
            self.reply(build(commands.Basic.CancelOk, m.consumer_tag))
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)
            self._release_reply_queue(consumer)
            self.vhost.consumer_gone(consumer.queue)

    def _release_reply_queue(self, consumer: Consumer) -> None:
        if self.reply_token is not None and consumer.queue.name == REPLY_TO:
            self.vhost.close_reply_queue(self.reply_token)
            self.reply_token = None

    def cancel_by_server(self, consumer: Consumer) -> None:
        """The queue went away: RabbitMQ tells clients that asked for consumer_cancel_notify."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.conn.consumer_cancel_notify and not self.closing:
            self.reply(build(commands.Basic.Cancel, consumer.tag, True))

    def basic_get(self, m: commands.Basic.Get) -> None:
        name = self._queue_name(m.queue)
        self.permissions.permit("queue", name, "read")
        q = self.vhost.queue(name, self.conn)
        entry = q.get()  # a stream refuses it (540)
        if entry is None:
            self.reply(commands.Basic.GetEmpty())
            return
        self.deliver_got(q, entry, m.no_ack)

    def basic_recover(self, m: commands.Basic.Recover) -> None:
        if not m.requeue:
            raise errors.not_implemented("requeue=false")
        self._apply_settle("recover", self._collect(0, True), True)
        self.reply(commands.Basic.RecoverOk())

    def basic_recover_async(self, m: commands.Basic.RecoverAsync) -> None:
        if not m.requeue:
            raise errors.not_implemented("requeue=false")
        self._apply_settle("recover", self._collect(0, True), True)

    # channel class (open and close are the session's)

    def channel_flow(self, m: commands.Channel.Flow) -> None:
        if not m.active:
            raise errors.not_implemented("active=false")
        self.reply(commands.Channel.FlowOk(True))

    # access class: deprecated, but old clients still ask for a ticket; RabbitMQ hands out ticket 1

    def access_request(self, m: AccessRequest) -> None:
        self.reply(AccessRequestOk(1))

    # confirm and tx classes

    def confirm_select(self, m: commands.Confirm.Select) -> None:
        if self.tx:
            raise errors.precondition_failed("cannot switch from tx to confirm mode")
        self.confirm = True
        if not m.nowait:
            self.reply(commands.Confirm.SelectOk())

    def tx_select(self, m: commands.Tx.Select) -> None:
        if self.confirm:
            raise errors.precondition_failed("cannot switch from confirm to tx mode")
        self.tx = True
        self.reply(commands.Tx.SelectOk())

    def tx_commit(self, m: commands.Tx.Commit) -> None:
        if not self.tx:
            raise errors.precondition_failed("channel is not transactional")
        publishes, acks = self.tx_publishes, self.tx_acks
        self.tx_publishes, self.tx_acks = [], []
        waiting = [1]  # held at one until every publish is in, so commit-ok cannot go out early
        failed = [False]

        def stored() -> None:
            waiting[0] -= 1
            if waiting[0] or self.closing:
                return
            if failed[0]:
                # rabbit_channel's complete_tx for a failed tx: the channel closes, no commit-ok
                exc = errors.precondition_failed("partial tx completion").with_method(90, 20)
                self.conn.close_channel(self, exc)
            else:
                self.reply(commands.Tx.CommitOk())

        def not_stored() -> None:
            failed[0] = True
            stored()

        for _exchange, mandatory, msg in publishes:
            waiting[0] += 1
            if not self.publisher.publish(self, self.vhost, msg, mandatory, 0, stored, not_stored):
                waiting[0] -= 1
        for i, (kind, taken, requeue) in enumerate(acks):
            try:
                self._apply_settle(kind, taken, requeue)
            except errors.AMQPError:
                for _kind, rest, _requeue in acks[i + 1 :]:  # not applied: back, as _apply_settle put this one
                    self.unacked.restore(rest)
                raise
        stored()

    def tx_rollback(self, m: commands.Tx.Rollback) -> None:
        if not self.tx:
            raise errors.precondition_failed("channel is not transactional")
        for _kind, taken, _requeue in self.tx_acks:
            self.unacked.restore(taken)
        self.tx_publishes, self.tx_acks = [], []
        self.reply(commands.Tx.RollbackOk())

    # -- teardown -----------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """The channel is closing (by either side, or with its connection): consumers go, unacked
        messages return to their queues, uncommitted tx work is dropped."""
        if self.closing:
            return
        self.closing = True
        self.broker.closed_totals.add(self)
        self.assembler.reset()
        for _kind, taken, _requeue in self.tx_acks:
            self.unacked.restore(taken)
        self.tx_publishes, self.tx_acks = [], []
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            consumer.queue.remove_consumer(consumer)
            self._release_reply_queue(consumer)
        self._apply_settle("requeue", self._collect(0, True), True)
        for consumer in consumers:
            self.vhost.consumer_gone(consumer.queue)


def _check_not_stream(kind: str, taken: list[Run[Any]]) -> None:
    """A stream's deliveries cannot go back: nack and reject are 540 as in RabbitMQ 3.10, and so is a recover
    (where RabbitMQ 3.10 crashes the connection with 541; docs/compatibility.md)."""
    for run in taken:
        queue = run.queue
        if queue.is_stream:
            what = "basic.recover" if kind == "recover" else "basic.nack and basic.reject"
            exc = errors.not_implemented(
                f"{what} not supported by stream queues queue '{queue.name}' in vhost '{queue.vhost}'"
            )
            # a nack or reject may be applied at tx.commit: it names its own method; a recover is the method
            raise exc if kind == "recover" else exc.with_method(60, 120 if kind == "nack" else 90)


def _group_scan(header: bytes, max_body: int) -> tuple[int, bytes, PropertyScan, bool, bool] | None:
    """(flags, header as checked_header returns it, scan, persistent, whether its headers may name CC or BCC
    keys) of a publish in a group, its header read in one walk as on_whole_publish and Message read it, its
    body no larger than max_body; None when any of them would refuse it, or when it has a property that only
    the single path handles (PER_MESSAGE_FLAGS): the single path then takes it, and reports any error."""
    scanned = scan_published(header, PER_MESSAGE_FLAGS)
    if scanned is None:
        return None
    class_id, body_size, flags, header, scan = scanned
    if class_id != 60 or body_size > max_body:
        return None
    mode = scan.delivery_mode
    if mode is not None and mode != 1 and mode != 2:
        return None  # refused, one message at a time
    names_keys = scan.headers_raw is not None and may_name_keys(scan.headers_raw)
    return flags, header, scan, mode == 2, names_keys


def _stored_reads(plan: PublishPlan, headers: list[bytes], max_size: int) -> Iterator[tuple[int, bytes, PropertyScan]]:
    """_stored_read of each of the leading headers, up to the first it refuses. A publish run's publishes
    share one header object (on_publish_run): it is read once. What is read depends on the header alone (its
    body size included), so the answer holds for each."""
    last: bytes | None = None
    read: tuple[int, bytes, PropertyScan] | None = None
    for header in headers:
        if header is not last:
            last, read = header, _stored_read(plan, header, max_size)
        if read is None:
            return
        yield read


def _stored_read(plan: PublishPlan, header: bytes, max_size: int) -> tuple[int, bytes, PropertyScan] | None:
    """(flags, header as checked_header returns it, scan) of a publish with this header, from which
    on_whole_publish would make the message it makes when the plan stores it in its one queue with no other
    step (PublishPlan.stored_to); None otherwise, and when either would refuse it (the single path then reports
    the error)."""
    scanned = _group_scan(header, max_size)
    if scanned is None:
        return None
    flags, header, scan, persistent, names_keys = scanned
    if plan.stored_to(flags, persistent, names_keys) is None:
        return None
    return flags, header, scan


def _ids(method: base.Frame) -> tuple[int, int]:
    return method.index >> 16, method.index & 0xFFFF


_HANDLERS: dict[type, Callable[[Channel, Any], None]] = {
    commands.Exchange.Declare: Channel.exchange_declare,
    commands.Exchange.Delete: Channel.exchange_delete,
    commands.Exchange.Bind: Channel.exchange_bind,
    commands.Exchange.Unbind: Channel.exchange_unbind,
    commands.Queue.Declare: Channel.queue_declare,
    commands.Queue.Bind: Channel.queue_bind,
    commands.Queue.Unbind: Channel.queue_unbind,
    commands.Queue.Purge: Channel.queue_purge,
    commands.Queue.Delete: Channel.queue_delete,
    commands.Basic.Qos: Channel.basic_qos,
    commands.Basic.Consume: Channel.basic_consume,
    commands.Basic.Cancel: Channel.basic_cancel,
    commands.Basic.Get: Channel.basic_get,
    commands.Basic.Recover: Channel.basic_recover,
    commands.Basic.RecoverAsync: Channel.basic_recover_async,
    commands.Channel.Flow: Channel.channel_flow,
    AccessRequest: Channel.access_request,
    commands.Confirm.Select: Channel.confirm_select,
    commands.Tx.Select: Channel.tx_select,
    commands.Tx.Commit: Channel.tx_commit,
    commands.Tx.Rollback: Channel.tx_rollback,
}
