"""A fleet of mostly idle connections: N connections, each negotiating heartbeat 60 and publishing one message a
second to a queue of its own that it consumes from (no-ack). Reported: the broker's CPU (% of one core) and RSS
while the fleet runs, and the delivery latency (publish to delivery, p50/p99) the clients see.

The client is one thread driving every socket through a selector, from pre-encoded frames: its cost per message
is a send and a receive. Each connection publishes at its own phase within the second, so the load is even.
Bounded: every phase has a deadline, and the sockets are closed at the end whatever happened."""

from __future__ import annotations

import selectors
import socket
import struct
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from pamqp import commands, frame, header

from bench.procstat import cpu_seconds, rss_bytes

HEARTBEAT_S = 60
SETUP_TIMEOUT_S = 30.0
_HEADER = struct.Struct(">BHI")
_STAMP = struct.Struct(">d")
FRAME_END = b"\xce"


@dataclass
class FleetResult:
    connections: int
    seconds: float
    sent: int
    delivered: int
    cpu_percent: float  # of one core, broker process
    rss_bytes: int
    p50_ms: float
    p99_ms: float
    setup_s: float

    def line(self, name: str) -> str:
        return (
            f"  {name:8} fleet n={self.connections:<6} cpu {self.cpu_percent:5.1f}%"
            f"  rss {self.rss_bytes / 2**20:7.1f} MiB"
            f"  ({self.rss_bytes / self.connections / 1024:5.1f} KiB/conn)  delivery p50 {self.p50_ms:6.2f} ms"
            f"  p99 {self.p99_ms:7.2f} ms  ({self.delivered}/{self.sent} delivered, setup {self.setup_s:.1f} s)"
        )


class Member:
    """One connection of the fleet: its socket, its pre-encoded publish, what it has read."""

    def __init__(self, sock: socket.socket, queue: str) -> None:
        self.sock = sock
        method = frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
        props = commands.Basic.Properties()
        self.head = method + frame.marshal(header.ContentHeader(0, _STAMP.size, props), 1)
        self.buf = bytearray()

    def publish(self) -> None:
        body = _STAMP.pack(time.perf_counter())
        self.sock.send(self.head + b"\x03\x00\x01" + struct.pack(">I", len(body)) + body + FRAME_END)

    def read(self, latencies: list[float]) -> int:
        """Read what arrived; record each delivery's latency; return how many deliveries."""
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            return 0
        if not chunk:
            raise ConnectionError("the broker closed a fleet connection")
        self.buf += chunk
        now, count, buf, pos = time.perf_counter(), 0, self.buf, 0
        while len(buf) - pos >= 7:
            kind, _ch, size = _HEADER.unpack_from(buf, pos)
            if len(buf) - pos < size + 8:
                break
            if kind == 3 and size == _STAMP.size:
                latencies.append(now - _STAMP.unpack_from(buf, pos + 7)[0])
                count += 1
            elif kind == 1 and struct.unpack_from(">HH", buf, pos + 7) == (10, 50):
                raise ConnectionError(f"the broker closed a fleet connection: {bytes(buf[pos : pos + 8 + size])!r}")
            pos += size + 8
        del buf[:pos]
        return count


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


def run_fleet(url: str, pid: int | None, connections: int, seconds: float, warmup: float = 5.0) -> FleetResult:
    """Open the fleet, let it run `warmup` seconds, then measure `seconds`."""
    members: list[Member] = []
    selector = selectors.DefaultSelector()
    started = time.perf_counter()
    try:
        for i in range(connections):
            member = join(url, i)
            members.append(member)
            selector.register(member.sock, selectors.EVENT_READ, member)
        setup_s = time.perf_counter() - started
        latencies: list[float] = []
        drive(members, selector, warmup, [])
        cpu0 = cpu_seconds(pid) if pid else 0.0
        sent, delivered = drive(members, selector, seconds, latencies)
        cpu = (cpu_seconds(pid) - cpu0) if pid else 0.0
        rss = rss_bytes(pid) if pid else 0
    finally:
        for member in members:
            selector.unregister(member.sock)
            member.sock.close()
        selector.close()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3 if latencies else float("nan")  # noqa: E731
    return FleetResult(connections, seconds, sent, delivered, 100 * cpu / seconds, rss, pick(0.5), pick(0.99), setup_s)


def drive(
    members: list[Member], selector: selectors.BaseSelector, seconds: float, latencies: list[float]
) -> tuple[int, int]:
    """Each member publishes once a second at its own phase; deliveries are read as they come. Returns
    (published, delivered) in this window."""
    n = len(members)
    t0 = time.perf_counter()
    end = t0 + seconds
    sent = delivered = 0
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = int((now - t0) * n)  # publishes owed by now, member (k mod n) at t0 + k/n
        while sent < due:
            members[sent % n].publish()
            sent += 1
        for key, _events in selector.select(timeout=min(0.005, end - now)):
            delivered += key.data.read(latencies)
    return sent, delivered
