"""Every connection's heartbeats and handshake deadline, driven by one timer.

A timer per connection (a call_later every heartbeat/2, and one for the handshake) costs an event-loop handle, a
heap push and a heap pop per connection per period: with 10,000 connections that is the loop's timer heap
holding 10,000 handles and churning through them. Here connections wait in buckets by the slot (of RESOLUTION
seconds) in which they are next due, and a single loop timer is armed for the earliest slot: a turn visits only
the connections due then, and a busy connection's visit just moves it to the slot of its next deadline.

The rules are RabbitMQ's (rabbit_heartbeat): a heartbeat frame is sent when nothing was sent for half the
negotiated interval; a client silent for two intervals is disconnected without a connection.close (the reason
logged: "missed heartbeats from client, timeout: Ns"); a handshake not done in handshake_timeout is closed.
Deadlines fall at most RESOLUTION late, never early."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

RESOLUTION = 0.25  # seconds: how late a heartbeat or a deadline may be; the shortest heartbeat is 1 s


class Beating(Protocol):
    """What the sweep asks of a connection (server/connection.py's AMQPServerProtocol)."""

    last_recv: float  # the clock when bytes last came in
    last_send: float  # the clock when bytes last went out

    def send_heartbeat(self) -> None:
        """Write a heartbeat frame (and set last_send)."""

    def heartbeats_missed(self, interval: int) -> None:
        """The client was silent for two intervals: drop the connection."""

    def handshake_expired(self) -> None:
        """handshake_timeout passed: close the connection if it is not open yet."""


class Handle(Protocol):
    def cancel(self) -> None: ...


@dataclass
class _Watch:
    interval: int = 0  # the negotiated heartbeat in seconds; 0: none
    handshake_by: float | None = None  # the handshake deadline, until it has passed or the connection opened
    slot: int | None = None  # the bucket it waits in


class HeartbeatSweep:
    """`clock` is the event loop's time() (time.monotonic); `call_later(delay, callback)` the loop's own. Tests
    inject both."""

    def __init__(
        self,
        clock: Callable[[], float],
        call_later: Callable[[float, Callable[[], None]], Handle],
        resolution: float = RESOLUTION,
    ) -> None:
        self.clock = clock
        self.call_later = call_later
        self.resolution = resolution
        self._watches: dict[Any, _Watch] = {}
        self._buckets: dict[int, dict[Any, None]] = {}
        self._slots: list[int] = []  # a heap of the buckets' slots
        self._armed: tuple[int, Handle] | None = None  # the slot the loop timer fires for
        self._firing = False  # in _fire, which arms the timer once at its end
        self.visits = 0  # connections looked at (the bench reports it)

    def watch_handshake(self, conn: Beating, timeout: float) -> None:
        watch = self._watches.setdefault(conn, _Watch())
        watch.handshake_by = self.clock() + timeout
        self._reschedule(conn, watch)

    def start_heartbeats(self, conn: Beating, interval: int) -> None:
        """The connection is open: its handshake deadline is over; heartbeats start if interval > 0."""
        watch = self._watches.setdefault(conn, _Watch())
        watch.handshake_by, watch.interval = None, interval
        if interval > 0:
            self._reschedule(conn, watch)
        else:
            self.forget(conn)

    def forget(self, conn: Beating) -> None:
        """The connection closed (or needs no timer any more)."""
        watch = self._watches.pop(conn, None)
        if watch is not None and watch.slot is not None:
            self._take_out(conn, watch.slot)
        if not self._watches and self._armed is not None:  # nothing left to time: no idle wake-ups
            self._armed[1].cancel()
            self._armed = None
            self._slots.clear()

    def __len__(self) -> int:
        return len(self._watches)

    # -- the sweep ----------------------------------------------------------------------------------------

    def _fire(self) -> None:
        self._armed, self._firing = None, True
        now = self.clock()
        try:
            while self._slots and self._slots[0] * self.resolution <= now:
                slot = heapq.heappop(self._slots)
                for conn in list(self._buckets.pop(slot, ())):
                    watch = self._watches.get(conn)
                    if watch is None or watch.slot != slot:  # forgotten by a visit before it
                        continue
                    watch.slot = None
                    self.visits += 1
                    self._visit(conn, watch, now)
        finally:
            self._firing = False
            self._arm()

    def _visit(self, conn: Beating, watch: _Watch, now: float) -> None:
        if watch.handshake_by is not None and now >= watch.handshake_by:
            self.forget(conn)
            conn.handshake_expired()
            return
        interval = watch.interval
        if interval:
            if now - conn.last_recv > 2 * interval:
                self.forget(conn)
                conn.heartbeats_missed(interval)
                return
            if now - conn.last_send >= interval / 2:
                conn.send_heartbeat()
        self._reschedule(conn, watch)

    def _due(self, conn: Beating, watch: _Watch) -> float | None:
        dues = [] if watch.handshake_by is None else [watch.handshake_by]
        if watch.interval:
            dues.append(conn.last_send + watch.interval / 2)  # a heartbeat owed
            dues.append(conn.last_recv + 2 * watch.interval)  # silence too long (checked just after)
        return min(dues) if dues else None

    def _reschedule(self, conn: Beating, watch: _Watch) -> None:
        due = self._due(conn, watch)
        if due is None:
            self.forget(conn)
            return
        slot = math.floor(due / self.resolution) + 1  # the first slot boundary after the deadline
        if slot == watch.slot:
            return
        if watch.slot is not None:
            self._take_out(conn, watch.slot)
        watch.slot = slot
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = {}
            heapq.heappush(self._slots, slot)
        bucket[conn] = None
        if not self._firing and (self._armed is None or slot < self._armed[0]):
            self._arm()

    def _take_out(self, conn: Beating, slot: int) -> None:
        bucket = self._buckets.get(slot)
        if bucket is not None:
            bucket.pop(conn, None)
            if not bucket:  # its slot stays in the heap, popped as an empty bucket when due
                del self._buckets[slot]

    def _arm(self) -> None:
        """One loop timer, for the earliest slot that still has connections waiting."""
        while self._slots and self._slots[0] not in self._buckets:
            heapq.heappop(self._slots)
        if not self._slots:
            if self._armed is not None:
                self._armed[1].cancel()
                self._armed = None
            return
        slot = self._slots[0]
        if self._armed is not None:
            if self._armed[0] == slot:
                return
            self._armed[1].cancel()
        delay = max(0.0, slot * self.resolution - self.clock())
        self._armed = (slot, self.call_later(delay, self._fire))
