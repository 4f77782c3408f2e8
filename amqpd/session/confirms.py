"""A channel's publisher confirms: its sequence numbers, those still waiting for the store, the nacks, and the one
basic.ack(multiple) per loop turn that settles everything confirmed in order.

A publish waits only for what RabbitMQ waits for (the fsync of a stored message): `durable` gives the store its
callback, `group` does the same for publishes stored in one append. The connection hears of every change to the
count still waiting (`unconfirmed_changed`: it stops reading from a client too far ahead) and of every settled
publish (`confirms_pending`: it asks this channel to `emit` once per loop turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from amqpd.protocol.fastpath import encode_ack, encode_nack

Callback = Callable[[], None]


class ConfirmsOwner(Protocol):
    """What the confirms need of their connection."""

    def confirms_pending(self, channel: Any) -> None: ...
    def unconfirmed_changed(self, delta: int) -> None: ...


class Confirms:
    """Sequence numbers of one channel in confirm mode (tests/integration/test_confirms_tx.py)."""

    __slots__ = ("conn", "channel", "seq", "confirmed_upto", "pending", "nacks")

    def __init__(self, conn: ConfirmsOwner, channel: Any) -> None:
        self.conn = conn
        self.channel = channel  # handed back to the connection, which calls emit() on the channel's turn
        self.seq = 0  # the last sequence number given
        self.confirmed_upto = 0  # every publish up to this one is confirmed (acked or nacked)
        self.pending: dict[int, None] = {}  # awaiting the store, in seq order
        self.nacks: set[int] = set()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def durable(self, seq: int, on_stored: Callback | None) -> Callback | None:
        """The store's callback for publish `seq` (0: not in confirm mode, only `on_stored` runs)."""
        if not seq:
            return on_stored
        self.pending[seq] = None
        self.conn.unconfirmed_changed(1)

        def stored() -> None:
            if seq in self.pending:
                del self.pending[seq]
                self.conn.unconfirmed_changed(-1)
            self.conn.confirms_pending(self.channel)
            if on_stored is not None:
                on_stored()

        return stored

    def failed(self, seq: int, on_stored: Callback | None, on_failed: Callback | None) -> Callback | None:
        """The store could not write the message: its confirm is a nack; a transaction's commit fails."""
        if not seq:
            return on_failed or on_stored
        return lambda: self.settled(seq, False)

    def settled(self, seq: int, ok: bool) -> None:
        if not seq:
            return
        if seq in self.pending:
            del self.pending[seq]
            self.conn.unconfirmed_changed(-1)
        if not ok:
            self.nacks.add(seq)
        self.conn.confirms_pending(self.channel)

    def group(self, n: int) -> Callable[[bool], None]:
        """The next n publishes, stored together: one confirm for all. Its settle(ok) acks (or nacks) them."""
        first = self.seq + 1
        self.seq += n
        # Only the group's first sequence number waits: emit acks up to the lowest one waiting.
        self.pending[first] = None
        self.conn.unconfirmed_changed(n)

        def settle(ok: bool) -> None:
            if first in self.pending:
                del self.pending[first]
                self.conn.unconfirmed_changed(-n)
            if not ok:
                self.nacks.update(range(first, first + n))
            self.conn.confirms_pending(self.channel)

        return settle

    def emit(self, channel_id: int) -> bytes:
        """One basic.ack(multiple) for everything settled in order, a basic.nack for each refused; b"" if none."""
        limit = next(iter(self.pending)) - 1 if self.pending else self.seq
        if limit <= self.confirmed_upto:
            return b""
        out: list[bytes] = []
        start = self.confirmed_upto + 1
        if self.nacks:
            run_end = start - 1
            for seq in range(start, limit + 1):
                if seq in self.nacks:
                    if run_end >= start:
                        out.append(encode_ack(channel_id, run_end, run_end > start))
                    out.append(encode_nack(channel_id, seq, False))
                    self.nacks.discard(seq)
                    start = seq + 1
                run_end = seq
            if run_end >= start:
                out.append(encode_ack(channel_id, run_end, run_end > start))
        else:
            out.append(encode_ack(channel_id, limit, limit > start))
        self.confirmed_upto = limit
        return b"".join(out)
