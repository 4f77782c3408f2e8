"""A channel's deliveries awaiting ack, and the one owner of every unacked count.

Three counts follow the same deliveries: the channel's (its global prefetch), each consumer's (its prefetch)
and each queue's (messages_unacknowledged). Only Outstanding changes them, when a delivery is made (add,
add_many) and when it is settled, requeued or rejected (release); taking tags out of the table (an ack
held by a transaction) does not release them.

Deliveries are held as ranges (Unacked): consecutive tags of one queue and one consumer, delivered at one
clock reading, share one entry. A consumer that keeps up gets its deliveries in batches and acks them with
multiple-acks, so a delivery and its ack cost an entry per batch rather than one per message; an ack of a
single tag inside a range splits it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqpd.broker.consumer import Consumer
    from amqpd.broker.entry import Entry
    from amqpd.broker.queue import Queue


# Most deliveries add() joins into one range: an ack inside a range copies the part before it, so ranges stay
# short enough for a client acking one by one out of order (the queue hands out at most 256 at once anyway).
RANGE_MAX = 256


class Unacked:
    """Deliveries with tags first .. first + len(entries) - 1, in order, of one queue to one consumer (None:
    basic.get), made when the broker's clock read `at`."""

    __slots__ = ("first", "queue", "entries", "consumer", "at")

    def __init__(self, first: int, queue: Queue, entries: list[Entry], consumer: Consumer | None, at: float) -> None:
        self.first = first
        self.queue = queue
        self.entries = entries
        self.consumer = consumer
        self.at = at

    @property
    def last(self) -> int:
        return self.first + len(self.entries) - 1

    def tags(self) -> range:
        return range(self.first, self.first + len(self.entries))

    def split_off(self, upto: int) -> Unacked:
        """The part with tags up to `upto` (inside the range) leaves as a range of its own; this keeps the rest."""
        k = upto - self.first + 1
        taken = Unacked(self.first, self.queue, self.entries[:k], self.consumer, self.at)
        del self.entries[:k]
        self.first = upto + 1
        return taken

    def __repr__(self) -> str:
        return f"<Unacked {self.first}..{self.last} {self.queue!r}>"


class Outstanding:
    """Unacked ranges in tag order, found by their last tag; `count`: deliveries made to consumers (basic.get's
    are not), len(): every unacked tag."""

    __slots__ = ("count", "_by_last", "_lasts", "_head", "_size")

    def __init__(self) -> None:
        self.count = 0
        self._by_last: dict[int, Unacked] = {}
        self._lasts: list[int] = []  # the ranges' last tags, ascending; those before _head are gone
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

    def ranges(self) -> list[Unacked]:
        return [self._by_last[last] for last in self._lasts[self._head :]]

    # -- deliveries made ------------------------------------------------------------------------------------

    def add(self, tag: int, queue: Queue, entry: Entry, consumer: Consumer | None, at: float) -> None:
        """One delivery, tag above every outstanding one: it extends the last range when it follows on."""
        queue.unacked += 1
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
            and len(last.entries) < RANGE_MAX
        ):
            last.entries.append(entry)
            self._by_last[tag] = self._by_last.pop(tag - 1)
            self._lasts[-1] = tag
            return
        self._append(Unacked(tag, queue, [entry], consumer, at))

    def add_many(self, first_tag: int, queue: Queue, entries: list[Entry], consumer: Consumer, at: float) -> None:
        """Deliveries with consecutive tags from first_tag on, above every outstanding one; `entries` is kept."""
        n = len(entries)
        queue.unacked += n
        consumer.unacked += n
        self.count += n
        self._size += n
        self._append(Unacked(first_tag, queue, entries, consumer, at))

    def _append(self, run: Unacked) -> None:
        last = run.last
        self._by_last[last] = run
        self._lasts.append(last)

    # -- taken out for settling -----------------------------------------------------------------------------

    def take(self, tag: int) -> list[Unacked] | None:
        """The one delivery with this tag, out of the table; None when it is not outstanding."""
        i = bisect_left(self._lasts, tag, self._head)
        if i == len(self._lasts):
            return None
        last = self._lasts[i]
        run = self._by_last[last]
        if tag < run.first:
            return None
        self._size -= 1
        if run.first == last:  # a range of one
            self._drop(i)
            return [run]
        if tag == run.first:
            return [run.split_off(tag)]
        entry = run.entries[tag - run.first]
        if tag == last:
            run.entries.pop()
            del self._by_last[last]
            self._by_last[last - 1] = run
            self._lasts[i] = last - 1
        else:  # inside: the part before it becomes a range of its own
            before = run.split_off(tag - 1)
            del run.entries[0]
            run.first = tag + 1
            self._by_last[tag - 1] = before
            self._lasts.insert(i, tag - 1)
        return [Unacked(tag, run.queue, [entry], run.consumer, run.at)]

    def take_upto(self, tag: int, must_hold: bool = True) -> list[Unacked] | None:
        """Every delivery with a tag up to this one, out of the table, in tag order; None when this tag is not
        outstanding (basic.ack multiple names an outstanding tag) unless must_hold is false (the tag is a
        stream's, held in the channel's tag runs)."""
        lasts, head = self._lasts, self._head
        i = bisect_left(lasts, tag, head)
        holds = i < len(lasts) and tag >= self._by_last[lasts[i]].first
        if not holds and must_hold:
            return None
        whole = i + 1 if holds and lasts[i] == tag else i
        taken = [self._by_last.pop(last) for last in lasts[head:whole]]
        self._head = whole
        if holds and whole == i:  # the range holding the tag goes on after it
            taken.append(self._by_last[lasts[i]].split_off(tag))
        self._size -= sum(len(run.entries) for run in taken)
        self._compact()
        return taken

    def take_all(self) -> list[Unacked]:
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
        """Forget the gone front of _lasts once it is most of the list (amortised O(1) per range)."""
        if self._head > 32 and self._head * 2 > len(self._lasts):
            del self._lasts[: self._head]
            self._head = 0

    def oldest_at(self) -> float | None:
        """When the oldest unacked delivery was made (ranges are in tag order, so in delivery order)."""
        if not self._size:
            return None
        return self._by_last[self._lasts[self._head]].at

    # -- settled ----------------------------------------------------------------------------------------------

    def release(self, queue: Queue, consumer: Consumer | None, n: int = 1) -> None:
        """n deliveries taken out before are settled: they no longer count anywhere."""
        queue.unacked -= n
        if consumer is not None:
            consumer.unacked -= n
            self.count -= n

    def count_run(self, queue: Queue, consumer: Consumer, n: int) -> None:
        """n deliveries to a consumer kept as one run outside this table (stream_unacked.py) were made, or
        (n < 0) released: they count here all the same."""
        queue.unacked += n
        consumer.unacked += n
        self.count += n

    def restore(self, taken: list[Unacked]) -> None:
        """Deliveries taken out but not released (a transaction's acks, rolled back or abandoned) are back,
        in tag order."""
        runs = sorted([*self.ranges(), *taken], key=lambda run: run.first)
        self.take_all()
        for run in runs:
            self._append(run)
            self._size += len(run.entries)
