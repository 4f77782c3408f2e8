"""A channel's straight-line paths for many publishes at once: a run (FrameReader's PUBLISH_RUN: publishes that
differ only by body) and a group (PUBLISH_GROUP: publishes to one place, each with its own properties).

They take the leading publishes that the publish plan (broker/routing/plan.py) sends where nothing happens on
the way but the push — straight to one no-ack consumer, into one queue, or (confirm mode) stored in one append
and confirmed together — and leave the rest to the single path, which reports any error.
tests/unit/test_publish_run.py checks that both ways leave the same bytes and state.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from amqpd import errors
from amqpd.broker.delivery.consumer import Consumer
from amqpd.broker.message import SCANNED_FLAGS, Message, may_name_keys
from amqpd.broker.publish.publisher import Origin, Publisher
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.plan import PER_MESSAGE_FLAGS, PublishPlan
from amqpd.protocol.fastpath import parse_content_header, parse_publish_route
from amqpd.protocol.properties import PropertyScan, checked_header, scan_published

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.routing.vhost import VirtualHost
    from amqpd.session.permissions import Permissions

# (flags, header as checked_header returns it, scan) of a publish the plan takes on a straight path
Scanned = tuple[int, bytes, PropertyScan]
# PublishPlan.straight_to or stored_to: where a publish of these (flags, persistent, names CC/BCC keys) goes
Decide = Callable[[int, bool, bool], "Queue | None"]


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


def prepare_run(method: bytes, header: bytes, max_size: int) -> PreparedRun | None:
    """What on_whole_publish would parse from each publish of a run, parsed once; None when it would not take
    the straight-line path (the caller then goes frame by frame, which reports any error)."""
    try:
        exchange, routing_key, route, bits = parse_publish_route(method)
        class_id, body_size, flags = parse_content_header(header)
        scan = PropertyScan(header, flags) if flags & SCANNED_FLAGS else None
    except errors.AMQPError:
        return None
    if bits & 2 or class_id != 60 or body_size > max_size:
        return None
    return PreparedRun(exchange, routing_key, route, checked_header(header), flags, bool(bits & 1), scan)


class Publishing(Origin, Protocol):
    """What these paths need of their channel."""

    vhost: VirtualHost
    broker: Broker
    publisher: Publisher
    permissions: Permissions
    confirm: bool
    tx: bool
    published: int

    def group_confirm(self, n: int) -> Callable[[bool], None]: ...


class PublishGroups:
    """The run and group paths of one channel."""

    def __init__(self, channel: Publishing, max_size: int) -> None:
        # A proxy: the channel holds this object, and a cycle would keep a closed channel (and its connection)
        # until a full collection.
        self.ch: Publishing = weakref.proxy(channel)
        self.max_size = max_size  # the largest body a publish may have (max_message_size)

    def run(self, method: bytes, header: bytes, bodies: list[bytes]) -> bool:
        """Publishes that differ only by body, delivered in one pass when their publish plan sends them straight
        to a queue that hands each, as it comes, to the same no-ack consumer. False, with nothing done,
        otherwise: the caller then publishes them one by one. In confirm mode, as group(): with one header the
        plan takes all of them or none."""
        ch = self.ch
        if ch.confirm and not ch.tx:
            return self._stored_group(method, [header] * len(bodies), bodies) > 0
        target = self._straight_target(method)
        if target is None or not self._goes_straight(target[0], target[2], header):
            return False
        plan, route, consumer = target
        ch.published += len(bodies)
        ch.publisher.deliver_run(plan, consumer, route, header, bodies)
        return True

    def group(self, method: bytes, headers: list[bytes], bodies: list[bytes]) -> int:
        """Publishes to one place, each with its own properties: the leading ones that the publish plan sends
        straight to one queue go in one pass. To the queue's no-ack consumer as run() does, when it would hand
        each to that one as it comes; else into the queue at once (_queue_group). In confirm mode:
        _stored_group. How many; the caller publishes the others one by one."""
        ch = self.ch
        if ch.confirm and not ch.tx:
            return self._stored_group(method, headers, bodies)
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
            ch.published += n
            ch.publisher.deliver_each(plan, consumer, route, headers[:n], bodies[:n])
        return n

    def _queue_group(
        self, plan: PublishPlan, queue: Queue, method: bytes, headers: list[bytes], bodies: list[bytes]
    ) -> int:
        """The leading publishes that go straight to `queue`, pushed there at once (Queue.take_group): consumers
        with room get them as push() would hand them out, a consumer alone on the queue in one batch."""
        exchange, routing_key, route, _bits = parse_publish_route(method)
        decide, max_size = plan.straight_to, self.max_size
        msgs = []
        for header, body in zip(headers, bodies, strict=True):
            scanned = scan_for(decide, header, max_size)
            if scanned is None:
                break
            flags, checked, scan = scanned
            msgs.append(Message(exchange, routing_key, route, checked, body, flags, scan))
        if msgs:
            self.ch.published += len(msgs)
            self.ch.publisher.enqueue_group(self.ch, plan, queue, msgs)
        return len(msgs)

    def _stored_group(self, method: bytes, headers: list[bytes], bodies: list[bytes]) -> int:
        """Confirm mode: the leading publishes of a group that the publish plan sends to one durable queue or
        stream with nothing on the way but the store and the push (PublishPlan.stored_to) are stored in one
        append and confirmed together once the fsync covering them is done; each is then pushed as
        Publisher.deliver pushes one. How many; the caller publishes the others one by one."""
        ch = self.ch
        try:
            exchange, routing_key, route, bits = parse_publish_route(method)
        except errors.AMQPError:
            return 0
        ex = ch.vhost.exchanges.get(exchange)
        if bits & 2 or ex is None or ch.broker.store is None or not ch.permissions.cleared(ex, exchange, 0):
            return 0
        plan = ch.vhost.plan(ex, routing_key)
        if plan.stored is None:
            return 0
        if plan.stored.is_stream:
            return self._store_stream_group(plan, plan.stored, exchange, routing_key, headers, bodies)
        msgs = _stored_messages(plan.stored_to, exchange, routing_key, route, headers, bodies, self.max_size)
        if msgs:
            ch.publisher.store_group(ch, plan, plan.stored, msgs, ch.group_confirm(len(msgs)))
        return len(msgs)

    def _store_stream_group(
        self,
        plan: PublishPlan,
        stream: Queue,
        exchange: str,
        routing_key: str,
        headers: list[bytes],
        bodies: list[bytes],
    ) -> int:
        """_stored_group for a stream: a stream keeps nothing of a publish in memory (its readers read the
        store), so the publishes are stored from their headers and bodies (Publisher.store_stream_group), as
        store_group stores the messages it would make, without making them (none has an expiry: a publish with
        an expiration is one of PER_MESSAGE_FLAGS, which end a group). How many."""
        # the headers as checked_header returns them
        stored = [header for _flags, header, _scan in _scans(plan.stored_to, headers, self.max_size)]
        n = len(stored)
        if n:
            ch = self.ch
            settle = ch.group_confirm(n)
            ch.publisher.store_stream_group(ch, plan, stream, exchange, routing_key, stored, bodies[:n], settle)
        return n

    def _group_target(self, method: bytes) -> tuple[PublishPlan, bytes] | None:
        """For publishes with this method: their plan and route, when the plan has a queue that messages of
        some property class go straight to (PublishPlan.plain); None when they may go anywhere else, or when
        the channel holds or confirms its publishes (tx, confirm mode)."""
        ch = self.ch
        if ch.tx or ch.confirm:
            return None
        try:
            exchange, routing_key, route, bits = parse_publish_route(method)
        except errors.AMQPError:
            return None
        ex = ch.vhost.exchanges.get(exchange)
        if bits & 2 or ex is None or not ch.permissions.cleared(ex, exchange, 0):  # user_id: straight_to() refuses it
            return None
        plan = ch.vhost.plan(ex, routing_key)
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
        """Whether the plan sends a publish with this content header straight to its queue (scan_for), and its
        body fits one frame to the consumer."""
        max_body = min(self.max_size, consumer.channel.conn.frame_max - 8)
        return scan_for(plan.straight_to, header, max_body) is not None


def scan_for(decide: Decide, header: bytes, max_body: int) -> Scanned | None:
    """(flags, header as checked_header returns it, scan) of a publish with this header that `decide` (the
    plan's straight_to or stored_to) sends to its one queue with no other step, its header read in one walk as
    on_whole_publish and Message read it, its body no larger than max_body; None when any of them would refuse
    it, when it has a property that only the single path handles (PER_MESSAGE_FLAGS), or when the plan would
    not send it so: the single path then takes it, and reports any error."""
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
    if decide(flags, mode == 2, names_keys) is None:
        return None
    return flags, header, scan


def _stored_messages(
    decide: Decide,
    exchange: str,
    routing_key: str,
    route: bytes,
    headers: list[bytes],
    bodies: list[bytes],
    max_size: int,
) -> list[Message]:
    """The Message of each of the leading publishes that scan_for takes, up to the first it refuses: _scans in
    one loop, the per-message path of confirmed publishing (a header shared by a run is read once)."""
    msgs: list[Message] = []
    append = msgs.append
    last: bytes | None = None
    for header, body in zip(headers, bodies, strict=True):
        if header is not last:
            last, read = header, scan_for(decide, header, max_size)
            if read is None:
                break
            flags, checked, scan = read
        append(Message(exchange, routing_key, route, checked, body, flags, scan))
    return msgs


def _scans(decide: Decide, headers: list[bytes], max_size: int) -> Iterator[Scanned]:
    """scan_for of each of the leading headers, up to the first it refuses. A publish run's publishes share one
    header object (PublishGroups.run): it is read once. What is read depends on the header alone (its body size
    included), so the answer holds for each."""
    last: bytes | None = None
    read: Scanned | None = None
    for header in headers:
        if header is not last:
            last, read = header, scan_for(decide, header, max_size)
        if read is None:
            return
        yield read
