"""A fleet of mostly idle connections: N connections, each negotiating heartbeat 60 and publishing one message a
second to a queue of its own that it consumes from (no-ack). Reported: the broker's CPU (% of one core) and RSS
while the fleet runs, and the delivery latency (publish to delivery, p50/p99) the clients see.

The client is WORKERS processes, each one thread driving its share of the sockets through epoll, from
pre-encoded frames: its cost per message is a send and a receive. Each connection publishes at its own phase
within the second, so the load is even. Bounded: every phase has a deadline, and the sockets are closed at the
end whatever happened.

The figures are those of the messages published in the measured window: each carries its publish time, a
delivery counts only when that time falls in the window, and after the window the clients stop publishing and
read until every such message has arrived (or DRAIN_S has passed: what has not arrived by then is counted lost,
and the latency percentiles count a lost message as later than any delivered one). The clients' own CPU per
message is reported beside the broker's: on a machine with few cores they compete for them."""

from __future__ import annotations

import math
import multiprocessing
import os
import resource
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from pamqp import commands, frame, header

from bench.procstat import cpu_seconds, main_thread_wait_seconds, rss_bytes

HEARTBEAT_S = 60
SETUP_TIMEOUT_S = 30.0
DRAIN_S = 10.0  # after the window, how long the clients wait for the window's last messages
_HEADER = struct.Struct(">BHI")
_STAMP = struct.Struct(">d")
FRAME_END = b"\xce"


@dataclass
class FleetResult:
    connections: int
    seconds: float
    sent: int  # published in the window
    delivered: int  # of those, delivered by the end of the drain
    cpu_percent: float  # of one core, broker process, over the window
    rss_bytes: int
    p50_ms: float  # publish to receipt, of the window's messages (a lost one counts as the latest)
    p99_ms: float
    setup_s: float
    waited_percent: float  # of the time, the broker's main thread was runnable but without a core
    client_cpu_s: float = 0.0  # the client processes' CPU over the window, all of them
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the machine's load average at the window's end

    def broker_us_per_msg(self) -> float:
        return self.cpu_percent / 100 * self.seconds / self.sent * 1e6 if self.sent else math.nan

    def client_us_per_msg(self) -> float:
        return self.client_cpu_s / self.sent * 1e6 if self.sent else math.nan

    def line(self, name: str) -> str:
        return (
            f"  {name:8} fleet n={self.connections:<6} {self.sent / self.seconds:7.0f} msg/s"
            f"  cpu {self.cpu_percent:5.1f}% ({self.broker_us_per_msg():6.1f} µs/msg;"
            f" clients {self.client_us_per_msg():6.1f})"
            f"  rss {self.rss_bytes / 2**20:7.1f} MiB"
            f"  ({self.rss_bytes / self.connections / 1024:5.1f} KiB/conn)  delivery p50 {self.p50_ms:6.2f} ms"
            f"  p99 {self.p99_ms:7.2f} ms  ({self.delivered}/{self.sent} delivered, setup {self.setup_s:.1f} s,"
            f" main thread waited for a core {self.waited_percent:.0f}% of the time,"
            f" load {self.load[0]:.1f})"
        )


BODY_FRAME_AT = 7 + 8  # offset of the publish time in a body frame


class Member:
    """One connection of the fleet: its socket, its publish's three frames pre-encoded in one buffer (only the
    publish time changes), what it has read."""

    def __init__(self, sock: socket.socket, queue: str) -> None:
        self.sock = sock
        method = frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
        props = commands.Basic.Properties()
        head = method + frame.marshal(header.ContentHeader(0, _STAMP.size, props), 1)
        self.frames = bytearray(head + _HEADER.pack(3, 1, _STAMP.size) + bytes(_STAMP.size) + FRAME_END)
        self.stamp_at = len(head) + 7
        self.buf = bytearray()

    def publish(self) -> None:
        _STAMP.pack_into(self.frames, self.stamp_at, time.perf_counter())
        self.sock.send(self.frames)

    def read(self, window: Window) -> None:
        """Read what arrived; count each delivery of a message published in the window, with its latency."""
        try:
            chunk = self.sock.recv(4096)
        except BlockingIOError:
            return
        if not chunk:
            raise ConnectionError("the broker closed a fleet connection")
        now = time.perf_counter()
        buf = self.buf
        if buf:
            buf += chunk
            data: bytes | bytearray = buf
        else:
            data = chunk
        pos = window.take(data, now)
        if pos < len(data):
            if buf:
                del buf[:pos]
            else:
                buf += data[pos:]
        else:
            buf.clear()


class Window:
    """The measured window [start, end) of a worker: the latencies of the deliveries of messages published in
    it, and how many."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.latencies: list[float] = []

    def take(self, data: bytes | bytearray, now: float) -> int:
        """Count the deliveries in the complete frames of `data`; return where the incomplete rest begins."""
        pos, n = 0, len(data)
        while n - pos >= 7:
            kind, _ch, size = _HEADER.unpack_from(data, pos)
            if n - pos < size + 8:
                break
            if kind == 3 and size == _STAMP.size:
                stamp = _STAMP.unpack_from(data, pos + 7)[0]
                if self.start <= stamp < self.end:
                    self.latencies.append(now - stamp)
            elif kind == 1 and struct.unpack_from(">HH", data, pos + 7) == (10, 50):
                raise ConnectionError(f"the broker closed a fleet connection: {bytes(data[pos : pos + 8 + size])!r}")
            pos += size + 8
        return pos


def _read_until(sock: socket.socket, buf: bytearray, wanted: tuple[int, int]) -> None:
    """Read frames until the method `wanted` (class, method) arrives on any channel (setup only)."""
    while True:
        while len(buf) >= 7 and len(buf) >= _HEADER.unpack_from(buf)[2] + 8:
            kind, _ch, size = _HEADER.unpack_from(buf)
            ids = struct.unpack_from(">HH", buf, 7) if kind == 1 else None
            payload = bytes(buf[: size + 8])
            del buf[: size + 8]
            if ids == wanted:
                return
            if ids in ((10, 50), (20, 40)):
                raise ConnectionError(f"refused during setup: {payload[:200]!r}")
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection during setup")
        buf += chunk


def join(url: str, index: int) -> Member:
    """Open one connection with heartbeat 60, a channel, an exclusive queue and a consumer on it (pipelined)."""
    parsed = urlparse(url)
    sock = socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5672), SETUP_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    user, password = unquote(parsed.username or "guest"), unquote(parsed.password or "guest")
    vhost = unquote(parsed.path[1:]) if len(parsed.path) > 1 else "/"
    buf = bytearray()
    sock.sendall(frame.marshal(header.ProtocolHeader(), 0))
    _read_until(sock, buf, (10, 10))
    start_ok = commands.Connection.StartOk(
        client_properties={"product": "amqpd-bench-fleet"}, mechanism="PLAIN", response=f"\0{user}\0{password}"
    )
    sock.sendall(frame.marshal(start_ok, 0))
    _read_until(sock, buf, (10, 30))
    queue = f"fleet-{index}"
    sock.sendall(
        b"".join(
            [
                frame.marshal(commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=HEARTBEAT_S), 0),
                frame.marshal(commands.Connection.Open(virtual_host=vhost), 0),
                frame.marshal(commands.Channel.Open(), 1),
                frame.marshal(commands.Queue.Declare(queue=queue, exclusive=True, auto_delete=True), 1),
                frame.marshal(commands.Basic.Consume(queue=queue, no_ack=True), 1),
            ]
        )
    )
    _read_until(sock, buf, (60, 21))  # basic.consume-ok
    member = Member(sock, queue)
    member.buf = buf
    sock.setblocking(False)
    return member


WORKERS = 4  # client processes: one Python thread cannot publish and read 10,000 messages a second on a busy machine


def run_fleet(
    url: str,
    pid: int | None,
    connections: int,
    seconds: float,
    warmup: float = 5.0,
    workers: int = WORKERS,
    rate: float = 1.0,
) -> FleetResult:
    """Open the fleet from `workers` processes, let it run `warmup` seconds, then measure `seconds`; each
    connection publishes `rate` messages a second (0: idle but for heartbeats)."""
    ctx = multiprocessing.get_context("spawn")
    shares = [range(w, connections, workers) for w in range(min(workers, connections))]
    pipes, procs = [], []
    started = time.perf_counter()
    try:
        for share in shares:
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(url, share, theirs, rate), daemon=True)
            proc.start()
            pipes.append(ours)
            procs.append(proc)
        for ours in pipes:  # each says "joined" (or why not)
            _receive(ours, SETUP_TIMEOUT_S + connections * 0.05)
        setup_s = time.perf_counter() - started
        measure_from = time.perf_counter() + 0.5 + warmup
        for ours in pipes:
            ours.send((measure_from - warmup, measure_from, measure_from + seconds))
        _sleep_until(measure_from)
        cpu0 = cpu_seconds(pid) if pid else 0.0
        wait0 = main_thread_wait_seconds(pid) if pid else 0.0
        _sleep_until(measure_from + seconds)
        cpu = (cpu_seconds(pid) - cpu0) if pid else 0.0
        waited = (main_thread_wait_seconds(pid) - wait0) if pid else 0.0
        rss = rss_bytes(pid) if pid else 0
        load = os.getloadavg()
        outcomes = [_receive(ours, 60 + seconds + DRAIN_S) for ours in pipes]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    sent = sum(o[0] for o in outcomes)
    latencies = sorted(x for o in outcomes for x in o[1])

    def pick(q: float) -> float:
        """The q-quantile of the window's messages, a lost one later than any delivered one."""
        i = min(sent - 1, int(q * sent))
        return latencies[i] * 1e3 if 0 <= i < len(latencies) else math.inf if sent else math.nan

    return FleetResult(
        connections,
        seconds,
        sent,
        len(latencies),
        100 * cpu / seconds,
        rss,
        pick(0.5),
        pick(0.99),
        setup_s,
        100 * waited / seconds,
        sum(o[2] for o in outcomes),
        load,
    )


def _receive(pipe: Any, timeout: float) -> Any:
    if not pipe.poll(timeout):
        raise TimeoutError("a fleet worker did not answer in time")
    got = pipe.recv()
    if isinstance(got, str):
        raise ConnectionError(f"a fleet worker failed: {got}")
    return got


def _sleep_until(when: float) -> None:
    while (left := when - time.perf_counter()) > 0:
        time.sleep(min(left, 0.5))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _worker(url: str, indexes: range, pipe: Any, rate: float) -> None:
    """One client process: join its share of the fleet, then drive it in the windows the parent names and
    read the window's last deliveries. Sends (published in the window, their latencies, its CPU seconds in
    the window)."""
    members: list[Member] = []
    poller = select.epoll()
    try:
        for i in indexes:
            member = join(url, i)
            members.append(member)
        by_fd = {m.sock.fileno(): m for m in members}
        for fd in by_fd:
            poller.register(fd, select.EPOLLIN)
        pipe.send(("joined",))
        warm_from, measure_from, until = pipe.recv()
        _sleep_until(warm_from)
        window = Window(measure_from, until)
        drive(members, by_fd, poller, warm_from, measure_from, window, rate)
        cpu0 = _cpu_seconds()
        sent = drive(members, by_fd, poller, measure_from, until, window, rate)
        cpu = _cpu_seconds() - cpu0
        drain(by_fd, poller, window, sent, until + DRAIN_S)
        pipe.send((sent, window.latencies, cpu))
    except (OSError, ConnectionError) as exc:
        pipe.send(repr(exc))
    finally:
        for member in members:
            member.sock.close()
        poller.close()


def drive(
    members: list[Member],
    by_fd: dict[int, Member],
    poller: select.epoll,
    start: float,
    end: float,
    window: Window,
    rate: float = 1.0,
) -> int:
    """Each member publishes `rate` times a second at its own phase from `start` to `end`; deliveries are read
    as they come. Returns how many were published."""
    n = len(members)
    sent = 0
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = int((now - start) * n * rate)  # publishes owed by now, member (k mod n) at start + k/(n*rate)
        while sent < due:
            members[sent % n].publish()
            sent += 1
        for fd, _events in poller.poll(min(0.005, end - now)):
            by_fd[fd].read(window)
    return sent


def drain(by_fd: dict[int, Member], poller: select.epoll, window: Window, sent: int, deadline: float) -> None:
    """Read until the window's `sent` messages have all been delivered, or the deadline."""
    while len(window.latencies) < sent and (left := deadline - time.perf_counter()) > 0:
        for fd, _events in poller.poll(min(0.05, left)):
            by_fd[fd].read(window)
