"""The ready list of a durable FIFO queue whose backlog lives in the store, not in memory.

A message object with its entry costs ~600 bytes; a backlog of a million costs most of a GiB that way, and
restoring one after a restart costs a record read and two objects per message before the broker can accept
a connection. Here only a window at the head is held as entries. Behind it:

- `recovered`: store offsets recovered at start-up, in queue order (sequence numbers counted from
  `first_seq`, as every one of them precedes anything published since);
- `spill`: what was queued after them or after the window filled up, in queue order: persistent messages
  as one int each (`seq << 48 | offset`: the queue dropped its objects, the store has the record), and
  entries that must stay in memory (transient messages, messages the store does not hold for this queue).

When the window runs dry the next batch is read back from the store. Queue uses this exactly like FifoReady.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from amqpd.broker.ready import FifoReady

if TYPE_CHECKING:
    from amqpd.broker.queue import Entry

# offsets, with their sequence numbers and redelivered flags -> the entries of those still readable
Loader = Callable[[list[int], list[int], list[bool]], list["Entry"]]
SEQ_SHIFT = 48  # offsets stay below 2**48 (a store writing a million records a second takes 9 years)
OFFSET_MASK = (1 << SEQ_SHIFT) - 1


class Backlog:
    BATCH = 2_000  # offsets read back per store pass: big enough for a sequential read, small in memory

    def __init__(self, window: FifoReady, load: Loader) -> None:
        self.window = window
        self.recovered: deque[int] = deque()
        self.spill: deque[int | Entry] = deque()
        self._flagged: set[int] | None = set()
        self._next_seq = 0
        self._load = load

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
        """Read the next batch into the window; skip batches that held nothing readable."""
        while not self.window and (self.recovered or self.spill):
            if self.recovered:
                self._fill_recovered()
            else:
                self._fill_spilled()

    def _fill_recovered(self) -> None:
        recovered = self.recovered
        offsets = [recovered.popleft() for _ in range(min(self.BATCH, len(recovered)))]
        seqs = list(range(self._next_seq, self._next_seq + len(offsets)))
        self._next_seq += len(offsets)
        flagged = self._flagged
        flags = [True] * len(offsets) if flagged is None else [o in flagged for o in offsets]
        self.window.extend(self._load(offsets, seqs, flags))

    def _fill_spilled(self) -> None:
        """The next batch of the spill, in order: runs of offsets are read together, entries go as they are."""
        spill, window = self.spill, self.window
        offsets: list[int] = []
        seqs: list[int] = []
        for _ in range(min(self.BATCH, len(spill))):
            item = spill.popleft()
            if isinstance(item, int):
                offsets.append(item & OFFSET_MASK)
                seqs.append(item >> SEQ_SHIFT)
                continue
            if offsets:
                window.extend(self._load(offsets, seqs, [False] * len(offsets)))
                offsets, seqs = [], []
            window.append(item)
        if offsets:
            window.extend(self._load(offsets, seqs, [False] * len(offsets)))

    def flagged_offsets(self) -> list[int]:
        """Recovered offsets not read yet that are to be delivered as redelivered."""
        flagged = self._flagged
        return list(self.recovered) if flagged is None else [o for o in self.recovered if o in flagged]

    def take_stored(self) -> tuple[list[int], list[Entry]]:
        """Empty everything but the window (purge): (the offsets only the store holds, the entries)."""
        offsets = list(self.recovered)
        entries = []
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
        (self.spill if self.recovered or self.spill else self.window).append(entry)

    def popleft(self) -> Entry:
        if not self.window:
            self._fill()
        return self.window.popleft()

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

    def entries(self) -> list[Entry]:
        """The messages held as entries: the window, and those waiting in the spill."""
        return [*self.window, *(item for item in self.spill if not isinstance(item, int))]

    def __len__(self) -> int:
        return len(self.window) + len(self.recovered) + len(self.spill)

    def __bool__(self) -> bool:
        if not self.window and (self.recovered or self.spill):
            self._fill()  # whether a next message exists depends on whether its record is still readable
        return bool(self.window)
