"""A publisher's confirm latency while another consumer replays a large stream from a cold page cache:
`python -m bench.loop_reads [--mb 1024] [--rate 1000] [--seconds 10] [--rounds 3]`.

Issue 26's figure for "the event loop never reads the disk". It starts its own amqpd (data dir in the system's
temp dir, on disk), fills a stream with --mb MiB of 16 KiB messages, then measures one connection publishing
persistent messages with confirms at --rate msg/s to a durable queue: first alone (--seconds), then while a
second connection replays the whole stream from its first offset after the page cache was dropped (`sync;
echo 3 > /proc/sys/vm/drop_caches`: needs root; without it the replay reads from the page cache, and the
report says so). Each of --rounds rounds measures both phases (the machine's load drifts: idle and replay
figures from the same moments compare); prints each round's confirm p50/p99 of both phases and the replay's
rate, the broker's CPU in each phase (all its threads, from /proc, per second) and, per replayed MiB, the
broker's over the replay phase (the publisher's share included) and the replaying consumer's own, their
medians and the load average as one JSON line. `python -m bench.replay_cpu` measures the replay's CPU alone. A
third connection probes the loop meanwhile (basic.qos round trips, which wait for no disk): its p99 in each
phase tells a loop held by the replay from confirms waiting on a disk the replay's reads contend for. Each
phase's start goes to stderr with the broker's pid (to attach a profiler: `py-spy record -p PID`).

`--consumer-nice N` runs the replaying consumer at niceness N. Its client (aiormq) spends several times the
broker's CPU per MiB, and on a machine of two cores it may take the core the publisher's client and the
broker's writer thread wait for: a higher niceness asks whether that is what the figure measures (a consumer
on a machine of its own). The JSON says which was used.

To compare two trees, `--versus TREE` runs each round twice: on the `amqpd` this process imports, then on
TREE's (PYTHONPATH=TREE), the broker restarted on the same data in between; both sides' figures are printed.

`--rabbitmq` runs each round on the reference RabbitMQ too (--rabbitmq-url, its management API at
--rabbitmq-management-url), after amqpd's, in a vhost made for the run and removed after it: the same stream, the
same publisher and consumer, the same moments. Its broker CPU is its beam process's (the listener on the URL's
port). The JSON then has amqpd's figures under "this" (as with --versus), RabbitMQ's under "rabbitmq" and
`rabbitmq_over_amqpd`, RabbitMQ's median replay-phase confirm p99 over amqpd's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import aiormq
from pamqp.commands import Basic

from amqpd.testing import BrokerProcess, IsolatedVhost, ManagementClient
from bench.procstat import broker_pid, cpu_seconds

BODY = 16 << 10
STREAM, QUEUE = "loop-reads-stream", "loop-reads-queue"
FILL_WINDOW = 256  # confirms outstanding while filling
PREFETCH = 1000
PROBE_EVERY = 0.01  # s between the loop probe's round trips
REFERENCE_URL = os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REFERENCE_MANAGEMENT_URL = "http://127.0.0.1:15672"
MGMT_TIMEOUT_S = 180.0  # RabbitMQ creates and deletes a vhost slowly on a loaded machine


@dataclass
class Reference:
    """The RabbitMQ measured beside amqpd: where its AMQP and management API listen."""

    url: str
    management_url: str


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def drop_page_cache() -> bool:
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


async def fill(url: str, megabytes: int, headers: dict[str, Any] | None = None) -> int:
    conn = await aiormq.connect(url)
    ch = await conn.channel(publisher_confirms=True)
    await ch.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    await ch.queue_declare(QUEUE, durable=True)
    count = (megabytes << 20) // BODY
    props = Basic.Properties(delivery_mode=2, headers=headers)
    pending: set[asyncio.Future[Any]] = set()
    for n in range(count):
        body = b"%012d" % n + b"s" * (BODY - 12)
        pending.add(asyncio.ensure_future(ch.basic_publish(body, routing_key=STREAM, properties=props)))
        if len(pending) >= FILL_WINDOW:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    if pending:
        await asyncio.wait(pending)
    await conn.close()
    return count


async def publish_at_rate(
    url: str, rate: float, stop: asyncio.Event, seconds: float, connected: asyncio.Event | None = None
) -> list[float]:
    """Confirmed publishes, one started every 1/rate s whatever the confirms' pace; each one's latency (s).
    `connected` is set once the channel is open; the first publish starts before anything else can run."""
    conn = await aiormq.connect(url)
    ch = await conn.channel(publisher_confirms=True)
    if connected is not None:
        connected.set()
    props = Basic.Properties(delivery_mode=2)
    latencies: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def one(n: int) -> None:
        t0 = time.perf_counter()
        await ch.basic_publish(b"%012d" % n + b"." * 500, routing_key=QUEUE, properties=props)
        latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    n = 0
    while not stop.is_set() and time.perf_counter() - started < seconds:
        tasks.append(asyncio.create_task(one(n)))
        n += 1
        await asyncio.sleep(max(0.0, started + n / rate - time.perf_counter()))
    await asyncio.gather(*tasks)
    await ch.queue_purge(QUEUE)
    await conn.close()
    return latencies


async def probe_loop(url: str, stop: asyncio.Event) -> list[float]:
    """Round trips of basic.qos on a connection of its own until `stop`: the broker's loop answers it without
    the disk, so this separates a loop held by the replay from confirms waiting for a contended fsync."""
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    trips: list[float] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        await ch.basic_qos(prefetch_count=1)
        trips.append(time.perf_counter() - t0)
        await asyncio.sleep(PROBE_EVERY)
    await conn.close()
    return trips


async def publish_and_probe(
    url: str, rate: float, stop: asyncio.Event, seconds: float, connected: asyncio.Event | None = None
) -> tuple[list[float], ...]:
    """publish_at_rate's latencies and the loop probe's round trips over the same time."""
    probe_stop = asyncio.Event()
    probing = asyncio.create_task(probe_loop(url, probe_stop))
    latencies = await publish_at_rate(url, rate, stop, seconds, connected)
    probe_stop.set()
    return latencies, await probing


def replay_in_child(url: str, count: int, nice: int = 0) -> tuple[float, float]:
    """The replay, in a process of its own (sharing this one's loop, it would slow the publisher's client),
    at `nice`: seconds it took and the CPU seconds this process spent on it (its client's cost)."""
    os.nice(nice)
    before = _own_cpu_seconds()
    took = asyncio.run(replay(url, count))
    return took, _own_cpu_seconds() - before


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def replay(url: str, count: int) -> float:
    """Consume the whole stream from its first offset; seconds it took."""
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.basic_qos(prefetch_count=PREFETCH)
    got = 0
    finished = asyncio.Event()

    async def on_message(m: aiormq.abc.DeliveredMessage) -> None:
        nonlocal got
        got += 1
        if got % (PREFETCH // 2) == 0 or got == count:
            assert m.delivery_tag is not None  # a delivery's, never a basic.get-empty's
            await ch.basic_ack(m.delivery_tag, multiple=True)
        if got >= count:
            finished.set()

    started = time.perf_counter()
    await ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "first"})
    await finished.wait()
    took = time.perf_counter() - started
    await conn.close()
    return took


async def measure(
    broker: BrokerProcess,
    megabytes: int,
    rate: float,
    seconds: float,
    rounds: int,
    versus: str | None,
    nice: int,
    reference: Reference | None = None,
) -> dict[str, Any]:
    """Fill, then the rounds; with `versus` (a source tree), each round runs on this tree's amqpd and then on
    that tree's, the broker restarted on the same data between them (A/B on one stream at one time); with
    `reference`, on that RabbitMQ after them, in a vhost of its own filled the same way."""
    assert broker.proc is not None
    phase("filling", broker.proc.pid)
    count = await fill(broker.url, megabytes)

    def one_round(url: str, pid: int) -> Awaitable[dict[str, Any]]:
        return measure_round(url, count, megabytes, rate, seconds, pid, nice)

    with reference_vhost(reference) if reference is not None else nullcontext() as others:
        if others:
            ((url, pid),) = others.values()
            phase("filling", pid)
            await fill(url, megabytes)
        results = await ab_rounds(broker, rounds, versus, one_round, others)
    summary: dict[str, Any] = {"stream_mib": megabytes, "messages": count, "rate": rate, "consumer_nice": nice}
    if len(results) == 1:
        summary.update(summarise(results["this"]))
    else:
        summary.update({side: summarise(found) for side, found in results.items()})
    if reference is not None:
        this, rabbitmq = summary["this"], summary["rabbitmq"]
        summary["rabbitmq_over_amqpd"] = round(
            rabbitmq["median_replay_confirm_p99_ms"] / this["median_replay_confirm_p99_ms"], 2
        )
    summary["load_average"] = [round(v, 2) for v in os.getloadavg()]
    return summary


@contextmanager
def reference_vhost(reference: Reference) -> Iterator[dict[str, tuple[str, int]]]:
    """{"rabbitmq": (AMQP URL of a vhost made for the run, pid of its beam process)}; the vhost and its user
    are removed afterwards, with the stream and the queue in them."""
    pid = broker_pid(reference.url)
    if pid is None:
        raise SystemExit(f"bench.loop_reads: no RabbitMQ listening at {reference.url}")
    admin = ManagementClient(reference.management_url, timeout=MGMT_TIMEOUT_S)
    try:
        with IsolatedVhost(admin, reference.url, "bench-loop-reads") as vhost:
            yield {"rabbitmq": (vhost.url, pid)}
    finally:
        admin.close()


async def ab_rounds(
    broker: BrokerProcess,
    rounds: int,
    versus: str | None,
    one_round: Callable[[str, int], Awaitable[dict[str, Any]]],
    others: dict[str, tuple[str, int]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """`rounds` of one_round(url, broker pid), by side: "this" (the `amqpd` this process imports) and, with
    `versus` (a source tree), "versus" after it in each round, the broker restarted on the same data between
    them (PYTHONPATH=versus); then each of `others` (side: (url, pid)), brokers that are not restarted."""
    sides = {"this": broker.env}
    if versus is not None:
        sides["versus"] = dict(broker.env or {}, PYTHONPATH=versus)
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in [*sides, *(others or {})]}
    for _ in range(rounds):
        for side, env in sides.items():
            if broker.env != env:
                broker.env = env
                await asyncio.to_thread(broker.restart)
            assert broker.proc is not None
            results[side].append(await one_round(broker.url, broker.proc.pid))
        for side, (url, pid) in (others or {}).items():
            results[side].append(await one_round(url, pid))
    return results


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"rounds": results}
    for key in results[0]:
        if key.endswith(("_ms", "_s", "_seconds", "_per_mib", "_per_s")):
            summary["median_" + key] = round(statistics.median(r[key] for r in results), 2)
    summary["median_confirm_p99_ratio"] = round(
        statistics.median(r["replay_confirm_p99_ms"] / r["idle_confirm_p99_ms"] for r in results), 2
    )
    summary["confirm_p99_ratio_of_medians"] = round(
        summary["median_replay_confirm_p99_ms"] / summary["median_idle_confirm_p99_ms"], 2
    )
    summary["cold_page_cache"] = all(r["cold_page_cache"] for r in results)
    return summary


async def measure_round(
    url: str, count: int, megabytes: int, rate: float, seconds: float, pid: int, nice: int
) -> dict[str, Any]:
    """One idle phase then one replay phase, the page cache dropped before each."""
    cold = drop_page_cache()
    phase("idle", pid)
    cpu_at, clock_at = cpu_seconds(pid), time.perf_counter()
    idle, idle_probe = await publish_and_probe(url, rate, asyncio.Event(), seconds)
    idle_cpu, idle_clock = cpu_seconds(pid) - cpu_at, time.perf_counter() - clock_at
    cold = drop_page_cache() and cold
    phase("replay", pid)
    done = asyncio.Event()
    with ProcessPoolExecutor(1) as pool:
        # The replay starts once the publisher is connected: its first publish is then during the replay,
        # however short the stream.
        connected = asyncio.Event()
        publishing = asyncio.create_task(publish_and_probe(url, rate, done, 600.0, connected))
        waiting = asyncio.create_task(connected.wait())
        await asyncio.wait({publishing, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not connected.is_set():
            waiting.cancel()
            await publishing  # it failed before connecting: its error
        cpu_at, clock_at = cpu_seconds(pid), time.perf_counter()
        replaying = asyncio.get_running_loop().run_in_executor(pool, replay_in_child, url, count, nice)
        replaying.add_done_callback(lambda _: done.set())
        busy, busy_probe = await publishing
        took, consumer_cpu = await replaying
        busy_cpu, busy_clock = cpu_seconds(pid) - cpu_at, time.perf_counter() - clock_at
    phase("done", pid)
    ms = 1000.0
    return {
        "cold_page_cache": cold,
        "idle_confirm_p50_ms": round(statistics.median(idle) * ms, 2),
        "idle_confirm_p99_ms": round(percentile(idle, 0.99) * ms, 2),
        "replay_confirm_p50_ms": round(statistics.median(busy) * ms, 2),
        "replay_confirm_p99_ms": round(percentile(busy, 0.99) * ms, 2),
        "idle_probe_p99_ms": round(percentile(idle_probe, 0.99) * ms, 2),
        "replay_probe_p99_ms": round(percentile(busy_probe, 0.99) * ms, 2),
        "replay_seconds": round(took, 2),
        "replay_mib_per_s": round(megabytes / took, 1),
        "confirm_p99_ratio": round(percentile(busy, 0.99) / percentile(idle, 0.99), 2),
        "publishes_during_replay": len(busy),
        "idle_broker_cpu_s_per_s": round(idle_cpu / idle_clock, 3),
        "replay_broker_cpu_s_per_s": round(busy_cpu / busy_clock, 3),
        # the publisher's share included: it is not the idle phase's (its batches grow while the replay runs)
        "broker_cpu_ms_per_mib": round(busy_cpu / megabytes * ms, 2),
        "consumer_cpu_ms_per_mib": round(consumer_cpu / megabytes * ms, 2),
    }


def phase(name: str, pid: int) -> None:
    print(f"loop_reads: {name} (broker pid {pid}) at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=1024, help="MiB in the stream (default 1024)")
    p.add_argument("--rate", type=float, default=1000.0, help="confirmed publishes a second (default 1000)")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the idle phase (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="idle + replay rounds (default 3)")
    p.add_argument("--versus", metavar="TREE", help="A/B: each round also on the amqpd of this source tree")
    p.add_argument(
        "--consumer-nice",
        type=int,
        default=0,
        metavar="N",
        help="the replay's consumer process at this niceness (default 0)",
    )
    p.add_argument("--rabbitmq", action="store_true", help="each round on the reference RabbitMQ too")
    p.add_argument("--rabbitmq-url", default=REFERENCE_URL, help=f"its AMQP URL (default {REFERENCE_URL})")
    p.add_argument(
        "--rabbitmq-management-url",
        default=REFERENCE_MANAGEMENT_URL,
        help=f"its management API, to make the run's vhost (default {REFERENCE_MANAGEMENT_URL})",
    )
    a = p.parse_args(argv)
    versus = os.path.abspath(a.versus) if a.versus else None
    reference = Reference(a.rabbitmq_url, a.rabbitmq_management_url) if a.rabbitmq else None
    with BrokerProcess() as broker:
        result = asyncio.run(measure(broker, a.mb, a.rate, a.seconds, a.rounds, versus, a.consumer_nice, reference))
    result["amqpd"] = os.path.dirname(os.path.dirname(sys.modules["amqpd"].__file__ or ""))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
