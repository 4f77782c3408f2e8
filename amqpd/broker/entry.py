"""A message's place in one queue (a leaf module: queues, channels, backlogs and dead-lettering all hold entries)."""

from __future__ import annotations

from amqpd.broker.message import Message


class Entry:
    """A message's place in one queue: its sequence number keeps the original position on requeue."""

    __slots__ = ("msg", "seq", "redelivered", "expires_at", "returns")

    def __init__(self, msg: Message, seq: int, expires_at: int | None) -> None:
        self.msg = msg
        self.seq = seq
        self.redelivered = False
        self.expires_at = expires_at
        self.returns = 0  # times it went back to the queue unacked: a quorum queue's x-delivery-count
