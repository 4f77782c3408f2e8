"""python -m bench.large — large message bodies (1 MiB and 16 MiB), side by side with RabbitMQ.

For each body size and delivery mode (transient, persistent), against each broker in turn and alternating the
first broker between rounds: publish N messages with publisher confirms (one at a time, as an application that
waits for each confirm does) into a durable queue, then consume them (prefetch 2, manual ack). Reported per
broker: publish and consume MiB/s, broker CPU ms per MiB, and the broker's peak RSS above its RSS before the
phase, in bodies. While publishing, the N queued bodies are part of it: what lies beyond N is what the broker
held besides the messages themselves (a small multiple of one body at most, or it copies or reassembles
quadratically); while consuming, only what is in flight. Medians of the rounds, and the amqpd/RabbitMQ ratio.
Bounded: every phase has a deadline and every socket a timeout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import pika
from pika.adapters.blocking_connection import BlockingChannel as Channel

from amqpd.testing import BrokerProcess
from bench.procstat import PeakRss, cpu_seconds, listener_pid, rss_bytes

MIB = 1024 * 1024
SIZES = {"1MiB": (MIB, 48), "16MiB": (16 * MIB, 6)}  # body size, messages per round
PHASE_DEADLINE_S = 300.0
RSS_SAMPLE_S = 0.02


@dataclass
class Phase:
    mib_per_s: float
    cpu_ms_per_mib: float
    peak_bodies: float  # peak RSS above the phase's start, in body sizes


@contextmanager
def channel(url: str) -> Iterator[Channel]:
    params = pika.URLParameters(url)
    params.socket_timeout = params.blocked_connection_timeout = 60
    connection = pika.BlockingConnection(params)
    try:
        yield connection.channel()
    finally:
        connection.close()


def measure(pid: int, body_size: int, count: int, work: Callable[[], None]) -> Phase:
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    with PeakRss(pid, RSS_SAMPLE_S) as rss:
        work()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    mib = body_size * count / MIB
    return Phase(mib / wall, cpu * 1000 / mib, (rss.peak - rss.start) / body_size)


def publish(ch: Channel, queue: str, body_size: int, n: int, mode: int) -> Callable[[], None]:
    body = os.urandom(body_size)
    deadline = time.monotonic() + PHASE_DEADLINE_S

    def work() -> None:
        for i in range(n):
            if time.monotonic() > deadline:
                raise TimeoutError(f"publishing {n} bodies of {body_size} bytes took over {PHASE_DEADLINE_S} s")
            props = pika.BasicProperties(delivery_mode=mode, message_id=f"m{i}", content_type="application/octet")
            ch.basic_publish("", queue, body, props, mandatory=True)

    return work


def consume(ch: Channel, queue: str, n: int) -> Callable[[], None]:
    def work() -> None:
        ch.basic_qos(prefetch_count=2)
        got = 0
        for method, _props, _body in ch.consume(queue, inactivity_timeout=60):
            if method is None:
                raise TimeoutError(f"{queue}: no delivery for 60 s after {got} of {n}")
            ch.basic_ack(method.delivery_tag)
            got += 1
            if got == n:
                break
        ch.cancel()

    return work


def one_round(url: str, pid: int, body_size: int, n: int, mode: int) -> tuple[Phase, Phase]:
    queue = f"bench-large-{uuid.uuid4().hex[:8]}"
    with channel(url) as ch:
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        try:
            sent = measure(pid, body_size, n, publish(ch, queue, body_size, n, mode))
            got = measure(pid, body_size, n, consume(ch, queue, n))
        finally:
            ch.queue_delete(queue)
    return sent, got


def median_phase(phases: list[Phase]) -> Phase:
    return Phase(
        *(statistics.median(getattr(p, f) for p in phases) for f in ("mib_per_s", "cpu_ms_per_mib", "peak_bodies"))
    )


MODES = {"transient": 1, "persistent": 2}


def run(
    brokers: dict[str, tuple[str, int]],
    rounds: int,
    sizes: dict[str, tuple[int, int]] = SIZES,
    modes: dict[str, int] = MODES,
) -> dict[tuple[str, str, str], tuple[Phase, Phase]]:
    results: dict[tuple[str, str, str], tuple[Phase, Phase]] = {}
    for label, (body_size, n) in sizes.items():
        for mode_name, mode in modes.items():
            per: dict[str, list[tuple[Phase, Phase]]] = {name: [] for name in brokers}
            for r in range(rounds):
                order = list(brokers) if r % 2 == 0 else list(reversed(brokers))
                for name in order:
                    url, pid = brokers[name]
                    per[name].append(one_round(url, pid, body_size, n, mode))
            for name, got in per.items():
                results[(label, mode_name, name)] = (
                    median_phase([s for s, _ in got]),
                    median_phase([c for _, c in got]),
                )
                print(f"{label} {mode_name} {name}: {results[(label, mode_name, name)]}", flush=True)
    return results


def table(results: dict[tuple[str, str, str], tuple[Phase, Phase]], names: list[str]) -> str:
    columns = [
        "body",
        "mode",
        "broker",
        "publish MiB/s",
        "consume MiB/s",
        "CPU ms/MiB (pub, con)",
        "peak RSS in bodies",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for (label, mode, name), (p, c) in results.items():
        lines.append(
            f"| {label} | {mode} | {name} | {p.mib_per_s:.0f} | {c.mib_per_s:.0f} | "
            f"{p.cpu_ms_per_mib:.1f}, {c.cpu_ms_per_mib:.1f} | {p.peak_bodies:.1f}, {c.peak_bodies:.1f} |"
        )
    reference = names[-1]  # RabbitMQ when it runs: every other broker's ratios are against it
    for name in names[:-1]:
        lines += ["", f"| body | mode | {name} publish ratio | consume ratio |", "|---|---|---|---|"]
        for label, mode in dict.fromkeys((label, mode) for label, mode, _ in results):
            a, b = results[(label, mode, name)], results[(label, mode, reference)]
            publish, consume = a[0].mib_per_s / b[0].mib_per_s, a[1].mib_per_s / b[1].mib_per_s
            lines.append(f"| {label} | {mode} | {publish:.2f}× | {consume:.2f}× |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.large", description=__doc__.split("\n", 1)[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--targets", nargs="+", default=["amqpd", "rabbitmq"], choices=["amqpd", "rabbitmq"])
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run an amqpd from this source tree (another checkout), as amqpd-baseline, in the same rounds",
    )
    p.add_argument(
        "--rabbitmq-url", default=os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    print(f"load average before: {os.getloadavg()}")
    # PYTHONSAFEPATH: the baseline's `python -m amqpd` must not import this tree from its working directory.
    baseline_env = {"PYTHONPATH": str(args.baseline), "PYTHONSAFEPATH": "1"} if args.baseline else None
    with BrokerProcess() as amqpd, BrokerProcess(env=baseline_env) if args.baseline else nullcontext() as base:
        assert amqpd.proc is not None
        brokers: dict[str, tuple[str, int]] = {}
        if "amqpd" in args.targets:
            brokers["amqpd"] = (amqpd.url, amqpd.proc.pid)
        if base is not None:
            assert base.proc is not None
            brokers["amqpd-baseline"] = (base.url, base.proc.pid)
        if "rabbitmq" in args.targets:
            port = int(args.rabbitmq_url.rsplit(":", 1)[1].split("/")[0])
            pid = listener_pid(port)
            if pid is None:
                print(f"no RabbitMQ listening on {port}", file=sys.stderr)
                return 1
            brokers["rabbitmq"] = (args.rabbitmq_url, pid)
        sizes = {label: SIZES[label] for label in args.sizes}
        results = run(brokers, args.rounds, sizes, {mode: MODES[mode] for mode in args.modes})
        # The peak above each phase's start misses memory kept from the rounds before (malloc_tuning.py): the
        # whole resident size after the rounds says what the broker held on to.
        for name, (_url, pid) in brokers.items():
            print(f"{name} RSS after the rounds: {rss_bytes(pid) / MIB:.0f} MiB")
    print(f"load average after: {os.getloadavg()}")
    print(table(results, list(brokers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
