"""CPU time and RSS of OS processes from /proc, the same way for the brokers and for our own workers, so
the µs-per-message figures of both sides are directly comparable."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from urllib.parse import urlsplit

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads: beam.smp's schedulers included)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS


def thread_cpu_seconds(pid: int, tid: int) -> float:
    """utime + stime of one thread of a process (the main thread's id is the pid: amqpd's event loop)."""
    fields = _stat_fields_of(f"/proc/{pid}/task/{tid}/stat")
    return (int(fields[11]) + int(fields[12])) / _TICKS


def main_thread_wait_seconds(pid: int) -> float:
    """Seconds the process's main thread (amqpd's event loop) spent runnable but waiting for a core
    (/proc/PID/schedstat): on a busy machine, how much the broker was held back by others' load."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def machine_busy_seconds() -> float:
    """CPU seconds spent by all processes on the machine (all cores), from /proc/stat. Minus the broker's and
    the generator's, it shows how much other load shared the cores during a window. Softirq time (loopback
    TCP, charged to no process) is left out: it is this run's own traffic as much as anyone's."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, _softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + steal) / _TICKS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class PeakRss:
    """A process's RSS sampled in a thread while the block runs: `start` at entry, `peak` the highest seen
    (start included)."""

    def __init__(self, pid: int, interval_s: float) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.start = self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def listener_pid(port: int) -> int | None:
    """The process listening on a TCP port: socket inode from /proc/net/tcp*, then whose fd holds it.
    Works for an amqpd given only as a URL as well as for RabbitMQ's beam.smp."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:
            continue  # process exited or is not ours to inspect
    return None


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                found.add(f"socket:[{inode}]")
    return found


def broker_pid(url: str, fallback_name: str | None = None) -> int | None:
    """The broker behind an AMQP URL: the listener on its port, else the process named `fallback_name`."""
    port = urlsplit(url).port or 5672
    return listener_pid(port) or (named_pid(fallback_name) if fallback_name else None)


def named_pid(name: str) -> int | None:
    """Fallback when the listener can't be seen: the first process whose comm is `name` (e.g. beam.smp)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "comm").read_text().strip() == name:
                    return int(proc.name)
            except OSError:
                continue
    return None


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and all its descendants, living or exited: its own utime + stime, plus the
    cutime + cstime of children it has reaped, plus the same for each living child (Spark's Python workers
    come and go under the JVM)."""
    kids = _children()
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            fields = _stat_fields(current)
        except OSError:
            continue  # exited meanwhile: its time is in its parent's cutime once reaped
        total += sum(int(f) for f in fields[11:15]) / _TICKS
        stack += kids.get(current, [])
    return total


def children(pid: int) -> list[int]:
    return _children().get(pid, [])


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _stat_fields(pid: int) -> list[str]:
    return _stat_fields_of(f"/proc/{pid}/stat")


def _stat_fields_of(path: str) -> list[str]:
    raw = Path(path).read_text()
    # the command name may contain spaces and parentheses: split after the last ')'
    return raw[raw.rindex(")") + 2 :].split()


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                kids.setdefault(int(_stat_fields(int(proc.name))[1]), []).append(int(proc.name))
            except OSError:
                continue
    return kids
