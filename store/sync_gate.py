"""Reads give way to fsyncs: the store's confirms wait on its fsyncs, and an fsync queued on the disk behind a
large read (a stream replayed from a cold cache) waits for that read, so a replay multiplied publishers' confirm
latency (bench.loop_reads). A read piece asked for while fsyncs are under way waits until those have returned;
fsyncs begun after it do not hold it, so reads keep going under any commit rate."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Longest a read waits for the fsyncs ahead of it: a stuck disk must not stop reads outright.
GIVE_WAY_MAX_SECONDS = 0.25


class SyncGate:
    """Fsyncs under way (`syncing`) and the reads that give way to them (`give_way`), across threads."""

    __slots__ = ("_changed", "_next", "_pending", "waiting")

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next = 0  # ticket of the next fsync
        self._pending: set[int] = set()  # tickets of the fsyncs under way
        self.waiting = 0  # reads giving way now (for tests)

    @contextmanager
    def syncing(self) -> Iterator[None]:
        with self._changed:
            ticket = self._next
            self._next += 1
            self._pending.add(ticket)
        try:
            yield
        finally:
            with self._changed:
                self._pending.discard(ticket)
                self._changed.notify_all()

    def give_way(self) -> None:
        """Return once the fsyncs under way now have returned (or after GIVE_WAY_MAX_SECONDS)."""
        if not self._pending:  # the common case, without the lock (a set's truth is read atomically)
            return
        with self._changed:
            ahead = self._next
            self.waiting += 1
            try:
                self._changed.wait_for(lambda: not self._pending or min(self._pending) >= ahead, GIVE_WAY_MAX_SECONDS)
            finally:
                self.waiting -= 1
