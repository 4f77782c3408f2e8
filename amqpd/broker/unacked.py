"""A channel's deliveries awaiting ack, and the one owner of every unacked count.

Three counts follow the same deliveries: the channel's (its global prefetch), each consumer's (its prefetch)
and each queue's (messages_unacknowledged). Only Outstanding changes them, when a delivery is made (add,
add_many) and when it is settled, requeued or rejected (release); taking a tag out of the table (an ack
held by a transaction) does not release it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqpd.broker.consumer import Consumer
    from amqpd.broker.entry import Entry
    from amqpd.broker.queue import Queue

Unacked = tuple["Queue", "Entry", "Consumer | None", float]  # ..., when it was delivered (Broker.clock)


class Outstanding(dict[int, Unacked]):
    """Delivery tag -> Unacked, in tag order; `count`: those made to consumers (basic.get's are not)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def add(self, tag: int, queue: Queue, entry: Entry, consumer: Consumer | None, at: float) -> None:
        self[tag] = (queue, entry, consumer, at)
        queue.unacked += 1
        if consumer is not None:
            consumer.unacked += 1
            self.count += 1

    def add_many(self, first_tag: int, queue: Queue, entries: list[Entry], consumer: Consumer, at: float) -> None:
        for tag, entry in enumerate(entries, first_tag):
            self[tag] = (queue, entry, consumer, at)
        n = len(entries)
        queue.unacked += n
        consumer.unacked += n
        self.count += n

    def release(self, queue: Queue, consumer: Consumer | None) -> None:
        """One delivery taken out before is settled: it no longer counts anywhere."""
        queue.unacked -= 1
        if consumer is not None:
            consumer.unacked -= 1
            self.count -= 1

    def count_run(self, queue: Queue, consumer: Consumer, n: int) -> None:
        """n deliveries to a consumer kept as one run outside this table (stream_unacked.py) were made, or
        (n < 0) released: they count here all the same."""
        queue.unacked += n
        consumer.unacked += n
        self.count += n

    def restore(self, taken: list[tuple[int, Unacked]]) -> None:
        """Deliveries taken out but not released (a transaction's acks, rolled back or abandoned) are back,
        in tag order."""
        items = sorted([*self.items(), *taken])
        self.clear()
        self.update(items)
