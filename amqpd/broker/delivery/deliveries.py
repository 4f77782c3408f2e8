"""The one way out: every delivery a channel makes — single, batch, run, a stream's filtered batch, chunk or
replayed run, basic.get — takes its delivery tags, its unacked entry and its count in the queue's statistics
(`Queue.delivered`: the API's deliver_get) here, and nowhere else.

`Deliveries` is the part of a channel (session/channel.py subclasses it) that owns `last_tag` and the `unacked`
table (unacked.py); it encodes with the protocol's fast-path encoders and writes to the channel's connection.
A stream chunk counts as the records it carries; a run straight from a publish (deliver_run, deliver_each) counts
in its consumer's queue, as deliver() would have counted each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
        self.conn.send(
            encode_delivery(
                self.id,
                consumer.ctag,
                tag,
                entry.redelivered,
                msg.route,
                header,
                msg.body if msg.body is not None else self.broker.body_of(msg),
                self.conn.frame_max,
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
        self.conn.send(encode_delivery_batch(self.id, consumer.ctag, first, items, self.conn.frame_max))

    def deliver_each(self, consumer: Consumer, route: bytes, headers: list[bytes], bodies: list[bytes]) -> None:
        """No-ack deliveries of messages with one route, each with its own header, encoded in one pass
        (on_publish_group)."""
        first = self.last_tag + 1
        self.last_tag += len(bodies)
        consumer.queue.delivered += len(bodies)
        self.conn.send(encode_deliveries_each(self.id, consumer.ctag, first, route, headers, bodies))

    def deliver_run(self, consumer: Consumer, route: bytes, header: bytes, bodies: list[bytes]) -> None:
        """No-ack deliveries of messages that differ only by body, encoded in one pass (on_publish_run)."""
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

    def deliver_encoded_run(self, queue: Queue, run: Run[Any], data: bytes) -> None:
        """Deliveries encoded by the caller with tags from last_tag + 1 on (a stream's batched replay), as one
        unacked run."""
        n = len(run.items)
        self.last_tag = run.first + n - 1
        queue.delivered += n
        self.unacked.add_run(run)
        self.conn.send(data)

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
