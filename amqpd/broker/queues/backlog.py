"""The ready list of a durable FIFO queue whose backlog lives in the store, not in memory.

A message object with its entry costs ~600 bytes; a backlog of a million costs most of a GiB that way, and
restoring one after a restart costs a record read and two objects per message before the broker can accept
a connection. Here only a window at the head is held as entries. Behind it:

- `recovered`: store offsets recovered at start-up, in queue order (sequence numbers counted from
  `first_seq`, as every one of them precedes anything published since);
- `spill`: what was queued after them or after the window filled up, in queue order: persistent messages
  as one int each (`seq << 48 | offset`: the queue dropped its objects, the store has the record), and
  entries that must stay in memory (transient messages, messages the store does not hold for this queue).

The next batch (BATCH items) is taken off the deques and handed to the `read_ahead` hook, which has a worker
thread read its records' bytes off the disk (the preads release the GIL; the worker does no decoding, which
would hold the GIL against the loop) while the window is delivered: once half the batch in hand is gone, the
batch after it goes out. The records are decoded on the loop in slices of at most SLICE items, each time the
window runs dry, so no single step spends more than a few ms on a refill however deep the backlog.

The window is empty only while nothing is behind it, or while the worker reads what comes next: popleft
refills it when it takes the last entry, from what the worker read, and when that read is not in yet the
window waits for it (the read's arrival refills it). Truthiness never reads: the window's count, or, when it
is empty, whether anything is behind it. A record found unreadable is dropped when its slice is decoded.

A consumer that outruns the worker does not make the loop read: while the next batch is being read,
`would_read` says so and the queue keeps the window's last entry until it is in (a basic.get waits for it
too, Broker.ready_to_get; a failed read is asked of the worker again). Recovery has the worker read
the first batch before it adopts the offsets (adopt's `ahead`). A head dropped over x-max-length while the
next part is being read leaves the window empty and waiting; the drops after it take the items behind the
window as they are (`take_unread`: store offsets, and entries), without reading them. The loop reads the
disk itself only where there is no worker to wait for (no event loop: unit tests), or when a caller takes
the head of a waiting window without asking `would_read` first. Queue uses this exactly like FifoReady.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from amqpd.broker.queues.ready import FifoReady

if TYPE_CHECKING:
    from amqpd.broker.entry import Entry

# offsets, with their sequence numbers and redelivered flags, and what the worker read ahead for them (or None:
# read them now) -> the entries of those still readable
Loader = Callable[[list[int], list[int], list[bool], Any], list["Entry"]]
# store offsets, and what to call on the loop with what a worker thread read of them (opaque to the backlog,
# handed back to the loader and to page_in); False: the read cannot be started (no event loop)
ReadAhead = Callable[[list[int], Callable[[Any], None]], bool]
# an entry whose body was paged out, and what was read ahead: give it its body back if the read has it
PageIn = Callable[["Entry", Any], None]
Unloaded = tuple[list[int], list[int], list[bool]]  # offsets, their sequence numbers, their redelivered flags


class _Batch:
    """The next BATCH items, taken off the deques in queue order: runs of offsets and entries; what a worker
    read of them (`raw`), once in; and how far the window has taken them (`item`, `at`: the next item, the
    next position in it if it is a run)."""

    __slots__ = ("items", "offsets", "raw", "reading", "item", "at", "left")

    def __init__(self) -> None:
        self.items: list[Unloaded | Entry] = []
        self.offsets: list[int] = []  # of its runs, in order
        self.raw: Any = None
        self.reading = False  # a worker thread is reading it
        self.item = 0
        self.at = 0
        self.left = 0  # items not in the window yet

    def take(self, raw: Any) -> None:
        self.raw, self.reading = raw, False

    def to_read(self) -> list[int]:
        """Ascending store offsets to read ahead: its runs' records and the bodies its entries paged out."""
        paged = [e.msg.store_offset for e in self.items if not isinstance(e, tuple) and e.msg.body is None]
        return sorted({*self.offsets, *(o for o in paged if o is not None)}) if paged else self.offsets

    def rest(self) -> list[Unloaded | Entry]:
        """The items not in the window yet, in order (a run taken part-way as its remainder)."""
        if self.item >= len(self.items):
            return []
        head = self.items[self.item]
        if isinstance(head, tuple) and self.at:
            offsets, seqs, flags = head
            head = (offsets[self.at :], seqs[self.at :], flags[self.at :])
        return [head, *self.items[self.item + 1 :]]

    def rest_offsets(self) -> list[int]:
        return [o for item in self.rest() if isinstance(item, tuple) for o in item[0]]

    def rest_entries(self) -> list[Entry]:
        return [item for item in self.rest() if not isinstance(item, tuple)]


SEQ_SHIFT = 48  # offsets stay below 2**48 (a store writing a million records a second takes 9 years)
OFFSET_MASK = (1 << SEQ_SHIFT) - 1


class Backlog:
    BATCH = 2_000  # items per read-ahead: big enough for a sequential read, small in memory
    SLICE = 100  # items decoded into the window per step: a small share of one loop turn

    def __init__(
        self, window: FifoReady, load: Loader, read_ahead: ReadAhead | None = None, page_in: PageIn | None = None
    ) -> None:
        self.window = window
        self.recovered: deque[int] = deque()
        self.spill: deque[int | Entry] = deque()
        self._flagged: set[int] | None = set()
        self._next_seq = 0
        self._load = load
        self._read_ahead = read_ahead
        self._page_in = page_in
        self._current: _Batch | None = None  # being decoded into the window slice by slice
        self._ahead: _Batch | None = None  # the one after it, being read (or read) in a worker thread
        self._refilling = False  # a read-ahead done at once (tests) must not refill from inside a refill

    def adopt(self, offsets: Iterable[int], flagged: set[int] | None, first_seq: int, ahead: Any = None) -> int:
        """Recovery: the queue's messages are these offsets. flagged: offsets to deliver as redelivered, None
        for all of them (after a crash). `ahead`: what a worker read of the first BATCH of them (recovery
        reads it before adopting), else the head's slice is read now. Returns the sequence number after the
        last of them."""
        self.recovered.extend(offsets)
        self._flagged = flagged
        self._next_seq = first_seq
        end = first_seq + len(self.recovered)
        if not self.window:
            if ahead is not None and self._current is None and self._ahead is None and self.recovered:
                self._current = self._take_batch()
                self._current.raw = ahead
            self._refill(now=True)  # the head, read now if it was not read ahead
        return end

    def spill_offset(self, seq: int, offset: int) -> None:
        """A persistent message deep in the backlog: keep only its place; the store keeps the rest."""
        self.spill.append(seq << SEQ_SHIFT | offset)

    def _in_hand(self) -> int:
        """Items taken off the deques, not yet popped: the window and the batches in hand."""
        current, ahead = self._current, self._ahead
        return (
            len(self.window) + (current.left if current is not None else 0) + (ahead.left if ahead is not None else 0)
        )

    # -- refilling -------------------------------------------------------------------------------------

    def _refill(self, now: bool = False) -> None:
        """Decode slices into the empty window until it holds something or nothing is left. The next slice's
        batch still being read by the worker: the window waits for it (_taken refills it), unless `now` (the
        caller takes the head without having waited: the slice is read on the loop)."""
        self._refilling = True
        try:
            while not self.window:
                batch = self._current
                if batch is None or not batch.left:
                    batch = self._next_batch()
                    if batch is None:
                        return
                if not now and batch.reading and batch.raw is None:
                    return
                self._decode_slice(batch)
        finally:
            self._refilling = False

    def _taken(self, batch: _Batch, raw: Any) -> None:
        """What the worker read of `batch` is in: a window that waited for it is refilled from it."""
        batch.take(raw)
        if not self.window and not self._refilling:
            self._refill()

    def _next_batch(self) -> _Batch | None:
        batch, self._ahead = self._ahead, None
        if batch is None:
            if not (self.recovered or self.spill):
                self._current = None
                return None
            batch = self._take_batch()
            self._request(batch)  # a refill waits for it, unless its caller cannot (refill's `now`)
        self._current = batch
        return batch

    def _request(self, batch: _Batch) -> None:
        read_ahead = self._read_ahead
        if read_ahead is None:
            return
        wanted = batch.to_read()
        if not wanted:
            return
        batch.reading = read_ahead(wanted, partial(self._taken, batch))
        if not batch.reading:
            self._read_ahead = None  # no event loop: read when needed

    def _decode_slice(self, batch: _Batch) -> None:
        """At most SLICE of the batch's items into the window: runs decoded from what was read ahead (or read
        now), entries as they are (a paged-out body given back if the read has it)."""
        budget, items, window = self.SLICE, batch.items, self.window
        while budget > 0 and batch.item < len(items):
            item = items[batch.item]
            if isinstance(item, tuple):
                offsets, seqs, flags = item
                a = batch.at
                b = min(a + budget, len(offsets))
                window.extend(self._load(offsets[a:b], seqs[a:b], flags[a:b], batch.raw))
                budget -= b - a
                batch.left -= b - a
                batch.item, batch.at = (batch.item + 1, 0) if b == len(offsets) else (batch.item, b)
                continue
            if item.msg.body is None and batch.raw is not None and self._page_in is not None:
                self._page_in(item, batch.raw)
            window.append(item)
            budget -= 1
            batch.left -= 1
            batch.item += 1

    def _take_batch(self) -> _Batch:
        """The next BATCH items off the deques (recovered offsets first: they precede the spill)."""
        batch = _Batch()
        if self.recovered:
            recovered = self.recovered
            offsets = [recovered.popleft() for _ in range(min(self.BATCH, len(recovered)))]
            seqs = list(range(self._next_seq, self._next_seq + len(offsets)))
            self._next_seq += len(offsets)
            flagged = self._flagged
            flags = [True] * len(offsets) if flagged is None else [o in flagged for o in offsets]
            batch.items.append((offsets, seqs, flags))
            batch.offsets = offsets
            batch.left = len(offsets)
            return batch
        spill = self.spill
        offsets, seqs = [], []
        for _ in range(min(self.BATCH, len(spill))):
            item = spill.popleft()
            if isinstance(item, int):
                offsets.append(item & OFFSET_MASK)
                seqs.append(item >> SEQ_SHIFT)
                continue
            if offsets:
                batch.items.append((offsets, seqs, [False] * len(offsets)))
                batch.offsets += offsets
                offsets, seqs = [], []
            batch.items.append(item)
        if offsets:
            batch.items.append((offsets, seqs, [False] * len(offsets)))
            batch.offsets += offsets
        batch.left = sum(len(i[0]) if isinstance(i, tuple) else 1 for i in batch.items)
        return batch

    def would_read(self) -> bool:
        """Whether taking the head now would read the disk on the loop: the window is empty and waits for the
        worker, or this is its last entry and the next slice is in a batch whose read the worker has not
        finished (asked for now if it was not yet). The queue then keeps that entry until the read is in
        (Queue._read_ahead's done dispatches again). False where there is no worker to wait for: the slice
        is read now."""
        if len(self.window) > 1:
            return False
        batch = self._current
        if batch is None or not batch.left:
            if self._ahead is None:
                if self._read_ahead is None or not (self.recovered or self.spill):
                    return False
                self._maybe_read_ahead()
            batch = self._ahead
        return batch is not None and batch.raw is None and batch.reading

    def waiting(self) -> bool:
        """The window is empty while something is behind it: the worker is reading the next part (a head
        dropped over x-max-length took the window's last entry before it was in)."""
        return not self.window and self._behind()

    def reading(self) -> bool:
        """Whether the worker is reading a batch in hand (what take_unread took may be part of that read)."""
        return any(batch.reading and batch.raw is None for batch in self._batches())

    def _behind(self) -> bool:
        return bool(self.recovered or self.spill) or self._in_hand() > len(self.window)

    def take_unread(self, n: int) -> list[Entry | int]:
        """Up to n items from the head of a waiting window's backlog, in queue order, gone from it without
        being read: the store offsets of the messages only the store holds, and the entries held in memory
        (x-max-length's drop-head while the next part is being read: the drop is at once, the read only
        refills the window). The next part is asked of the worker if it was not yet."""
        taken: list[Entry | int] = []
        for batch in self._batches():
            items = batch.items
            while len(taken) < n and batch.item < len(items):
                item = items[batch.item]
                if isinstance(item, tuple):
                    offsets = item[0]
                    stop = min(len(offsets), batch.at + n - len(taken))
                    taken.extend(offsets[batch.at : stop])
                    batch.left -= stop - batch.at
                    batch.item, batch.at = (batch.item + 1, 0) if stop == len(offsets) else (batch.item, stop)
                else:
                    taken.append(item)
                    batch.left -= 1
                    batch.item += 1
        recovered, spill = self.recovered, self.spill
        while len(taken) < n and recovered:
            taken.append(recovered.popleft())
            self._next_seq += 1  # the sequence numbers of those behind it stay as they were
        while len(taken) < n and spill:
            spilled = spill.popleft()
            taken.append(spilled & OFFSET_MASK if isinstance(spilled, int) else spilled)
        if not self.window:
            self._refill()
        return taken

    def _maybe_read_ahead(self) -> None:
        """Half the batch in hand is gone: take the next one and have it read in a worker thread."""
        batch = self._ahead = self._take_batch()
        self._request(batch)

    # -- what is behind the window -----------------------------------------------------------------------

    def _batches(self) -> list[_Batch]:
        return [b for b in (self._current, self._ahead) if b is not None]

    def queued(self) -> list[Entry | int]:
        """Everything ready, in queue order: entries, and store offsets not read back yet (peek)."""
        items: list[Entry | int] = list(self.window)
        for batch in self._batches():
            for item in batch.rest():
                items.extend(item[0] if isinstance(item, tuple) else [item])
        items.extend(self.recovered)
        items.extend(item & OFFSET_MASK if isinstance(item, int) else item for item in self.spill)
        return items

    def flagged_offsets(self) -> list[int]:
        """Recovered offsets not read yet that are to be delivered as redelivered."""
        flagged = self._flagged
        taken = []  # the batches' recovered offsets carry their flags already
        for batch in self._batches():
            runs = [item for item in batch.rest() if isinstance(item, tuple)]
            taken += [o for offsets, _, flags in runs for o, f in zip(offsets, flags, strict=True) if f]
        return taken + (list(self.recovered) if flagged is None else [o for o in self.recovered if o in flagged])

    def take_stored(self) -> tuple[list[int], list[Entry]]:
        """Empty everything but the window (purge): (the offsets only the store holds, the entries)."""
        offsets = [o for batch in self._batches() for o in batch.rest_offsets()] + list(self.recovered)
        entries = [e for batch in self._batches() for e in batch.rest_entries()]
        self._current = self._ahead = None
        for item in self.spill:
            if isinstance(item, int):
                offsets.append(item & OFFSET_MASK)
            else:
                entries.append(item)
        self.recovered.clear()
        self.spill.clear()
        return offsets, entries

    # -- the FifoReady interface Queue uses ----------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        behind = self.recovered or self.spill or self._in_hand() > len(self.window)
        (self.spill if behind else self.window).append(entry)

    def popleft(self) -> Entry:
        window = self.window
        if not window:
            self._refill(now=True)  # the caller did not wait (would_read): read on the loop
        entry = window.popleft()
        if not window:
            self._refill()  # from what the worker read; else the window waits for it
        if self._ahead is None and self._read_ahead is not None and (self.recovered or self.spill):
            current = self._current
            if len(window) + (current.left if current is not None else 0) <= self.BATCH // 2:
                self._maybe_read_ahead()
        return entry

    def __getitem__(self, index: int) -> Entry:
        if index != 0:
            raise IndexError("only the head is addressable")
        if not self.window:
            self._refill(now=True)  # the caller did not wait (would_read): read on the loop
        return self.window[0]

    def restore(self, back: list[Entry]) -> None:
        # Requeued entries were read before everything behind the window, so they belong in it.
        self.window.restore(back)

    def clear(self) -> None:
        self.window.clear()
        self.recovered.clear()
        self.spill.clear()
        self._current = self._ahead = None

    def entries(self) -> list[Entry]:
        """The messages held as entries: the window, those in the batches in hand and in the spill."""
        in_batches = [e for batch in self._batches() for e in batch.rest_entries()]
        return [*self.window, *in_batches, *(item for item in self.spill if not isinstance(item, int))]

    def __len__(self) -> int:
        return self._in_hand() + len(self.recovered) + len(self.spill)

    def __bool__(self) -> bool:
        # No read, ever: the window is refilled as it empties (popleft), or waits for the worker's read.
        return bool(self.window) or self._behind()
