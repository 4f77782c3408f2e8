"""A channel's deliveries awaiting ack, and the one owner of every unacked count.

Three counts follow the same deliveries: the channel's (its global prefetch), each consumer's (its prefetch)
and each queue's (messages_unacknowledged, and their body bytes, message_bytes_unacknowledged, so that the
management API reads them per queue instead of walking every channel's table). Only Outstanding changes them,
when a delivery is made (add, add_many, add_run) and when it is settled, requeued or rejected (release);
taking tags out of the table (an ack held by a transaction) does not release them.

Deliveries are held as runs: consecutive tags of one queue and one consumer, delivered at one clock reading,
share one entry. A consumer that keeps up gets its deliveries in batches and acks them with multiple-acks, so
a delivery and its ack cost an entry per batch rather than one per message; an ack of a single tag inside a
run splits it. The table finds, takes, splits and restores runs whatever they hold; what a delivery is and
what settling it does is the run's own part: a queue's entries (QueueRun, here), or a stream's offsets and the
cursor that an ack moves along (StreamRun, streams/cursor.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sized
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

if TYPE_CHECKING:
    from amqpd.broker.delivery.consumer import Consumer
    from amqpd.broker.entry import Entry
    from amqpd.broker.queues.queue import Queue


# Most deliveries add() joins into one run: an ack inside a run copies the part before it, so runs stay short
# enough for a client acking one by one out of order (the queue hands out at most 256 at once anyway).
RANGE_MAX = 256
Items = TypeVar("Items", bound=Sized)  # a queue's list of entries, a stream's range or list of offsets


class Run(Generic[Items]):
    """Deliveries with tags first .. first + len(items) - 1, in order, of one queue to one consumer (None:
    basic.get), made when the broker's clock read `at`; items[i] is what went out with tag first + i."""

    __slots__ = ("first", "items", "queue", "consumer", "at")

    def __init__(self, first: int, items: Items, queue: Queue, consumer: Consumer | None, at: float) -> None:
        self.first = first
        self.items = items
        self.queue = queue
        self.consumer = consumer
        self.at = at

    @property
    def last(self) -> int:
        return self.first + len(self.items) - 1

    def tags(self) -> range:
        return range(self.first, self.first + len(self.items))

    # -- what differs by kind: how items are cut (in place where they can be), what settling does ----------

    def split_off(self, upto: int) -> Self:
        """The part with tags up to `upto` (inside the run) leaves as a run of its own; this keeps the rest
        (the same object: the table holds it under its last tag)."""
        raise NotImplementedError

    def split_last(self) -> Self:
        """The delivery with the last tag leaves as a run of its own; this keeps the rest."""
        raise NotImplementedError

    def held_bytes(self) -> int:
        """The body bytes these deliveries hold in the broker's memory or queue store (a stream's stay in its
        log: none)."""
        return 0

    def acked(self) -> None:
        """The deliveries were acked (their counts are released by the channel)."""
        raise NotImplementedError

    def give_back(self, requeue: bool, into: dict[Queue, list[Entry]]) -> None:
        """The deliveries were nacked, rejected or left unacked by a closing channel: what goes back to its
        queue is added to `into` (requeued together, per queue, by the channel)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.first}..{self.last} {self.queue!r}>"


class QueueRun(Run["list[Entry]"]):
    """A queue's deliveries: items are its entries, which an ack removes and a nack requeues or drops."""

    __slots__ = ()

    def split_off(self, upto: int) -> QueueRun:
        k = upto - self.first + 1
        entries = self.items
        taken = QueueRun(self.first, entries[:k], self.queue, self.consumer, self.at)
        del entries[:k]  # in place: a single ack at the front of a run costs no copy of the rest
        self.first = upto + 1
        return taken

    def split_last(self) -> QueueRun:
        entries = self.items  # its last tag is read before the pop: arguments go left to right
        return QueueRun(self.first + len(entries) - 1, [entries.pop()], self.queue, self.consumer, self.at)

    def held_bytes(self) -> int:
        entries = self.items
        return entries[0].msg.size if len(entries) == 1 else sum([e.msg.size for e in entries])

    def acked(self) -> None:
        self.queue.hooks.settled_many(self.queue, self.items)

    def give_back(self, requeue: bool, into: dict[Queue, list[Entry]]) -> None:
        queue = self.queue
        if requeue and not queue.deleted:
            into.setdefault(queue, []).extend(self.items)
            return
        for entry in self.items:
            queue.hooks.dropped(queue, entry, "rejected")


class Outstanding:
    """Unacked runs in tag order, found by their last tag; `count`: deliveries made to consumers (basic.get's
    are not), len(): every unacked tag."""

    __slots__ = ("count", "on_first", "_by_last", "_lasts", "_head", "_size")

    def __init__(self) -> None:
        self.count = 0
        # called when a delivery goes into an empty table: the ack-timeout check watches only such channels
        self.on_first: Callable[[], None] | None = None
        self._by_last: dict[int, Run[Any]] = {}
        self._lasts: list[int] = []  # the runs' last tags, ascending; those before _head are gone
        self._head = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[int]:
        """Every unacked tag, in order."""
        for last in self._lasts[self._head :]:
            yield from self._by_last[last].tags()

    def ranges(self) -> list[Run[Any]]:
        return [self._by_last[last] for last in self._lasts[self._head :]]

    # -- deliveries made ------------------------------------------------------------------------------------

    def add(self, tag: int, queue: Queue, entry: Entry, consumer: Consumer | None, at: float) -> None:
        """One delivery, tag above every outstanding one: it extends the last run when it follows on."""
        queue.unacked += 1
        queue.unacked_bytes += entry.msg.size
        if consumer is not None:
            consumer.unacked += 1
            self.count += 1
        self._size += 1
        last = self._by_last.get(tag - 1)
        if (
            last is not None
            and last.queue is queue
            and last.consumer is consumer
            and last.at == at
            and len(last.items) < RANGE_MAX
            and type(last) is QueueRun  # a stream's run holds offsets: it never grows by an entry
        ):
            last.items.append(entry)
            self._by_last[tag] = self._by_last.pop(tag - 1)
            self._lasts[-1] = tag
            return
        self._append(QueueRun(tag, [entry], queue, consumer, at))

    def add_many(self, first_tag: int, queue: Queue, entries: list[Entry], consumer: Consumer, at: float) -> None:
        """Deliveries with consecutive tags from first_tag on, above every outstanding one; `entries` is kept."""
        self.add_run(QueueRun(first_tag, entries, queue, consumer, at))

    def add_run(self, run: Run[Any]) -> None:
        """Deliveries as one run, its tags above every outstanding one."""
        n = len(run.items)
        queue = run.queue
        queue.unacked += n
        queue.unacked_bytes += run.held_bytes()
        consumer = run.consumer
        if consumer is not None:
            consumer.unacked += n
            self.count += n
        self._size += n
        self._append(run)

    def _append(self, run: Run[Any]) -> None:
        if not self._by_last and self.on_first is not None:
            self.on_first()
        last = run.last
        self._by_last[last] = run
        self._lasts.append(last)

    # -- taken out for settling -----------------------------------------------------------------------------

    def take(self, tag: int) -> list[Run[Any]] | None:
        """The one delivery with this tag, out of the table; None when it is not outstanding."""
        lasts = self._lasts
        i = bisect_left(lasts, tag, self._head)
        if i == len(lasts):
            return None
        last = lasts[i]
        run = self._by_last[last]
        if tag < run.first:
            return None
        self._size -= 1
        if tag == run.first:
            if tag == last:  # a run of one
                self._drop(i)
                return [run]
            return [run.split_off(tag)]
        if tag == last:  # the run goes on without it, known by its new last tag
            one = run.split_last()
            del self._by_last[last]
            self._by_last[tag - 1] = run
            lasts[i] = tag - 1
            return [one]
        # inside: the part before it becomes a run of its own
        self._by_last[tag - 1] = run.split_off(tag - 1)
        lasts.insert(i, tag - 1)
        return [run.split_off(tag)]

    def take_upto(self, tag: int) -> list[Run[Any]] | None:
        """Every delivery with a tag up to this one, out of the table, in tag order; None when this tag is not
        outstanding (basic.ack multiple names an outstanding tag)."""
        lasts, head = self._lasts, self._head
        i = bisect_left(lasts, tag, head)
        if i == len(lasts) or tag < self._by_last[lasts[i]].first:
            return None
        whole = i + 1 if lasts[i] == tag else i
        taken = [self._by_last.pop(last) for last in lasts[head:whole]]
        self._head = whole
        if whole == i:  # the run holding the tag goes on after it
            taken.append(self._by_last[lasts[i]].split_off(tag))
        self._size -= taken_count(taken)
        self._compact()
        return taken

    def take_all(self) -> list[Run[Any]]:
        taken = self.ranges()
        self._by_last.clear()
        self._lasts.clear()
        self._head = self._size = 0
        return taken

    def _drop(self, i: int) -> None:
        del self._by_last[self._lasts[i]]
        if i == self._head:
            self._head += 1
            self._compact()
        else:
            del self._lasts[i]

    def _compact(self) -> None:
        """Forget the gone front of _lasts once it is most of the list (amortised O(1) per run)."""
        if self._head > 32 and self._head * 2 > len(self._lasts):
            del self._lasts[: self._head]
            self._head = 0

    def oldest_at(self) -> float | None:
        """When the oldest unacked delivery was made (runs are in tag order, so in delivery order)."""
        if not self._size:
            return None
        return self._by_last[self._lasts[self._head]].at

    # -- settled ----------------------------------------------------------------------------------------------

    def release(self, run: Run[Any]) -> None:
        """The deliveries of a run taken out before are settled: they no longer count anywhere."""
        n = len(run.items)
        queue, consumer = run.queue, run.consumer
        queue.unacked -= n
        queue.unacked_bytes -= run.held_bytes()
        if consumer is not None:
            consumer.unacked -= n
            self.count -= n

    def restore(self, taken: list[Run[Any]]) -> None:
        """Deliveries taken out but not released (a transaction's acks, rolled back or abandoned) are back,
        in tag order."""
        runs = sorted([*self.ranges(), *taken], key=lambda run: run.first)
        self.take_all()
        for run in runs:
            self._append(run)
            self._size += len(run.items)


def taken_count(taken: list[Run[Any]]) -> int:
    """How many deliveries what Deliveries.collect took holds (a run holds several)."""
    return sum(len(run.items) for run in taken)
