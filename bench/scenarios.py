"""The six scenarios. Each takes a Target and Options and returns {metric: value}; names are unique per run
and every queue/exchange it declares is deleted before it returns, whatever happened."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from bench import procstat
from bench.backlog import run_backlog, run_stream
from bench.options import Options
from bench.runner import Window, WorkerFailed, WorkerGroup
from bench.stats import weighted_percentiles
from bench.wire import (
    RawConnection,
    Target,
    bind,
    declare_queue,
    declare_topic,
    delete_exchange,
    delete_queue,
    queue_depth,
)
from bench.workers import ConsumerSpec, PublisherSpec, Spec

Metrics = dict[str, float]


@dataclass
class Topology:
    queues: list[str]
    durable: bool = False
    exchange: str | None = None  # a topic exchange, when set
    bindings: list[tuple[str, str]] = field(default_factory=list)  # (queue, pattern)
    arguments: dict | None = None  # for every queue


def unique(scenario: str) -> str:
    return f"bench-{scenario}-{uuid.uuid4().hex[:8]}"


@contextmanager
def declared(target: Target, topo: Topology) -> Iterator[RawConnection]:
    conn = RawConnection(target.url).connect()
    try:
        if topo.exchange:
            declare_topic(conn, topo.exchange)
        for q in topo.queues:
            declare_queue(conn, q, topo.durable, arguments=topo.arguments)
        for q, pattern in topo.bindings:
            bind(conn, q, topo.exchange or "", pattern)
        yield conn
    finally:
        conn.close()
        _teardown(target, topo)


def _teardown(target: Target, topo: Topology) -> None:
    # A fresh connection: the setup one may have been closed by a channel error.
    conn = RawConnection(target.url).connect()
    try:
        for q in topo.queues:
            delete_queue(conn, q)
        if topo.exchange:
            delete_exchange(conn, topo.exchange)
    finally:
        conn.close()


def sleep_watching(group: WorkerGroup, seconds: float) -> None:
    """Sleep, but surface a failed worker at once instead of measuring a dead run."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        group.check_failures()
        time.sleep(min(0.1, left))


IDLE_SAMPLE = 1.0


def idle_cores(pid: int | None, seconds: float = IDLE_SAMPLE) -> float:
    """The broker's CPU use with none of our load: RabbitMQ here is shared with other people's interop tests,
    and whatever it spends on them lands in our window too. Reported so a contaminated run can be spotted."""
    if not pid:
        return 0.0
    before = procstat.cpu_seconds(pid)
    time.sleep(seconds)
    return (procstat.cpu_seconds(pid) - before) / seconds


def steady(target: Target, opts: Options, specs: list[Spec]) -> tuple[Window, list[tuple[int, int]]]:
    idle = idle_cores(target.pid)
    with WorkerGroup(specs, target.pid) as group:
        group.start()
        sleep_watching(group, opts.warmup)
        group.measure()
        a = group.snapshot()
        sleep_watching(group, opts.duration)
        b = group.snapshot()
        group.stop()
        return replace(group.window(a, b), broker_idle_cores=idle), group.latencies()


def handled(w: Window) -> int:
    """Messages the broker handled: the larger of published and delivered. Delivered alone would overstate
    the cost per message when a queue grows (publishes accepted faster than delivered: each still cost
    ingress work); published alone would understate fan-out (S6 delivers 5.75 per publish)."""
    return max(w.published, w.consumed)


def rates(w: Window, per: int) -> Metrics:
    """Common columns. CPU is divided by `per`, the scenario's headline message count, for both sides."""
    per = max(per, 1)
    return {
        "published msg/s": w.published / w.seconds,
        "consumed msg/s": w.consumed / w.seconds,
        "broker CPU us/msg": w.broker_cpu * 1e6 / per,
        "generator CPU us/msg": w.worker_cpu * 1e6 / per,
        "broker CPU cores": w.broker_cpu / w.seconds,
        "broker CPU cores before load": w.broker_idle_cores,
        "generator CPU cores": w.worker_cpu / w.seconds,
        "other load CPU cores": max(0.0, w.other_cpu / w.seconds),
        "busiest generator process CPU %": 100 * w.busiest_worker,
        "publisher blocked %": 100 * w.publisher_io_share,
    }


def latency_ms(samples: list[tuple[int, int]], points: tuple[float, ...]) -> Metrics:
    values = weighted_percentiles(samples, points)
    return {f"latency p{p:g} ms": v / 1e6 for p, v in zip(points, values, strict=True)}


def s1(target: Target, opts: Options) -> Metrics:
    """1 publisher, 1 no-ack consumer, 100-byte transient: raw throughput."""
    q = unique("s1")
    with declared(target, Topology([q])):
        pub = PublisherSpec(target.url, "", (q,), app_properties=opts.app_properties)
        w, _ = steady(target, opts, [pub, ConsumerSpec(target.url, q)])
    return rates(w, handled(w))


def s2(target: Target, opts: Options) -> Metrics:
    """Confirms (100 outstanding), persistent, durable queue, manual ack every 10, prefetch 200."""
    q = unique("s2")
    pub = PublisherSpec(target.url, "", (q,), persistent=True, confirm_window=100, app_properties=opts.app_properties)
    con = ConsumerSpec(target.url, q, no_ack=False, prefetch=200, ack_every=10)
    with declared(target, Topology([q], durable=True)):
        w, lat = steady(target, opts, [pub, con])
    out = {"confirmed msg/s": w.confirmed / w.seconds, **rates(w, w.confirmed)}
    out.update({f"confirm {k}": v for k, v in latency_ms(lat, (50, 99)).items()})
    return out


def s3(target: Target, opts: Options) -> Metrics:
    """4 publishers → 4 queues → 4 consumers, 1 KiB bodies, manual ack every 10, prefetch 100."""
    queues = [unique(f"s3q{i}") for i in range(4)]
    specs: list[Spec] = [
        PublisherSpec(target.url, "", (q,), body_size=1024, app_properties=opts.app_properties) for q in queues
    ]
    specs += [ConsumerSpec(target.url, q, no_ack=False, prefetch=100, ack_every=10) for q in queues]
    with declared(target, Topology(queues)):
        w, _ = steady(target, opts, specs)
    return rates(w, handled(w))


def s5(target: Target, opts: Options) -> Metrics:
    """Fixed 2k msg/s, send time in the body, no-ack consumer: end-to-end latency when not saturated."""
    q = unique("s5")
    pub = PublisherSpec(target.url, "", (q,), rate=opts.s5_rate, app_properties=opts.app_properties)
    with declared(target, Topology([q])):
        w, lat = steady(target, opts, [pub, ConsumerSpec(target.url, q, want_stamps=True)])
    return {**rates(w, handled(w)), **latency_ms(lat, (50, 99, 99.9))}


# Ten patterns over four keys: 23 deliveries per 4 published messages (fan-out 5.75).
S6_KEYS = ("eu.order.1", "us.order.2", "eu.payment.3", "us.payment.4")
S6_PATTERNS = ("#", "eu.#", "us.#", "*.order.*", "*.payment.*", "eu.order.1", "#.4", "*.*.*", "us.*.2", "*.#")


def s6(target: Target, opts: Options) -> Metrics:
    """Topic exchange, 10 queues bound by different patterns, 10 no-ack consumers: deliveries/s."""
    ex = unique("s6x")
    queues = [unique(f"s6q{i}") for i in range(len(S6_PATTERNS))]
    topo = Topology(queues, exchange=ex, bindings=list(zip(queues, S6_PATTERNS, strict=True)))
    specs: list[Spec] = [PublisherSpec(target.url, ex, S6_KEYS, batch=100, app_properties=opts.app_properties)]
    specs += [ConsumerSpec(target.url, q) for q in queues]
    with declared(target, topo):
        w, _ = steady(target, opts, specs)
    return {"deliveries/s": w.consumed / w.seconds, **rates(w, handled(w))}


def s4(target: Target, opts: Options) -> Metrics:
    """Backlog: N persistent messages with confirms into a durable queue nobody consumes, then drained."""
    q = unique("s4")
    with declared(target, Topology([q], durable=True)) as conn:
        out = run_backlog(target, opts, q, lambda: queue_depth(conn, q))
    return out


def st(target: Target, opts: Options) -> Metrics:
    """Streams: N messages (--backlog) published with confirms into a stream, then replayed from `first` by
    one consumer and by four at once (prefetch 1000, ack every 100)."""
    q = unique("st")
    with declared(target, Topology([q], durable=True, arguments={"x-queue-type": "stream"})):
        return run_stream(target, opts, q)


def sat(target: Target, opts: Options) -> Metrics:
    """Saturation check (opt-in, not in the default set): S1 with one and then two publisher processes on the
    same queue. If the second publisher adds no throughput, the broker, not the generator, sets the rate."""
    out: Metrics = {}
    for n in (1, 2):
        q = unique(f"sat{n}")
        specs: list[Spec] = [PublisherSpec(target.url, "", (q,), app_properties=opts.app_properties) for _ in range(n)]
        with declared(target, Topology([q])):
            w, _ = steady(target, opts, [*specs, ConsumerSpec(target.url, q)])
        out[f"{n} pub: published msg/s"] = w.published / w.seconds
        out[f"{n} pub: consumed msg/s"] = w.consumed / w.seconds
        out[f"{n} pub: generator CPU us/msg"] = w.worker_cpu * 1e6 / max(w.consumed, 1)
        out[f"{n} pub: publisher blocked %"] = 100 * w.publisher_io_share
    return out


def equal_properties(run: Callable[[Target, Options], Metrics]) -> Callable[[Target, Options], Metrics]:
    """The side rows: the same scenario with the same property bytes on every message, which lets amqpd read
    back-to-back publishes as one run (PublishGroups.run). Applications don't publish like that."""

    def side_row(target: Target, opts: Options) -> Metrics:
        return run(target, replace(opts, app_properties=False))

    return side_row


# S1…S6 publish as applications do, each message with its own properties (the headline); S1EQ…S6EQ are the
# same scenarios with equal properties on every message.
HEADLINE = {"S1": s1, "S2": s2, "S3": s3, "S4": s4, "S5": s5, "S6": s6}
SCENARIOS: dict[str, Callable[[Target, Options], Metrics]] = {
    **HEADLINE,
    **{f"{name}EQ": equal_properties(run) for name, run in HEADLINE.items()},
    "SAT": sat,
    "ST": st,
}
# S4EQ and S5EQ are left out of the default run: S4 takes minutes and S5 is not saturated either way.
DEFAULT_SCENARIOS = ["S1", "S2", "S3", "S4", "S5", "S6", "S1EQ", "S2EQ", "S3EQ", "S6EQ"]

__all__ = ["DEFAULT_SCENARIOS", "SCENARIOS", "Options", "Metrics", "WorkerFailed"]
