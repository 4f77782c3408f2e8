"""Publisher flow control by consumer pace: a publisher into a deep queue pauses while that queue's consumers
are waiting on the broker, not while they are slow on their own.

RabbitMQ's credit flow pauses a publisher when a queue process cannot keep up with its work (enqueueing and
delivering), and only then: a backlog behind consumers whose prefetch is full because they process slowly
never blocks anyone. amqpd hands a message to a consumer with room in the same call that enqueues it, so a
queue never holds messages while a consumer it knows has room; under overload what holds its consumers back
is their acks (or their drained sockets) waiting unread while the event loop reads publishes. So the
measure is in turns of the event loop (rounds in which connections were read), not in CPU time: a queue
whose consumers ran out of room with messages waiting (a stall) and came back for more within PACE_TURNS
turns is lagging (they would take more if the broker got round to them sooner); consumers that need longer
are slow on their own, whatever the machine's load. A CPU sample cannot tell these apart on a machine shared
with other work (the broker gets part of a core and is "not busy" while its consumers starve).

Turns count reads, so while a publisher is paused and little else is read, even a slow consumer's acks come
a turn or two apart. Hence the retest (Broker.check_flow, once a second): every paused publisher goes on and
pauses again only once its queue's consumers come back quickly while it is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Turns between a stall and the consumers' return for them still to count as waiting on the broker: the
# deliveries are written in the turn after the one that made them (1), a client that acks as it reads has
# its acks read in the turn after that (2), or one later when it reads in a turn of its own loop (3);
# anything slower is the consumer's own pace. Measured under load in S3: nine returns in ten took 1 or 2.
PACE_TURNS = 3


class TurnClock:
    """Counts turns of the event loop in which some connection was read (the socket layer starts a count
    when it reads)."""

    __slots__ = ("now", "ticking")

    def __init__(self) -> None:
        self.now = 0
        self.ticking = False

    def start(self, call_soon: Callable[[Callable[[], None]], Any]) -> None:
        """Something was read this turn: count one more turn, once, when the loop comes round again."""
        if not self.ticking:
            self.ticking = True
            call_soon(self.tick)

    def tick(self) -> None:
        self.ticking = False
        self.now += 1


class Pace:
    """One queue's consumer pace: the turn its consumers last ran out of room with messages waiting, and
    whether they came back for more within PACE_TURNS turns the last time they did."""

    __slots__ = ("clock", "stalled_at", "quick")

    def __init__(self, clock: TurnClock) -> None:
        self.clock = clock
        self.stalled_at = 0
        self.quick = False

    def stalled(self) -> None:
        """Every consumer is out of room and a message waits."""
        self.stalled_at = self.clock.now

    def came_back(self) -> None:
        """A consumer took a message that was waiting."""
        self.quick = self.clock.now - self.stalled_at <= PACE_TURNS

    def forget(self) -> None:
        """The consumers must come back quickly again before they count as waiting on the broker."""
        self.quick = False

    def lagging(self) -> bool:
        """The consumers came back quickly last time and are not overdue now: they are waiting on the broker."""
        return self.quick and self.clock.now - self.stalled_at <= PACE_TURNS
