"""Direct reply-to for one channel (RabbitMQ's amq.rabbitmq.reply-to): the pseudo-queue the channel consumes its
replies from, auto-ack only and one per channel, and the reply address its publishes carry instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amqpd import errors
from amqpd.broker.message import Message
from amqpd.broker.routing.vhost import REPLY_TO, REPLY_TO_PREFIX, VirtualHost
from amqpd.protocol.constants import FLAG_REPLY_TO
from amqpd.protocol.fastpath import shortstr
from amqpd.protocol.properties import rewrite_properties

if TYPE_CHECKING:
    from amqpd.broker.queues.queue import Queue

_REPLY_TO_RAW = REPLY_TO.encode()


def names_reply_to(queue: str) -> bool:
    return queue == REPLY_TO or queue.startswith(REPLY_TO_PREFIX)


class ReplyTo:
    __slots__ = ("vhost", "token")

    def __init__(self, vhost: VirtualHost) -> None:
        self.vhost = vhost
        self.token: str | None = None  # set while the channel consumes its replies

    def check_declare(self, queue: str) -> None:
        """As RabbitMQ answers a declare of it (passive or not): the pseudo-queue always exists with one
        consumer, a reply address while its requester consumes, anything else is 404."""
        if queue != REPLY_TO and queue[len(REPLY_TO_PREFIX) :] not in self.vhost.replies:
            raise errors.not_found(f"no queue '{queue}' in vhost '{self.vhost.name}'")

    def check_consume(self, no_ack: bool) -> None:
        if not no_ack:
            raise errors.precondition_failed("reply consumer cannot acknowledge")
        if self.token is not None:
            raise errors.precondition_failed("reply consumer already set")

    def open(self) -> Queue:
        """The channel's own reply queue, while it consumes it."""
        self.token, queue = self.vhost.open_reply_queue()
        return queue

    def release(self, queue: Queue) -> None:
        """The channel's consumer of `queue` is gone: if that was its reply consumer, so is its address."""
        if self.token is not None and queue.name == REPLY_TO:
            self.vhost.close_reply_queue(self.token)
            self.token = None

    def rewrite(self, msg: Message) -> None:
        """reply_to=amq.rabbitmq.reply-to becomes this channel's own reply address."""
        if msg.raw_property(FLAG_REPLY_TO) != _REPLY_TO_RAW:
            return
        if self.token is None:
            raise errors.ChannelError(errors.PRECONDITION_FAILED, "fast reply consumer does not exist", 60, 40)
        address = shortstr(REPLY_TO_PREFIX + self.token)
        msg.header = rewrite_properties(msg.header, msg.size, {FLAG_REPLY_TO: address})
