"""S4: fill a durable queue with N persistent messages under confirms (no consumer), then drain it, while
sampling the broker's RSS: throughput of both phases and the memory a queued message costs."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.options import Options
from bench.runner import Window, WorkerFailed, WorkerGroup, procstat
from bench.wire import Target
from bench.workers import ConsumerSpec, PublisherSpec, Spec

Metrics = dict[str, float]
PUBLISHERS = 2  # two connections so one connection's confirm round trips don't cap the fill rate
CONFIRM_WINDOW = 500
DRAIN_PREFETCH = 1000
DRAIN_ACK_EVERY = 100
RSS_EVERY = 0.25
# How often a phase checks whether its workers are done. It used to be RSS_EVERY: a phase's end was then seen
# up to 0.25 s late, which cut a 3 s fill's rate by up to 8 % (rates came out in steps of N/0.25 s), and more
# for the faster broker's shorter fill.
DONE_EVERY = 0.005


def run_backlog(target: Target, opts: Options, queue: str, depth: Callable[[], int]) -> Metrics:
    n = opts.backlog
    baseline = _rss(target.pid)
    shares = [n // PUBLISHERS + (1 if i < n % PUBLISHERS else 0) for i in range(PUBLISHERS)]
    pubs: list[Spec] = [
        PublisherSpec(
            target.url,
            "",
            (queue,),
            persistent=True,
            confirm_window=CONFIRM_WINDOW,
            limit=share,
            app_properties=opts.app_properties,
        )
        for share in shares
        if share
    ]
    fill, fill_peak = _phase(target, opts, pubs)
    queued = depth()
    drain_spec = ConsumerSpec(
        target.url, queue, no_ack=False, prefetch=DRAIN_PREFETCH, ack_every=DRAIN_ACK_EVERY, limit=queued
    )
    drain, drain_peak = _phase(target, opts, [drain_spec])
    per = max(n, 1)
    return {
        "publish msg/s": fill.confirmed / fill.seconds,
        "drain msg/s": drain.consumed / drain.seconds,
        "queued msgs": float(queued),
        "peak RSS MB": max(fill_peak, drain_peak) / 1e6,
        "RSS bytes/queued msg": (max(fill_peak, drain_peak) - baseline) / per,
        "broker CPU us/msg": (fill.broker_cpu + drain.broker_cpu) * 1e6 / per,
        "generator CPU us/msg": (fill.worker_cpu + drain.worker_cpu) * 1e6 / per,
        "broker CPU us/msg publish": fill.broker_cpu * 1e6 / per,
        "broker CPU us/msg drain": drain.broker_cpu * 1e6 / per,
    }


STREAM_CONSUMERS = (1, 4)


def run_stream(target: Target, opts: Options, stream: str) -> Metrics:
    """Publish N messages with confirms into a stream, then replay all N from `first` with one consumer and
    then with four at once (each reads all N): publish and replay rates, and the broker's peak RSS."""
    n = opts.backlog
    baseline = _rss(target.pid)
    shares = [n // PUBLISHERS + (1 if i < n % PUBLISHERS else 0) for i in range(PUBLISHERS)]
    pubs: list[Spec] = [
        PublisherSpec(target.url, "", (stream,), persistent=True, confirm_window=CONFIRM_WINDOW, limit=share)
        for share in shares
        if share
    ]
    fill, peak = _phase(target, opts, pubs)
    out: Metrics = {"publish msg/s": fill.confirmed / fill.seconds}
    cpu = fill.broker_cpu
    for count in STREAM_CONSUMERS:
        readers: list[Spec] = [
            ConsumerSpec(
                target.url,
                stream,
                no_ack=False,
                prefetch=DRAIN_PREFETCH,
                ack_every=DRAIN_ACK_EVERY,
                limit=n,
                stream_offset="first",
            )
            for _ in range(count)
        ]
        replay, replay_peak = _phase(target, opts, readers)
        peak = max(peak, replay_peak)
        out[f"replay {count} consumer{'s' if count > 1 else ''} msg/s"] = replay.consumed / replay.seconds
        out[f"broker CPU us/msg replay x{count}"] = replay.broker_cpu * 1e6 / max(replay.consumed, 1)
        cpu += replay.broker_cpu
    out["broker CPU us/msg publish"] = fill.broker_cpu * 1e6 / max(n, 1)
    out["peak RSS MB"] = peak / 1e6
    out["RSS bytes/stored msg"] = (peak - baseline) / max(n, 1)
    return out


def _phase(target: Target, opts: Options, specs: list[Spec]) -> tuple[Window, int]:
    """Run the workers until each reaches its limit; returns the window and the peak RSS seen."""
    with WorkerGroup(specs, target.pid) as group:
        group.start()
        a = group.snapshot()
        peak = a.broker_rss
        deadline = time.monotonic() + opts.backlog_timeout
        next_rss = time.monotonic() + RSS_EVERY
        everyone = list(range(len(specs)))
        while not group.finished(everyone):
            now = time.monotonic()
            if now > deadline:
                raise WorkerFailed(f"S4 phase did not finish within {opts.backlog_timeout:.0f} s")
            if now >= next_rss:
                peak = max(peak, _rss(target.pid))
                next_rss = now + RSS_EVERY
            time.sleep(DONE_EVERY)
        b = group.snapshot()
        group.stop()
        return group.window(a, b), max(peak, b.broker_rss)


def _rss(pid: int | None) -> int:
    return procstat.rss_bytes(pid) if pid else 0
