"""A consumer: a queue subscription on a channel, with its own prefetch limit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from amqpd.protocol.fastpath import shortstr

if TYPE_CHECKING:
    from amqpd.broker.entry import Entry
    from amqpd.broker.queues.queue import Queue


class Outlet(Protocol):
    """Where a consumer's deliveries go out: its channel (session/channel.py), as the broker sees it."""

    id: int
    last_tag: int
    conn: Any  # frame_max and send(), for the stream replay's pre-encoded batches
    broker: Any  # its coarse clock, which stamps unacked runs

    def can_deliver(self) -> bool: ...

    def can_deliver_acked(self) -> bool: ...

    def prefetch_room(self) -> int: ...

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None: ...

    def deliver_batch(self, consumer: Consumer, queue: Queue, entries: list[Entry]) -> None: ...

    def deliver_many(self, consumer: Consumer, queue: Queue, entries: list[Entry]) -> None: ...

    def deliver_parts(
        self, consumer: Consumer, queue: Queue, entry: Entry, body: list[bytes], records: int
    ) -> None: ...

    def deliver_encoded_run(self, queue: Queue, run: Any, pieces: list[bytes | memoryview]) -> None: ...

    def deliver_run(self, consumer: Consumer, route: bytes, header: bytes, bodies: list[bytes]) -> None: ...
    def deliver_each(self, consumer: Consumer, route: bytes, headers: list[bytes], bodies: list[bytes]) -> None: ...

    def cancel_by_server(self, consumer: Consumer) -> None: ...


class Consumer:
    __slots__ = (
        "tag",
        "ctag",
        "channel",
        "queue",
        "no_ack",
        "exclusive",
        "prefetch",
        "unacked",
        "priority",
        "arguments",
    )

    def __init__(
        self,
        tag: str,
        channel: Outlet,
        queue: Queue,
        *,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        priority: int = 0,
        arguments: dict | None = None,
    ) -> None:
        self.tag = tag
        self.ctag = shortstr(tag)  # encoded once: every basic.deliver carries it
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch  # 0: unlimited
        self.unacked = 0
        self.priority = priority
        self.arguments = arguments or {}

    def can_accept(self) -> bool:
        if self.no_ack:
            return self.channel.can_deliver()
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.can_deliver_acked()

    def room(self) -> int:
        """can_accept() as a count: the prefetch left to this consumer and to its channel (basic.qos global)."""
        if self.no_ack:
            return UNLIMITED if self.channel.can_deliver() else 0
        if not self.channel.can_deliver_acked():
            return 0
        room = self.channel.prefetch_room()
        if self.prefetch:
            room = min(room, self.prefetch - self.unacked)
        return max(room, 0)

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.channel.deliver(self, queue, entry)

    def deliver_many(self, queue: Queue, entries: list[Entry]) -> None:
        self.channel.deliver_batch(self, queue, entries)


UNLIMITED = 1 << 30  # room() without a prefetch limit
