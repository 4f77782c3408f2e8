"""The ready list of a durable FIFO queue after a restart: the recovered messages stay store offsets until
they come near the head.

Restoring a backlog as Message objects costs a record read, a decode and two objects per message before
the broker can accept a connection (and holds every body in memory until the queue pages it out again).
Here the recovered messages are a deque of offsets: a window at the head is read back from the store in
batches as consumers take messages, and messages published after the restart queue up behind the
recovered ones. Queue uses it exactly like FifoReady.
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


class RecoveredBacklog:
    BATCH = 2_000  # offsets read back per store pass: big enough for a sequential read, small in memory

    def __init__(self, offsets: Iterable[int], flagged: set[int] | None, first_seq: int, load: Loader) -> None:
        """flagged: offsets to mark redelivered, or None for all of them (after a crash)."""
        self.window = FifoReady()
        self.cold: deque[int] = deque(offsets)
        self.behind = FifoReady()  # published after the restart: after every recovered message
        self._flagged = flagged
        self._next_seq = first_seq
        self._load = load

    @property
    def end_seq(self) -> int:
        """The sequence number after the last recovered message: where new messages start."""
        return self._next_seq + len(self.cold)

    def _fill(self) -> None:
        """Read the next batch into the window; skip batches that held nothing readable."""
        while not self.window and self.cold:
            cold = self.cold
            offsets = [cold.popleft() for _ in range(min(self.BATCH, len(cold)))]
            seqs = list(range(self._next_seq, self._next_seq + len(offsets)))
            self._next_seq += len(offsets)
            flagged = self._flagged
            flags = [True] * len(offsets) if flagged is None else [o in flagged for o in offsets]
            self.window.extend(self._load(offsets, seqs, flags))
        if not self.cold and self.behind:
            self.window.extend(self.behind)
            self.behind.clear()

    def cold_offsets(self) -> tuple[list[int], list[int]]:
        """(offsets not read yet, those of them flagged redelivered)."""
        cold = list(self.cold)
        flagged = self._flagged
        return cold, cold if flagged is None else [o for o in cold if o in flagged]

    def take_cold(self) -> list[int]:
        """Remove the offsets not read yet (purge): the caller tells the store."""
        taken = list(self.cold)
        self.cold.clear()
        if self.behind:
            self.window.extend(self.behind)
            self.behind.clear()
        return taken

    # -- the FifoReady interface Queue uses ----------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        (self.behind if self.cold else self.window).append(entry)

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
        # Requeued entries were read before everything still cold, so they belong in the window.
        self.window.restore(back)

    def clear(self) -> None:
        self.window.clear()
        self.cold.clear()
        self.behind.clear()

    def entries(self) -> list[Entry]:
        """The messages held as entries (the window and what queued behind the recovered ones)."""
        return [*self.window, *self.behind]

    def __len__(self) -> int:
        return len(self.window) + len(self.cold) + len(self.behind)

    def __bool__(self) -> bool:
        if not self.window and self.cold:
            self._fill()  # whether a next message exists depends on whether its record is still readable
        return bool(self.window or self.behind)
