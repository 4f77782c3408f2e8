"""Message rates for the management API, sampled from counters the broker keeps anyway.

The publish, deliver and ack paths only bump integers on objects they already touch (Queue._seq,
Queue.delivered, Channel.published, ...). A timer reads them every `stats_interval` seconds (RabbitMQ's
collect_statistics_interval) and turns the difference between the last two samples into a rate per second,
so the cost of rates is one pass over the queues and channels per interval, none per message.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

Counts = dict[str, int]


def queue_counts(q: Any) -> Counts:
    return {"publish": q.published, "deliver_get": q.delivered, "ack": q.acked}


def queue_depths(q: Any) -> Counts:
    """A queue's lengths, sampled like the counters: their rates are how fast it grows (+) or drains (-)."""
    ready, unacked = len(q.ready), q.unacked
    return {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked}


def exchange_counts(ex: Any) -> Counts:
    return {"publish_in": ex.publish_in, "publish_out": ex.publish_out}


def connection_counts(s: Any) -> Counts:
    return {"recv_oct": s.recv_oct, "send_oct": s.send_oct}


def channel_counts(ch: Any) -> Counts:
    return {"publish": ch.published, "deliver_get": ch.last_tag, "ack": ch.acked, "confirm": ch.confirms.confirmed_upto}


class Sample:
    """Two readings of one object's counters and when they were taken."""

    __slots__ = ("at", "counts", "prev_at", "prev_counts", "idle_since")

    def __init__(self, at: float, counts: Counts) -> None:
        self.at, self.counts = at, counts
        self.prev_at, self.prev_counts = at, counts
        self.idle_since: float | None = at

    def take(self, at: float, counts: Counts) -> None:
        if counts != self.counts:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = self.at  # nothing moved since the last reading
        self.prev_at, self.prev_counts = self.at, self.counts
        self.at, self.counts = at, counts

    def rate(self, key: str) -> float:
        elapsed = self.at - self.prev_at
        if elapsed <= 0:
            return 0.0
        return round((self.counts.get(key, 0) - self.prev_counts.get(key, 0)) / elapsed, 1)


HISTORY_SECONDS = 600.0  # what the overview's charts can show: RabbitMQ's UI default of the last ten minutes
HISTORY_POINTS = 3600  # a bound whatever stats_interval is


class History:
    """The broker-wide counters and queue totals at each sampling for the last HISTORY_SECONDS, so that
    /api/overview?msg_rates_age=...&lengths_age=... can answer RabbitMQ's `samples` lists (the web UI's charts
    are then full as soon as it opens). One small dict per interval, nothing per queue."""

    def __init__(self) -> None:
        self.points: deque[tuple[float, Counts]] = deque(maxlen=HISTORY_POINTS)

    def add(self, at: float, counts: Counts) -> None:
        self.points.append((at, counts))
        while self.points and self.points[0][0] < at - HISTORY_SECONDS:
            self.points.popleft()

    def samples(self, key: str, age: float, incr: float, now: float) -> list[dict[str, int]]:
        """[{"sample": value, "timestamp": ms}], newest first as RabbitMQ lists them, at most one per `incr`
        seconds, none older than `age` seconds."""
        out: list[dict[str, int]] = []
        last: float | None = None
        for at, counts in reversed(self.points):
            if at < now - age:
                break
            if last is not None and last - at < incr * 0.999:
                continue
            last = at
            out.append({"sample": counts.get(key, 0), "timestamp": int(at * 1000)})
        return out


class Rates:
    """The latest samples of every queue and channel, and of the broker-wide totals."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.samples: dict[Any, Sample] = {}
        self.total = Sample(clock(), {})
        self.history = History()

    def sample(
        self,
        queues: Iterable[Any],
        channels: Iterable[Any],
        totals: Counts,
        levels: Counts | None = None,
        exchanges: Iterable[Any] = (),
        connections: Iterable[Any] = (),
    ) -> None:
        """levels: the queue totals (messages, messages_ready, messages_unacknowledged) kept in the history."""
        now = self.clock()
        seen: dict[Any, Sample] = {}
        for obj, counts in [
            *((q, {**queue_counts(q), **queue_depths(q)}) for q in queues),
            *((c, channel_counts(c)) for c in channels),
            *((x, exchange_counts(x)) for x in exchanges),
            *((s, connection_counts(s)) for s in connections),
        ]:
            s = self.samples.get(obj)
            if s is None:
                s = Sample(now, counts)
            else:
                s.take(now, counts)
            seen[obj] = s
        self.samples = seen  # objects that are gone are forgotten
        self.total.take(now, totals)
        self.history.add(now, {**totals, **(levels or {})})

    def of(self, obj: Any) -> Sample | None:
        return self.samples.get(obj)


def message_stats(counts: Counts, sample: Sample | None) -> dict[str, Any]:
    """RabbitMQ's message_stats object: each counter with a `<name>_details.rate` next to it."""
    stats: dict[str, Any] = {}
    for key, value in counts.items():
        stats[key] = value
        stats[f"{key}_details"] = {"rate": sample.rate(key) if sample is not None else 0.0}
    return stats


def depth_rates(samples: Iterable[Sample | None]) -> tuple[float, float, float]:
    """How fast messages, messages_ready and messages_unacknowledged change, summed over queues' samples."""
    rates = [0.0, 0.0, 0.0]
    for sample in samples:
        if sample is not None:
            for i, key in enumerate(("messages", "messages_ready", "messages_unacknowledged")):
                rates[i] += sample.rate(key)
    return round(rates[0], 1), round(rates[1], 1), round(rates[2], 1)
