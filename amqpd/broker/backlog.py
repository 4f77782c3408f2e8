"""The ready list of a durable FIFO queue whose backlog lives in the store, not in memory.

A message object with its entry costs ~600 bytes; a backlog of a million costs most of a GiB that way, and
restoring one after a restart costs a record read and two objects per message before the broker can accept
a connection. Here only a window at the head is held as entries. Behind it:

- `recovered`: store offsets recovered at start-up, in queue order (sequence numbers counted from
  `first_seq`, as every one of them precedes anything published since);
- `spill`: what was queued after them or after the window filled up, in queue order: persistent messages
  as one int each (`seq << 48 | offset`: the queue dropped its objects, the store has the record), and
  entries that must stay in memory (transient messages, messages the store does not hold for this queue).

When the window runs dry the next batch is read back from the store. With a `read_ahead` hook, the batch
after the window is taken off the deques once the window is half gone and handed to the hook while the
window is delivered: the broker's hook has the kernel read its file stretches into the page cache (a hook
may also hand the records back, and the refill then builds the entries from them); the refill reads
whatever it was not given. Queue uses this exactly like FifoReady.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from amqpd.broker.ready import FifoReady

if TYPE_CHECKING:
    from amqpd.broker.queue import Entry

# offsets, with their sequence numbers, redelivered flags and (if read ahead) records -> the entries of those
# still readable
Loader = Callable[[list[int], list[int], list[bool], "list[Any] | None"], list["Entry"]]
# offsets, and what to call on the loop with their records once a worker thread has read them; False: the
# read cannot be started (no event loop), the refill will read synchronously
ReadAhead = Callable[[list[int], Callable[[list[Any]], None]], bool]


class _Batch:
    """The next batch, taken off the deques in queue order: runs of offsets (with their sequence numbers
    and flags) and entries, and the records of all its offsets once read ahead."""

    __slots__ = ("items", "offsets", "records")

    def __init__(self) -> None:
        self.items: list[tuple[list[int], list[int], list[bool]] | Entry] = []
        self.offsets: list[int] = []
        self.records: dict[int, Any] | None = None

    def take(self, records: list[Any]) -> None:
        self.records = dict(zip(self.offsets, records, strict=True))


SEQ_SHIFT = 48  # offsets stay below 2**48 (a store writing a million records a second takes 9 years)
OFFSET_MASK = (1 << SEQ_SHIFT) - 1


class Backlog:
    BATCH = 2_000  # offsets read back per store pass: big enough for a sequential read, small in memory

    def __init__(self, window: FifoReady, load: Loader, read_ahead: ReadAhead | None = None) -> None:
        self.window = window
        self.recovered: deque[int] = deque()
        self.spill: deque[int | Entry] = deque()
        self._flagged: set[int] | None = set()
        self._next_seq = 0
        self._load = load
        self._read_ahead = read_ahead
        self._ahead: _Batch | None = None  # taken off the deques, being read (or read) in a worker thread

    def adopt(self, offsets: Iterable[int], flagged: set[int] | None, first_seq: int) -> int:
        """Recovery: the queue's messages are these offsets. flagged: offsets to deliver as redelivered, None
        for all of them (after a crash). Returns the sequence number after the last of them."""
        self.recovered.extend(offsets)
        self._flagged = flagged
        self._next_seq = first_seq
        return first_seq + len(self.recovered)

    def spill_offset(self, seq: int, offset: int) -> None:
        """A persistent message deep in the backlog: keep only its place; the store keeps the rest."""
        self.spill.append(seq << SEQ_SHIFT | offset)

    def _fill(self) -> None:
        """Load the next batch into the window; skip batches that held nothing readable."""
        while not self.window and (self._ahead is not None or self.recovered or self.spill):
            batch, self._ahead = self._ahead, None
            self._apply(batch if batch is not None else self._take_batch())

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
        return batch

    def _apply(self, batch: _Batch) -> None:
        """The batch's entries into the window: runs of offsets loaded (from the records read ahead, if
        they are in), entries as they are."""
        window, records = self.window, batch.records
        for item in batch.items:
            if isinstance(item, tuple):
                offsets, seqs, flags = item
                read = [records[o] for o in offsets] if records is not None else None
                window.extend(self._load(offsets, seqs, flags, read))
            else:
                window.append(item)

    def _maybe_read_ahead(self) -> None:
        """Half the window is gone: take the next batch and have its records read in a worker thread."""
        if not (self.recovered or self.spill):
            return
        read_ahead = self._read_ahead
        assert read_ahead is not None
        batch = self._ahead = self._take_batch()
        if batch.offsets and not read_ahead(list(batch.offsets), batch.take):
            self._read_ahead = None  # no event loop: read when needed, as without read-ahead

    def _ahead_offsets(self) -> list[int]:
        return [] if self._ahead is None else self._ahead.offsets

    def _ahead_entries(self) -> list[Entry]:
        return [] if self._ahead is None else [i for i in self._ahead.items if not isinstance(i, tuple)]

    def flagged_offsets(self) -> list[int]:
        """Recovered offsets not read yet that are to be delivered as redelivered."""
        flagged = self._flagged
        ahead = []
        if self._ahead is not None:  # its recovered offsets carry their flags already
            runs = [item for item in self._ahead.items if isinstance(item, tuple)]
            ahead = [o for offsets, _, flags in runs for o, f in zip(offsets, flags, strict=True) if f]
        return ahead + (list(self.recovered) if flagged is None else [o for o in self.recovered if o in flagged])

    def take_stored(self) -> tuple[list[int], list[Entry]]:
        """Empty everything but the window (purge): (the offsets only the store holds, the entries)."""
        offsets = self._ahead_offsets() + list(self.recovered)
        entries = self._ahead_entries()
        self._ahead = None
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
        behind = self.recovered or self.spill or self._ahead is not None
        (self.spill if behind else self.window).append(entry)

    def popleft(self) -> Entry:
        window = self.window
        if not window:
            self._fill()
        entry = window.popleft()
        if self._read_ahead is not None and self._ahead is None and len(window) <= self.BATCH // 2:
            self._maybe_read_ahead()
        return entry

    def __getitem__(self, index: int) -> Entry:
        if index != 0:
            raise IndexError("only the head is addressable")
        if not self.window:
            self._fill()
        return self.window[0]

    def restore(self, back: list[Entry]) -> None:
        # Requeued entries were read before everything behind the window, so they belong in it.
        self.window.restore(back)

    def clear(self) -> None:
        self.window.clear()
        self.recovered.clear()
        self.spill.clear()
        self._ahead = None

    def entries(self) -> list[Entry]:
        """The messages held as entries: the window, the batch read ahead, and those waiting in the spill."""
        return [*self.window, *self._ahead_entries(), *(item for item in self.spill if not isinstance(item, int))]

    def __len__(self) -> int:
        ahead = 0 if self._ahead is None else len(self._ahead.offsets) + len(self._ahead_entries())
        return len(self.window) + ahead + len(self.recovered) + len(self.spill)

    def __bool__(self) -> bool:
        if not self.window and (self._ahead is not None or self.recovered or self.spill):
            self._fill()  # whether a next message exists depends on whether its record is still readable
        return bool(self.window)
