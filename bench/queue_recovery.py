"""Recovery time per queue: a fresh amqpd with N durable queues (empty) is stopped (SIGTERM, and kill -9), then
started again; timed from starting the process to the first connection accepted (connection.open-ok). An empty
data dir's start is timed the same way, so that the cost per queue is (time with N - time with none) / N.

amqpd only: timing RabbitMQ's recovery would mean restarting a RabbitMQ node, and the reference one is shared
and must not be restarted."""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass

from pamqp import commands, frame

from amqpd.testing import BrokerProcess
from bench.wire import RawConnection

WINDOW = 256
_RECOVERED = re.compile(r"recovered (\d+) queues and (\d+) messages in ([\d.]+) s")


@dataclass
class Recovery:
    queues: int
    how: str  # "SIGTERM" or "kill -9"
    to_first_connection_s: float
    logged_s: float | None  # what the broker logged for its recovery alone

    def line(self, empty: float) -> str:
        per = f"{(self.to_first_connection_s - empty) * 1e6 / self.queues:8.1f} µs/queue" if self.queues else ""
        logged = ""
        if self.logged_s is not None:
            logged = f"(recovery logged {self.logged_s:.2f} s"
            logged += f", {self.logged_s * 1e6 / self.queues:.1f} µs/queue)" if self.queues else ")"
        return (
            f"  amqpd    recovery n={self.queues:<7} after {self.how:8} first connection in "
            f"{self.to_first_connection_s:6.2f} s {per} {logged}"
        )


def declare_durable(url: str, count: int) -> None:
    conn = RawConnection(url).connect()
    assert conn.sock is not None
    try:
        for start in range(0, count, WINDOW):
            names = [f"r{i}" for i in range(start, min(count, start + WINDOW))]
            conn.sock.sendall(b"".join(frame.marshal(commands.Queue.Declare(queue=n, durable=True), 1) for n in names))
            for _ in names:
                conn.expect(commands.Queue.DeclareOk)
    finally:
        conn.close()


def restart_time(proc: BrokerProcess, kill: bool) -> tuple[float, float | None]:
    """Seconds from starting the process to the first connection.open-ok, and the recovery time it logged."""
    if kill:
        proc.kill()
    else:
        proc.stop()
    logged_before = len(proc.stderr_lines)
    started = time.perf_counter()
    proc.start(timeout=600)  # on a new port, which proc.url then names
    RawConnection(proc.url).connect().close()
    took = time.perf_counter() - started
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in proc.stderr_lines[logged_before:]:
            m = _RECOVERED.search(line)
            if m:
                return took, float(m.group(3))
        time.sleep(0.05)
    return took, None


def run_recovery(sizes: list[int], extra_args: list[str], rounds: int = 3) -> list[Recovery]:
    """The median of `rounds` restarts each way (a busy machine moves a single start by a second)."""
    results: list[Recovery] = []
    for size in [0, *sizes]:
        with BrokerProcess(extra_args=extra_args) as proc:
            if size:
                declare_durable(proc.url, size)
            for kill in (False, True):
                runs = sorted(restart_time(proc, kill) for _ in range(rounds))
                took, logged = runs[len(runs) // 2][0], statistics.median(r[1] or 0.0 for r in runs)
                results.append(Recovery(size, "kill -9" if kill else "SIGTERM", took, logged))
                print(results[-1].line(_empty(results, results[-1].how)))
    return results


def _empty(results: list[Recovery], how: str) -> float:
    return next((r.to_first_connection_s for r in results if r.queues == 0 and r.how == how), 0.0)


def report(results: list[Recovery]) -> list[str]:
    return [r.line(_empty(results, r.how)) for r in results]
