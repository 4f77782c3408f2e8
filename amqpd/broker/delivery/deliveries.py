"""The one way out: every delivery a channel makes — single, batch, run, a stream's filtered batch, chunk or
replayed run, basic.get — takes its delivery tags, its unacked entry and its count in the queue's statistics
(`Queue.delivered`: the API's deliver_get) here, and nowhere else.

`Deliveries` is the part of a channel (session/channel.py subclasses it) that owns `last_tag` and the `unacked`
table (unacked.py); it encodes with the protocol's fast-path encoders and writes to the channel's connection.
A stream chunk counts as the records it carries; a run straight from a publish (deliver_run, deliver_each) counts
in its consumer's queue, as deliver() would have counted each.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.broker.delivery.unacked import Outstanding, Run
from amqpd.protocol.fastpath import (
    encode_deliver,
    encode_deliveries,
    encode_deliveries_each,
    encode_delivery,
    encode_delivery_batch,
    encode_get_ok,
)
from amqpd.protocol.frames import content_frames, content_pieces

# A body at least this big goes to the connection as pieces (Session.send_pieces): below it, one copy into
# the delivery's bytes costs less than the list of pieces.
PIECES_FROM = 64 * 1024
_body = itemgetter(3)  # of a deliver_batch item

if TYPE_CHECKING:
    from amqpd.broker.delivery.consumer import Consumer
    from amqpd.broker.entry import Entry
    from amqpd.broker.queues.queue import Queue


class Deliveries:
    """Delivery tags, unacked entries and delivery counts of one channel (its subclass sets these up)."""

    id: int
    conn: Any  # send(), send_pieces(), frame_max
    broker: Any  # body_of() and the coarse clock that stamps unacked entries
    last_tag: int
    unacked: Outstanding
    consumers: dict[str, Consumer]
    acked: int  # deliveries acked (the management API's ack count)
    # None: acks resume deliveries at once; else the session will once the acks it is reading end, and True
    # says some did (Session._resume_acked).
    resume_after_acks: bool | None

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        self.last_tag = tag = self.last_tag + 1
        msg = entry.msg
        queue.delivered += 1
        if consumer.no_ack:
            if queue.store_id is not None:
                queue.hooks.settled(queue, entry)
        else:
            self.unacked.add(tag, queue, entry, consumer, self.broker.clock)
        header = msg.header if not queue.counts_deliveries else queue.header_for(entry)
        body = msg.body if msg.body is not None else self.broker.body_of(msg)
        if len(body) >= PIECES_FROM:  # the body cut into frames by views, not joined with their headers
            method = encode_deliver(self.id, consumer.ctag, tag, entry.redelivered, msg.route)
            self.conn.send_pieces(content_pieces(self.id, header, [body], len(body), self.conn.frame_max, method))
            return
        self.conn.send(
            encode_delivery(
                self.id, consumer.ctag, tag, entry.redelivered, msg.route, header, body, self.conn.frame_max
            )
        )

    def deliver_many(self, consumer: Consumer, queue: Queue, entries: list[Entry]) -> None:
        """Acked deliveries to one consumer, encoded in one pass and sent in one write (a stream's replay;
        the consumer's prefetch room was checked by the caller)."""
        first = self.last_tag + 1
        ctag, channel_id = consumer.ctag, self.id
        frame_max = self.conn.frame_max
        parts = []
        for tag, entry in enumerate(entries, first):
            msg = entry.msg
            body = msg.body if msg.body is not None else self.broker.body_of(msg)
            parts.append(
                encode_delivery(channel_id, ctag, tag, entry.redelivered, msg.route, msg.header, body, frame_max)
            )
        self.last_tag = first + len(entries) - 1
        queue.delivered += len(entries)
        self.unacked.add_many(first, queue, entries, consumer, self.broker.clock)
        self.conn.send(b"".join(parts))

    def deliver_parts(self, consumer: Consumer, queue: Queue, entry: Entry, body: list[bytes], records: int) -> None:
        """deliver_many of one entry whose body is held as `body`'s parts (a stream chunk of `records` records): its
        frames go to the connection as pieces, the parts cut into body frames by views, never joined."""
        tag = self.last_tag = self.last_tag + 1
        queue.delivered += records
        self.unacked.add_many(tag, queue, [entry], consumer, self.broker.clock)
        msg = entry.msg
        method = encode_deliver(self.id, consumer.ctag, tag, entry.redelivered, msg.route)
        self.conn.send_pieces(content_pieces(self.id, msg.header, body, msg.size, self.conn.frame_max, method))

    def deliver_batch(self, consumer: Consumer, queue: Queue, entries: list[Entry]) -> None:
        """deliver() of each entry in turn, encoded in one pass and counted unacked as one range (a queue handing
        a consumer as many as it has room for; `entries` is kept)."""
        first = self.last_tag + 1
        n = len(entries)
        self.last_tag += n
        queue.delivered += n
        if consumer.no_ack:
            if queue.store_id is not None:
                queue.hooks.settled_many(queue, entries)
        else:
            self.unacked.add_many(first, queue, entries, consumer, self.broker.clock)
        body_of = self.broker.body_of
        if queue.counts_deliveries:
            header_for = queue.header_for
            items = [
                (e.redelivered, e.msg.route, header_for(e), e.msg.body if e.msg.body is not None else body_of(e.msg))
                for e in entries
            ]
        else:
            items = [
                (e.redelivered, m.route, m.header, m.body if m.body is not None else body_of(m))
                for e in entries
                for m in (e.msg,)
            ]
        if max(map(len, map(_body, items))) >= PIECES_FROM:
            self._send_batch_pieces(consumer, first, items)
            return
        self.conn.send(encode_delivery_batch(self.id, consumer.ctag, first, items, self.conn.frame_max))

    def _send_batch_pieces(self, consumer: Consumer, first: int, items: list[tuple[bool, bytes, bytes, bytes]]) -> None:
        """deliver_batch's frames as pieces, for a batch with a large body: the bodies cut by views, never joined."""
        pieces: list[bytes | memoryview] = []
        channel, frame_max = self.id, self.conn.frame_max
        for tag, (redelivered, route, header, body) in enumerate(items, first):
            method = encode_deliver(channel, consumer.ctag, tag, redelivered, route)
            pieces += content_pieces(channel, header, [body], len(body), frame_max, method)
        self.conn.send_pieces(pieces)

    def deliver_each(self, consumer: Consumer, route: bytes, headers: list[bytes], bodies: list[bytes]) -> None:
        """No-ack deliveries of messages with one route, each with its own header, encoded in one pass
        (PublishGroups.group)."""
        first = self.last_tag + 1
        self.last_tag += len(bodies)
        consumer.queue.delivered += len(bodies)
        self.conn.send(encode_deliveries_each(self.id, consumer.ctag, first, route, headers, bodies))

    def deliver_run(self, consumer: Consumer, route: bytes, header: bytes, bodies: list[bytes]) -> None:
        """No-ack deliveries of messages that differ only by body, encoded in one pass (PublishGroups.run)."""
        first = self.last_tag + 1
        self.last_tag += len(bodies)
        consumer.queue.delivered += len(bodies)
        self.conn.send(encode_deliveries(self.id, consumer.ctag, first, route, header, bodies))

    def deliver_got(self, queue: Queue, entry: Entry, no_ack: bool) -> None:
        """basic.get's basic.get-ok and content."""
        self.last_tag = tag = self.last_tag + 1
        queue.delivered += 1
        if no_ack:
            queue.hooks.settled(queue, entry)
        else:
            self.unacked.add(tag, queue, entry, None, self.broker.clock)
        msg = entry.msg
        frame_max = self.conn.frame_max
        self.conn.send(
            encode_get_ok(self.id, tag, entry.redelivered, msg.route, len(queue.ready))
            + content_frames(self.id, queue.header_for(entry, fetched=True), self.broker.body_of(msg), frame_max)
        )

    def deliver_encoded_run(self, queue: Queue, run: Run[Any], pieces: list[bytes | memoryview]) -> None:
        """Deliveries encoded by the caller with tags from last_tag + 1 on (a stream's batched replay), as one
        unacked run; their bytes in pieces to write in order (big bodies as views of their records)."""
        n = len(run.items)
        self.last_tag = run.first + n - 1
        queue.delivered += n
        self.unacked.add_run(run)
        if len(pieces) == 1:
            self.conn.send(pieces[0])
        else:
            self.conn.send_pieces(pieces)

    def deliver_made(
        self, consumer: Consumer, queue: Queue, route: bytes, header: bytes, body: bytes, run: type[Run[Any]]
    ) -> None:
        """A delivery the broker makes up rather than takes from the queue (a stream's info message,
        streams/info.py): a tag, and a `run` of one in the unacked table when the consumer acks; no message of
        the queue, so not counted in its deliveries."""
        tag = self.last_tag = self.last_tag + 1
        if not consumer.no_ack:
            self.unacked.add_run(run(tag, [None], queue, consumer, self.broker.clock))
        self.conn.send(encode_delivery(self.id, consumer.ctag, tag, False, route, header, body, self.conn.frame_max))

    # -- settling: ack, nack, reject, recover, and the channel closing --------------------------------------

    def collect(self, tag: int, multiple: bool) -> list[Run[Any]]:
        """The unacked deliveries an ack/nack/reject names, removed from the channel (RabbitMQ's rules:
        the tag must be outstanding, except multiple with tag 0, which means all)."""
        unacked = self.unacked
        if multiple and tag == 0:
            return unacked.take_all()
        taken = unacked.take_upto(tag) if multiple else unacked.take(tag)
        if taken is None:
            raise errors.precondition_failed(f"unknown delivery tag {tag}")
        return taken

    def apply_settle(self, kind: str, taken: list[Run[Any]], requeue: bool) -> None:
        """Settle what collect() took: "ack", "nack", "reject", "recover" (requeued, a stream refuses it) or
        "requeue" (the channel closing)."""
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
            self.unacked.release(run)
            run.give_back(requeue, by_queue)
        for queue, entries in by_queue.items():
            queue.requeue(entries)
        self.resume_deliveries()

    def _apply_acks(self, taken: list[Run[Any]]) -> None:
        """apply_settle for acks, the per-message path of every manually acking consumer: a run at a time."""
        release = self.unacked.release
        for run in taken:
            queue = run.queue
            n = len(run.items)
            self.acked += n
            release(run)
            queue.acked += n
            run.acked()
        if self.resume_after_acks is None:
            self.resume_deliveries()
        else:  # the session resumes once the acks it is reading end (Session._resume_acked)
            self.resume_after_acks = True

    def requeue_all(self) -> None:
        """Every unacked message goes back to its queue, in order, marked redelivered."""
        self.apply_settle("requeue", self.collect(0, True), True)

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
