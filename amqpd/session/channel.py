"""An AMQP channel: its methods parsed, turned into calls on the broker, and their answers encoded.

What it holds apart: runs and groups of publishes (publish_groups.py), publisher confirms (confirms.py), the
transaction (transaction.py), basic.consume's arguments (consume_args.py), its user's permissions
(permissions.py), and, in the broker, its deliveries and their acks (broker/delivery/deliveries.py).

Plain object: it writes encoded frames through `conn.send()` and never touches a socket. Errors are
raised as AMQPError; the session turns them into channel.close or connection.close.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import base, commands

from amqpd import errors
from amqpd.broker.delivery.consumer import UNLIMITED, Consumer
from amqpd.broker.delivery.deliveries import Deliveries
from amqpd.broker.delivery.unacked import Outstanding
from amqpd.broker.message import Message
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.vhost import REPLY_TO, VirtualHost, server_generated_name
from amqpd.broker.streams.info import InfoRun, info_body, info_header, info_time, wants_info
from amqpd.broker.streams.stream import StreamQueue
from amqpd.protocol.assembler import Assembled, ContentAssembler
from amqpd.protocol.constants import FLAG_REPLY_TO
from amqpd.protocol.fastpath import encode_return, parse_content_header, parse_publish_route, parse_tag_bits, shortstr
from amqpd.protocol.frames import content_frames
from amqpd.protocol.methods import AccessRequest, AccessRequestOk, build, encode_method
from amqpd.protocol.properties import checked_header
from amqpd.session.confirms import Confirms
from amqpd.session.consume_args import check_queue_consumer, consumer_priority, stream_start
from amqpd.session.permissions import Permissions
from amqpd.session.publish_groups import PublishGroups
from amqpd.session.reply_to import ReplyTo, names_reply_to
from amqpd.session.states import CHANNEL_OPEN, CONFIRM, HANDLE, TX, Refusal, channel_step
from amqpd.session.transaction import Transaction

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker

log = logging.getLogger("amqpd.channel")


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
    def hold_frames(self, reason: object) -> None: ...
    def release_frames(self, reason: object) -> None: ...


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
        self.reply_to = ReplyTo(vhost)  # direct reply-to (reply_to.py)
        # deliveries
        self.last_tag = 0  # the delivery tag given last; basic.deliver and basic.get-ok count from 1
        self.unacked = Outstanding()  # by tag, queues' and streams'; it keeps every unacked count (unacked.py)
        self.unacked.on_first = _unacked_watch(broker.connections, self)
        # None: acks resume deliveries at once; else the session will once the acks it is reading end, and
        # True says some did (Session._resume_acked).
        self.resume_after_acks: bool | None = None
        self._getting: asyncio.Future[None] | None = None  # a basic.get waiting for its message to be read
        self.consumers: dict[str, Consumer] = {}
        self.prefetch_count = 0  # for consumers created from now on (basic.qos global=false)
        self.global_prefetch = 0  # shared by all consumers of the channel (global=true)
        # its state in the channel's table (states.py), and the two modes as the publish path reads them
        self.state = CHANNEL_OPEN
        self.confirm = False
        self.tx = False
        self.confirms = Confirms(conn, self)
        self.transaction = Transaction()
        self.assembler = ContentAssembler(broker.settings.max_message_size)
        self.groups = PublishGroups(self, self.assembler.max_size)  # runs and groups of publishes at once
        # Counters for the management API (deliveries and gets are last_tag, confirms confirms.confirmed_upto).
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
            self.reply_to.rewrite(msg)
        self.published += 1
        if self.tx:
            self.transaction.hold_publish(msg, mandatory)
            return
        self.publisher.publish(self, self.vhost, msg, mandatory, self.confirms.next_seq() if self.confirm else 0)

    def publish_flow(self, q: Queue) -> None:
        """A queue grown past FLOW_HIGH with consumers pauses its publishers while those consumers are waiting
        on the broker (flow.py), or while the broker's CPU is saturated (server/load.py)."""
        if len(q.ready) > q.FLOW_HIGH and q.consumers and (q.pace.lagging() or self.broker.busy):
            self.conn.throttle(q)
            self.broker.throttled(q)

    def publish_durable(self, seq: int, on_stored: Callable[[], None] | None) -> Callable[[], None] | None:
        return self.confirms.durable(seq, on_stored)

    def publish_failed(
        self, seq: int, on_stored: Callable[[], None] | None, on_failed: Callable[[], None] | None
    ) -> Callable[[], None] | None:
        return self.confirms.failed(seq, on_stored, on_failed)

    def publish_returned(self, msg: Message) -> None:
        self._send_return(msg, errors.NO_ROUTE, "NO_ROUTE")

    def _send_return(self, msg: Message, code: int, text: str) -> None:
        frames = encode_return(self.id, code, text, msg.route)
        self.conn.send(frames + content_frames(self.id, msg.header, self.broker.body_of(msg), self.conn.frame_max))

    def publish_settled(self, seq: int, ok: bool) -> None:
        self.confirms.settled(seq, ok)

    def group_confirm(self, n: int) -> Callable[[bool], None]:
        """The next n publishes, stored together (publish_groups.py): one confirm for all."""
        self.published += n
        return self.confirms.group(n)

    def emit_confirms(self) -> None:
        """Called once per loop turn: one basic.ack(multiple) for everything settled in order."""
        if not self.closing:
            out = self.confirms.emit(self.id)
            if out:
                self.conn.send(out)

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
            taken = self.collect(tag, multiple)
        except errors.AMQPError as exc:
            raise exc.with_method(60, method_id) from None
        if self.tx:
            self.transaction.hold_settle(kind, taken, requeue)
            return
        self.apply_settle(kind, taken, requeue)

    # -- method dispatch -----------------------------------------------------------------------------------

    def handle(self, method: base.Frame) -> str:
        """A method other than publish, ack, nack and reject, as the channel's table (states.py) says for its
        state: its handler runs (HANDLE), or the action is the session's to carry out (CLOSE, IGNORE)."""
        step = channel_step(self.state, type(method))
        if isinstance(step, Refusal):
            raise step.error(method)
        if step.action != HANDLE:
            return step.action
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise errors.ConnectionError(errors.COMMAND_INVALID, f"unexpected method {method.name}", *_ids(method))
        try:
            handler(self, method)
        except errors.AMQPError as exc:
            raise exc.with_method(*_ids(method)) from None
        if step.after != self.state:
            self.enter(step.after)
        return HANDLE

    def enter(self, state: int) -> None:
        self.state = state
        self.confirm = state == CONFIRM
        self.tx = state == TX

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
        if names_reply_to(m.queue):
            self.reply_to.check_declare(m.queue)
            if not m.nowait:
                self.reply(build(commands.Queue.DeclareOk, m.queue, 0, 1))
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
        priority = consumer_priority(args)
        if not stream:
            check_queue_consumer(args, q.name, self.vhost.name, q.arguments)
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
        """A stream consumer reads from where its arguments say (consume_args.py)."""
        args = consumer.arguments
        now = self.broker.now_ms()
        start = stream_start(args, consumer.no_ack, consumer.prefetch, q.name, self.vhost.name, now)
        self.consumers[consumer.tag] = consumer
        if not nowait:
            self.reply(build(commands.Basic.ConsumeOk, consumer.tag))
        q.subscribe(consumer, start.spec, start.filter_values, start.match_unfiltered, start.tracking)

    def _answer_info(self, q: Queue, consumer: Consumer, nowait: bool) -> None:
        """x-amqpd-stream-info (streams/info.py): one delivery of the stream's facts, then nothing until the
        consumer is cancelled (it is never subscribed to the stream). Its times may have to be read in the
        store's read worker: what the client sent after this consume waits until it is answered."""
        assert isinstance(q, StreamQueue)
        at = info_time(consumer.arguments, q.name, self.vhost.name)
        self.conn.hold_frames(self)
        q.times(at, partial(self._send_info, q, consumer, nowait))

    def _send_info(
        self, q: StreamQueue, consumer: Consumer, nowait: bool, first_timestamp: int | None, offset_at: int | None
    ) -> None:
        try:
            if not self.closing:
                body = info_body(q, first_timestamp, offset_at)
                self.consumers[consumer.tag] = consumer
                if not nowait:
                    self.reply(build(commands.Basic.ConsumeOk, consumer.tag))
                route = shortstr("") + shortstr(q.name)
                self.deliver_made(consumer, q, route, info_header(body), body, InfoRun)
        finally:
            self.conn.release_frames(self)  # the frames read after the consume: after its answer

    def _consume_replies(self, m: commands.Basic.Consume) -> None:
        """Direct reply-to: the channel consumes its own pseudo-queue, auto-ack only, one per channel."""
        self.reply_to.check_consume(m.no_ack)
        tag = m.consumer_tag or server_generated_name("amq.ctag-")
        if tag in self.consumers:
            raise errors.not_allowed(f"attempt to reuse consumer tag '{tag}'")
        q = self.reply_to.open()
        consumer = Consumer(tag, self, q, no_ack=True, exclusive=True, prefetch=0)
        self.consumers[tag] = consumer
        if not m.nowait:
            self.reply(build(commands.Basic.ConsumeOk, tag))
        q.add_consumer(consumer)

    def basic_cancel(self, m: commands.Basic.Cancel) -> None:
        consumer = self.consumers.pop(m.consumer_tag or "", None)
        if not m.nowait:
            self.reply(build(commands.Basic.CancelOk, m.consumer_tag))
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)
            self.reply_to.release(consumer.queue)
            self.vhost.consumer_gone(consumer.queue)

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
        if self.broker.get_would_read(q):
            # The message is read back in the store's read worker first; what the client sent after this
            # get waits until get-ok is out, so nothing is answered out of order (hold_frames).
            self.conn.hold_frames(self)
            self._getting = asyncio.ensure_future(self._get_when_read(q, m.no_ack))
            return
        self._get(q, m.no_ack)

    def _get(self, q: Queue, no_ack: bool) -> None:
        entry = q.get()  # a stream refuses it (540)
        if entry is None:
            self.reply(commands.Basic.GetEmpty())
            return
        self.deliver_got(q, entry, no_ack)

    async def _get_when_read(self, q: Queue, no_ack: bool) -> None:
        try:
            await self.broker.ready_to_get(q)
            if not self.closing:
                self._get(q, no_ack)
        except errors.AMQPError as exc:
            self.conn.close_channel(self, exc)
        except Exception as exc:  # a bug of ours must cost one channel, never the broker
            log.exception("basic.get on %s", q)
            error = errors.ChannelError(errors.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
            self.conn.close_channel(self, error.with_method(60, 70))
        finally:
            self._getting = None
            self.conn.release_frames(self)

    def basic_recover(self, m: commands.Basic.Recover) -> None:
        if not m.requeue:
            raise errors.not_implemented("requeue=false")
        self.apply_settle("recover", self.collect(0, True), True)
        self.reply(commands.Basic.RecoverOk())

    def basic_recover_async(self, m: commands.Basic.RecoverAsync) -> None:
        if not m.requeue:
            raise errors.not_implemented("requeue=false")
        self.apply_settle("recover", self.collect(0, True), True)

    # channel class (open and close are the session's)

    def channel_flow(self, m: commands.Channel.Flow) -> None:
        if not m.active:
            raise errors.not_implemented("active=false")
        self.reply(commands.Channel.FlowOk(True))

    # access class: deprecated, but old clients still ask for a ticket; RabbitMQ hands out ticket 1

    def access_request(self, m: AccessRequest) -> None:
        self.reply(AccessRequestOk(1))

    # confirm and tx classes

    # the modes: the channel's table (states.py) refuses a switch, and enters the mode once selected

    def confirm_select(self, m: commands.Confirm.Select) -> None:
        if not m.nowait:
            self.reply(commands.Confirm.SelectOk())

    def tx_select(self, m: commands.Tx.Select) -> None:
        self.reply(commands.Tx.SelectOk())

    def tx_commit(self, m: commands.Tx.Commit) -> None:
        self.transaction.commit(self)

    def publish_held(
        self, msg: Message, mandatory: bool, on_stored: Callable[[], None], on_failed: Callable[[], None]
    ) -> bool:
        """A publish held by the transaction, at commit (transaction.py)."""
        return self.publisher.publish(self, self.vhost, msg, mandatory, 0, on_stored, on_failed)

    def committed(self) -> None:
        self.reply(commands.Tx.CommitOk())

    def commit_failed(self, exc: errors.AMQPError) -> None:
        self.conn.close_channel(self, exc)

    def tx_rollback(self, m: commands.Tx.Rollback) -> None:
        self.transaction.drop(self.unacked)
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
        self.transaction.drop(self.unacked)
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            consumer.queue.remove_consumer(consumer)
            self.reply_to.release(consumer.queue)
        self.requeue_all()
        for consumer in consumers:
            self.vhost.consumer_gone(consumer.queue)


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


def _unacked_watch(connections: Any, channel: Channel) -> Callable[[], None]:
    """What the channel's unacked table calls on its first delivery (the ack-timeout check's watch list). It
    holds the channel weakly: the channel holds the table, and a cycle through it would keep a closed
    connection until the next full collection instead of freeing it at once."""
    ref = weakref.ref(channel)

    def watch() -> None:
        ch = ref()
        if ch is not None:
            connections.watch_unacked(ch)

    return watch
