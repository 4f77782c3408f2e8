"""The heartbeat sweep (amqpd/server/heartbeats.py) on an injected clock: heartbeats go out on time to a client we
have not written to, a client silent for two intervals is dropped as RabbitMQ drops it, a handshake not done in
time is closed, and all of it for any number of connections runs on one loop timer."""

from __future__ import annotations

from collections.abc import Callable

from amqpd.server.heartbeats import RESOLUTION, HeartbeatSweep

STEP = 0.05  # how finely the test clock moves
LATE = RESOLUTION + STEP  # how late a deadline may be seen


class Clock:
    """A clock and a call_later that run callbacks only when the test moves time on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pending: list[Timer] = []

    def __call__(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay, callback)
        self.pending.append(timer)
        return timer

    def advance(self, seconds: float, step: float = STEP) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + step)
            for timer in [t for t in self.pending if t.when <= self.now and not t.cancelled]:
                self.pending.remove(timer)
                timer.callback()

    def live_timers(self) -> int:
        return sum(not t.cancelled for t in self.pending)


class Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class Client:
    """A connection as the sweep sees it, recording what the sweep made it do."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.last_recv = self.last_send = clock.now
        self.heartbeats_sent: list[float] = []
        self.dropped_at: float | None = None
        self.dropped_for: int | None = None
        self.handshake_closed_at: float | None = None

    def send_heartbeat(self) -> None:
        self.last_send = self.clock.now
        self.heartbeats_sent.append(self.clock.now)

    def heartbeats_missed(self, interval: int) -> None:
        self.dropped_at, self.dropped_for = self.clock.now, interval

    def handshake_expired(self) -> None:
        self.handshake_closed_at = self.clock.now


def sweep_and_clock() -> tuple[HeartbeatSweep, Clock]:
    clock = Clock()
    return HeartbeatSweep(clock, clock.call_later), clock


def test_an_idle_connection_gets_a_heartbeat_every_half_interval_and_stays_while_the_client_talks() -> None:
    sweep, clock = sweep_and_clock()
    client = Client(clock)
    start = clock.now
    sweep.start_heartbeats(client, 10)
    for _ in range(8):  # the client sends a heartbeat every 5 s, as clients do
        clock.advance(5)
        client.last_recv = clock.now
    assert client.dropped_at is None
    assert len(client.heartbeats_sent) >= 40 // (5 + LATE)
    for before, sent in zip([start, *client.heartbeats_sent[:-1]], client.heartbeats_sent, strict=True):
        assert 5 <= sent - before <= 5 + LATE  # half the interval after we last wrote: never early, a slot late


def test_a_connection_we_write_to_gets_no_heartbeat() -> None:
    sweep, clock = sweep_and_clock()
    client = Client(clock)
    sweep.start_heartbeats(client, 10)
    for _ in range(40):
        clock.advance(1)
        client.last_send = client.last_recv = clock.now  # a message each way every second
    assert client.heartbeats_sent == []
    assert client.dropped_at is None


def test_a_client_silent_for_two_intervals_is_dropped_with_the_interval_in_the_reason() -> None:
    sweep, clock = sweep_and_clock()
    client = Client(clock)
    heard = clock.now
    sweep.start_heartbeats(client, 3)
    clock.advance(6)
    assert client.dropped_at is None  # two intervals exactly: not yet
    clock.advance(1)
    assert client.dropped_at is not None and heard + 6 < client.dropped_at <= heard + 6 + LATE
    assert client.dropped_for == 3
    assert len(sweep) == 0  # forgotten: no more visits


def test_a_handshake_not_done_in_time_is_closed_and_one_done_in_time_is_not() -> None:
    sweep, clock = sweep_and_clock()
    slow, quick = Client(clock), Client(clock)
    started = clock.now
    sweep.watch_handshake(slow, 10)
    sweep.watch_handshake(quick, 10)
    clock.advance(2)
    sweep.start_heartbeats(quick, 0)  # opened, without heartbeats
    clock.advance(9.9)
    assert slow.handshake_closed_at is not None and started + 10 <= slow.handshake_closed_at
    assert quick.handshake_closed_at is None
    assert len(sweep) == 0


def test_many_connections_share_one_loop_timer_and_each_is_visited_only_when_due() -> None:
    sweep, clock = sweep_and_clock()
    clients = [Client(clock) for _ in range(500)]
    for i, client in enumerate(clients):
        clock.now += 0.01 * (i % 7)  # they arrive over a little while
        client.last_recv = client.last_send = clock.now
        sweep.start_heartbeats(client, 60)
        assert clock.live_timers() == 1
    for _ in range(13):
        clock.advance(10)
        for client in clients:
            client.last_recv = clock.now
        assert clock.live_timers() == 1
    assert all(len(c.heartbeats_sent) == 4 for c in clients)  # at 30, 60, 90 and 120 s
    assert sweep.visits <= 4 * len(clients)  # a visit per heartbeat owed, none in between
    for client in clients:
        sweep.forget(client)
    assert clock.live_timers() == 0
