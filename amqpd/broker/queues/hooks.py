"""What a queue tells the outside world, and what it asks of it (a leaf module: the broker implements it, queues
and vhosts take it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.queues.flow import TurnClock

if TYPE_CHECKING:
    from amqpd.broker.queues.queue import Queue


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class QueueHooks:
    """What a queue tells the outside world; the vhost wires these to the store and dead-lettering."""

    def dropped(self, queue: Queue, entry: Entry, reason: str) -> None:  # expired, maxlen, rejected
        """A message left the queue without being acked by a consumer."""

    def settled(self, queue: Queue, entry: Entry) -> None:
        """A message was acked (or delivered with no-ack): the queue needs it no more."""

    def settled_many(self, queue: Queue, entries: list[Entry]) -> None:
        """settled() for each of these (a multiple-ack's range): a hook with nothing to do for a queue says so once."""
        for entry in entries:
            self.settled(queue, entry)

    def unused(self, queue: Queue) -> None:
        """x-expires ran out: the queue should be deleted."""

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Any:
        """Run callback later on the broker's loop; returns a handle with cancel()."""
        return None

    def load(self, queue: Queue, offsets: list[int], ahead: Any = None) -> list[Message | None]:
        """Messages for store offsets (None: no longer readable), from `ahead` (what read_ahead read) where it
        has them, else read from the store now."""
        return [None] * len(offsets)

    def read_ahead(self, queue: Queue, offsets: list[int], done: Callable[[Any], None]) -> bool:
        """Start reading these offsets' records in a worker thread; `done(ahead)` on the loop when they are
        in. False: not possible here (load() will read them when needed)."""
        return False

    def page_in(self, queue: Queue, msg: Message, ahead: Any) -> None:
        """Give a paged-out message its body back from what read_ahead read, if it has it."""

    def forget(self, queue: Queue, offsets: list[int]) -> None:
        """Recovered messages that were never read back left the queue (purge)."""

    def created(self, vhost: str, obj: Any) -> None:
        """A queue or exchange was declared: the policies that match apply to it."""

    def counted(self, queue: Queue, entry: Entry, count: int) -> None:
        """A message goes back to a queue that counts deliveries: its new count should survive a restart."""

    def now_ms(self) -> int:
        """The wall clock in ms (TTL), injected so that tests can move it."""
        return wall_clock_ms()

    def turn_clock(self) -> TurnClock:
        """The event loop's turns (flow.py: consumer pace); a queue on its own gets a clock nobody moves."""
        return TurnClock()
