"""Starts a set of worker processes, moves them through the phases and takes snapshots of their counters,
their CPU time and the broker's CPU time and RSS."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

from bench import procstat
from bench.workers import (
    MEASURE,
    RUN,
    SLOT_CONFIRMED,
    SLOT_COUNT,
    SLOT_CPU_US,
    SLOT_IO_NS,
    SLOT_STATE,
    SLOT_SYSCALLS,
    SLOTS,
    STATE_DONE,
    STATE_FAILED,
    STATE_READY,
    STOP,
    ConsumerSpec,
    PublisherSpec,
    Spec,
    run_worker,
)

READY_TIMEOUT = 30.0
JOIN_TIMEOUT = 10.0


def context() -> ForkServerContext:
    """forkserver: children start from a clean process with the worker module preloaded, fast and without
    inheriting BrokerProcess's reader threads (forking a threaded parent is fragile)."""
    ctx = mp.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(["bench.workers"])
    return ctx


class WorkerFailed(RuntimeError):
    pass


@dataclass
class Snapshot:
    at: float
    counts: list[int]
    confirmed: list[int]
    io_ns: list[int]
    syscalls: list[int]
    worker_cpu: list[float]
    broker_cpu: float
    broker_rss: int
    machine_busy: float


@dataclass
class Window:
    """Deltas between two snapshots, split by role."""

    seconds: float
    published: int
    confirmed: int
    consumed: int
    worker_cpu: float
    broker_cpu: float
    publisher_io_share: float  # fraction of wall time publishers sat in sendall/recv, waiting on the broker
    consumer_io_share: float
    consumer_reads: int
    busiest_worker: float  # CPU share of the busiest generator process: near 1.0 would make it the bottleneck
    other_cpu: float  # CPU seconds of every other process on the machine (other users' tests)
    broker_idle_cores: float = 0.0  # set by the scenario: broker CPU before our load started


class WorkerGroup:
    """Publishers and consumers for one scenario run; always use as a context manager so that processes are
    stopped and reaped whatever happens."""

    def __init__(self, specs: list[Spec], broker_pid: int | None) -> None:
        self.specs = specs
        self.broker_pid = broker_pid
        ctx = context()
        self.ctl: Any = ctx.RawArray("q", 1 + SLOTS * len(specs))
        self.results: Any = ctx.Queue()
        self.procs: list[BaseProcess] = [
            ctx.Process(target=run_worker, args=(spec, self.ctl, i, self.results), daemon=True)
            for i, spec in enumerate(specs)
        ]
        self.reports: list[dict[str, Any]] = []
        self._stopped = False

    def __enter__(self) -> WorkerGroup:
        for proc in self.procs:
            proc.start()
        self._wait_all(lambda s: s == STATE_READY, READY_TIMEOUT, "connect")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _state(self, i: int) -> int:
        return int(self.ctl[1 + i * SLOTS + SLOT_STATE])

    def _slot(self, i: int, field_no: int) -> int:
        return int(self.ctl[1 + i * SLOTS + field_no])

    def _wait_all(self, ok: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not all(ok(self._state(i)) for i in range(len(self.specs))):
            self.check_failures()
            if time.monotonic() > deadline:
                raise WorkerFailed(f"workers did not {what} within {timeout:.0f} s")
            time.sleep(0.02)

    def check_failures(self) -> None:
        # A worker that died before reporting (killed, crashed at import) has an exit code but no state.
        failed = [
            i
            for i, proc in enumerate(self.procs)
            if self._state(i) == STATE_FAILED or (proc.exitcode is not None and self._state(i) != STATE_DONE)
        ]
        if failed:
            self._collect(2.0)
            errors = [r["error"] for r in self.reports if r["error"]]
            raise WorkerFailed(errors[0] if errors else f"worker(s) {failed} failed")

    def start(self, measuring: bool = False) -> None:
        self.ctl[0] = MEASURE if measuring else RUN

    def measure(self) -> None:
        self.ctl[0] = MEASURE

    def finished(self, indexes: list[int]) -> bool:
        self.check_failures()
        return all(self._state(i) == STATE_DONE for i in indexes)

    def snapshot(self) -> Snapshot:
        n = len(self.specs)
        return Snapshot(
            at=time.monotonic(),
            counts=[self._slot(i, SLOT_COUNT) for i in range(n)],
            confirmed=[self._slot(i, SLOT_CONFIRMED) for i in range(n)],
            io_ns=[self._slot(i, SLOT_IO_NS) for i in range(n)],
            syscalls=[self._slot(i, SLOT_SYSCALLS) for i in range(n)],
            worker_cpu=[self._slot(i, SLOT_CPU_US) / 1e6 for i in range(n)],
            broker_cpu=_cpu_or_zero(self.broker_pid),
            broker_rss=_rss_or_zero(self.broker_pid),
            machine_busy=procstat.machine_busy_seconds(),
        )

    def window(self, a: Snapshot, b: Snapshot) -> Window:
        secs = b.at - a.at
        pubs = [i for i, s in enumerate(self.specs) if isinstance(s, PublisherSpec)]
        cons = [i for i, s in enumerate(self.specs) if isinstance(s, ConsumerSpec)]

        def delta(rows: list[int], snap_field: str) -> int:
            return sum(getattr(b, snap_field)[i] - getattr(a, snap_field)[i] for i in rows)

        def share(rows: list[int]) -> float:
            # capped: a counter read mid-update can make the share overshoot by one batch
            return min(1.0, delta(rows, "io_ns") / 1e9 / secs / len(rows)) if rows else 0.0

        return Window(
            seconds=secs,
            published=delta(pubs, "counts"),
            confirmed=delta(pubs, "confirmed"),
            consumed=delta(cons, "counts"),
            worker_cpu=sum(b.worker_cpu) - sum(a.worker_cpu),
            other_cpu=(b.machine_busy - a.machine_busy)
            - (b.broker_cpu - a.broker_cpu)
            - (sum(b.worker_cpu) - sum(a.worker_cpu)),
            busiest_worker=max(y - x for x, y in zip(a.worker_cpu, b.worker_cpu, strict=True)) / secs,
            broker_cpu=b.broker_cpu - a.broker_cpu,
            publisher_io_share=share(pubs),
            consumer_io_share=share(cons),
            consumer_reads=delta(cons, "syscalls"),
        )

    def latencies(self) -> list[tuple[int, int]]:
        """(latency_ns, weight) samples from all workers; only valid after stop()."""
        return [tuple(x) for r in self.reports for x in r["latencies"]]  # type: ignore[misc]

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.ctl[0] = STOP
        self._collect(JOIN_TIMEOUT)
        for proc in self.procs:
            proc.join(timeout=max(0.1, JOIN_TIMEOUT / 4))
            if proc.is_alive():
                proc.terminate()  # stuck in a blocked sendall: it is ours, and the run is over
                proc.join(timeout=2)
        errors = [r["error"] for r in self.reports if r["error"]]
        if errors:
            raise WorkerFailed(errors[0])

    def _collect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.reports) < len(self.procs) and time.monotonic() < deadline:
            try:
                self.reports.append(self.results.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                break


def _cpu_or_zero(pid: int | None) -> float:
    try:
        return procstat.cpu_seconds(pid) if pid else 0.0
    except OSError:
        return 0.0  # broker gone (crashed or stopped): the run fails elsewhere; don't mask that with a trace


def _rss_or_zero(pid: int | None) -> int:
    try:
        return procstat.rss_bytes(pid) if pid else 0
    except OSError:
        return 0
