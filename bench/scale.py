"""python -m bench.scale — the cost of one operation on one object as the number of objects grows.

Each size runs in a fresh vhost of its own (created and removed through the management API, on amqpd and on the
reference RabbitMQ alike): declare N durable queues, bind each to amq.direct, consume from each, cancel, delete
half of them one by one (still bound), unbind the other half, import N more from a definitions document, then
delete the vhost with all it holds. A page of the management API's queue list (first and last page) is timed
after the declarations. Connections:
open C connections, close them; one connection with 1,000 channels, closed at once. Every phase is pipelined
(a window of requests in flight) from pre-encoded frames, so the client's cost is small next to the broker's.

With --fleet N: N connections at heartbeat 60 publishing a message a second each to a queue of their own
(bench/fleet.py): broker CPU, RSS and delivery p50/p99; RabbitMQ runs the largest fleet its free sockets allow
(the reference's limit is far below 10,000). With --recovery N: the time from starting amqpd on N durable queues
to its first connection (bench/queue_recovery.py; amqpd only, as the reference RabbitMQ may not be restarted).

Reported per phase: wall µs per operation, broker CPU µs per operation (utime+stime from /proc), and RSS per
object; then the amqpd/RabbitMQ ratio and, per broker, the largest size's cost over the smallest's (1.0: the
operation does not depend on how many objects exist). RabbitMQ is shared with other engineers and uses every
core; amqpd uses one. Bounded: every socket read and management request times out, and a phase that takes
longer than PHASE_DEADLINE_S ends that broker's larger sizes.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

from pamqp import commands, frame
from pamqp.base import Frame

from amqpd.testing import BrokerProcess, IsolatedVhost, ManagementClient
from bench.fleet import FleetResult, run_fleet
from bench.procstat import cpu_seconds, listener_pid, rss_bytes
from bench.queue_recovery import report as recovery_report
from bench.queue_recovery import run_recovery
from bench.wire import RawConnection

API_PAGES = 6  # management API requests per size, first and last page in turn
WINDOW = 256  # requests in flight per pipelined phase
PHASE_DEADLINE_S = 300.0
READ_TIMEOUT_S = 60.0
MGMT_TIMEOUT_S = 180.0  # RabbitMQ creates and deletes a vhost slowly on a loaded machine
CHANNELS_PER_CONNECTION = 1_000
_HEADER = struct.Struct(">BHI")
_METHOD = struct.Struct(">HH")


@dataclass
class Result:
    """One phase on one broker at one size: seconds of wall time and broker CPU for `count` operations."""

    wall_s: float
    cpu_s: float
    count: int
    rss_delta: int | None = None  # bytes, for phases that leave objects behind

    def wall_us(self) -> float:
        return self.wall_s * 1e6 / self.count

    def cpu_us(self) -> float:
        return self.cpu_s * 1e6 / self.count


@dataclass
class Broker:
    name: str
    url: str
    mgmt_url: str
    pid: int | None
    results: dict[tuple[str, int], Result] = field(default_factory=dict)
    stopped_at: dict[str, str] = field(default_factory=dict)  # phase family -> why it could not go on
    step: str = ""  # what it was doing, for the report when it stops


class Pipeline:
    """Send many pre-encoded requests, at most WINDOW unanswered, and check each reply's method id without
    decoding it; a channel.close or connection.close is decoded and raised."""

    def __init__(self, conn: RawConnection) -> None:
        assert conn.sock is not None
        self.sock = conn.sock
        self.sock.settimeout(READ_TIMEOUT_S)
        self.buf = bytearray(conn.take_buffered())

    def run(self, requests: list[bytes], reply: tuple[int, int]) -> None:
        for start in range(0, len(requests), WINDOW):
            batch = requests[start : start + WINDOW]
            self.sock.sendall(b"".join(batch))
            for _ in batch:
                self._expect(reply)

    def _expect(self, reply: tuple[int, int]) -> None:
        while True:
            payload = self._frame()
            if payload is None:
                continue
            ids = _METHOD.unpack_from(payload)
            if ids == reply:
                return
            if ids in ((20, 40), (10, 50)):  # channel.close, connection.close
                raise ConnectionError(f"broker closed: {payload[4:200]!r}")
            # anything else (a basic.deliver on a queue bound to amq.direct, say) is skipped

    def _frame(self) -> bytes | None:
        while len(self.buf) < 7 or len(self.buf) < _HEADER.unpack_from(self.buf)[2] + 8:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk
        kind, _ch, size = _HEADER.unpack_from(self.buf)
        payload = bytes(self.buf[7 : 7 + size])
        del self.buf[: size + 8]
        return payload if kind == 1 else None


def encode(methods: Iterable[Frame], channel: int = 1) -> list[bytes]:
    return [frame.marshal(m, channel) for m in methods]


def measure(broker: Broker, phase: str, size: int, count: int, action: Callable[[], None]) -> Result:
    broker.step = phase
    pid = broker.pid
    cpu0 = cpu_seconds(pid) if pid else 0.0
    rss0 = rss_bytes(pid) if pid else 0
    t0 = time.perf_counter()
    action()
    wall = time.perf_counter() - t0
    cpu = (cpu_seconds(pid) - cpu0) if pid else 0.0
    rss = (rss_bytes(pid) - rss0) if pid else None
    if wall > PHASE_DEADLINE_S:
        broker.stopped_at[phase] = f"{phase} took {wall:.0f} s at {size}: no larger size tried"
    result = Result(wall, cpu, count, rss)
    broker.results[(phase, size)] = result
    print(
        f"  {broker.name:8} {phase:18} n={size:<7} {result.wall_us():9.1f} µs/op wall {result.cpu_us():9.1f} µs/op cpu"
    )
    broker.step = f"after {phase}"
    return result


def queue_phases(broker: Broker, size: int) -> None:
    broker.step = "creating the vhost"
    admin = ManagementClient(broker.mgmt_url, timeout=MGMT_TIMEOUT_S)
    vhost = IsolatedVhost(admin, broker.url, f"bench-scale-{size}").create()
    try:
        conn = RawConnection(vhost.url).connect()
        pipe = Pipeline(conn)
        names = [f"q{i}" for i in range(size)]
        half, rest = names[: size // 2], names[size // 2 :]
        ops: list[tuple[str, list[bytes], tuple[int, int]]] = [
            ("queue.declare", encode(commands.Queue.Declare(queue=n, durable=True) for n in names), (50, 11)),
            (
                "queue.bind",
                encode(commands.Queue.Bind(queue=n, exchange="amq.direct", routing_key=n) for n in names),
                (50, 21),
            ),
            (
                "basic.consume",
                encode(commands.Basic.Consume(queue=n, consumer_tag=n, no_ack=True) for n in names),
                (60, 21),
            ),
            ("basic.cancel", encode(commands.Basic.Cancel(consumer_tag=n) for n in names), (60, 31)),
            ("queue.delete", encode(commands.Queue.Delete(queue=n) for n in half), (50, 41)),  # still bound
            (
                "queue.unbind",
                encode(commands.Queue.Unbind(queue=n, exchange="amq.direct", routing_key=n) for n in rest),
                (50, 51),
            ),
        ]
        for phase, requests, reply in ops:
            measure(broker, phase, size, len(requests), lambda r=requests, a=reply: pipe.run(r, a))  # type: ignore[misc]
            if phase == "queue.declare":
                measure(broker, "api page of 100", size, API_PAGES, lambda: api_pages(admin, vhost.name))
        conn.close()
        doc = {
            "queues": [{"name": f"d{i}", "durable": True, "auto_delete": False, "arguments": {}} for i in range(size)]
        }
        path = f"/definitions/{quote(vhost.name, safe='')}"
        measure(broker, "definitions/queue", size, size, lambda: admin.request("POST", path, doc))
        measure(broker, "vhost.delete/queue", size, len(rest) + size, vhost.remove)
    finally:
        remove(vhost)


def api_pages(admin: ManagementClient, vhost: str) -> None:
    """The first and the last page of the vhost's queue list, as the web UI asks for them."""
    path = f"/queues/{quote(vhost, safe='')}?page_size=100&name=&use_regex=false&pagination=true"
    total_pages = admin.request("GET", path + "&page=1")["page_count"]
    for i in range(1, API_PAGES):
        admin.request("GET", path + f"&page={total_pages if i % 2 else 1}")


def connection_phases(broker: Broker, count: int) -> None:
    broker.step = "creating the vhost"
    admin = ManagementClient(broker.mgmt_url, timeout=MGMT_TIMEOUT_S)
    vhost = IsolatedVhost(admin, broker.url, f"bench-scale-c{count}").create()
    conns: list[RawConnection] = []
    try:

        def open_all() -> None:
            for _ in range(count):
                conns.append(RawConnection(vhost.url).connect())

        def close_all() -> None:
            for c in conns:
                c.close()

        measure(broker, "connection.open", count, count, open_all)
        measure(broker, "connection.close", count, count, close_all)
    finally:
        for c in conns:
            c.close(wait=False)
        remove(vhost)


def channel_phase(broker: Broker) -> None:
    broker.step = "creating the vhost"
    admin = ManagementClient(broker.mgmt_url, timeout=MGMT_TIMEOUT_S)
    vhost = IsolatedVhost(admin, broker.url, "bench-scale-ch").create()
    try:
        conn = RawConnection(vhost.url).connect()
        opens = [frame.marshal(commands.Channel.Open(), ch) for ch in range(2, CHANNELS_PER_CONNECTION + 1)]
        Pipeline(conn).run(opens, (20, 11))
        measure(broker, "close 1k channels", CHANNELS_PER_CONNECTION, CHANNELS_PER_CONNECTION, conn.close)
    finally:
        remove(vhost)


def remove(vhost: IsolatedVhost) -> None:
    """Remove the vhost (again, if a measured removal did) on a new HTTP connection: one that timed out mid-request
    cannot be reused."""
    vhost.admin.close()
    vhost.remove()
    vhost.admin.close()


def free_sockets(broker: Broker) -> tuple[int, int] | None:
    """(sockets free, socket limit) as the broker's management API reports them (RabbitMQ's nodes endpoint),
    or None when it does not say: a shared broker may have its limit taken by other clients."""
    admin = ManagementClient(broker.mgmt_url, timeout=MGMT_TIMEOUT_S)
    try:
        nodes = admin.request("GET", "/nodes")
    finally:
        admin.close()
    if not nodes or "sockets_total" not in nodes[0]:
        return None
    return nodes[0]["sockets_total"] - nodes[0]["sockets_used"], nodes[0]["sockets_total"]


def run(broker: Broker, sizes: list[int], connections: list[int]) -> None:
    sockets = free_sockets(broker)
    if sockets is not None:
        print(f"  {broker.name}: {sockets[0]} of its {sockets[1]} sockets free")
        if sockets[0] < 2:
            broker.stopped_at["all"] = f"no free socket: its limit of {sockets[1]} is held by other clients"
            return
        for count in [c for c in connections if c > sockets[0] - 2]:
            broker.stopped_at[f"{count} connections"] = f"only {sockets[0]} of its {sockets[1]} sockets free"
        connections = [c for c in connections if c <= sockets[0] - 2]
    for size in sizes:
        try:
            queue_phases(broker, size)
        except (OSError, ConnectionError) as exc:
            broker.stopped_at["queues"] = f"at {size} queues, {broker.step}: {exc!r}"
            break
        if any(phase in broker.stopped_at for phase in PHASES[:-3]):  # one of the queue phases was too slow
            break
    for count in connections:
        try:
            connection_phases(broker, count)
        except (OSError, ConnectionError) as exc:
            broker.stopped_at["connections"] = f"at {count} connections, {broker.step}: {exc!r}"
            break
        if "connection.open" in broker.stopped_at:
            break
    if not connections:
        return
    try:
        channel_phase(broker)
    except (OSError, ConnectionError) as exc:
        broker.stopped_at["channels"] = f"{broker.step}: {exc!r}"


PHASES = (
    "queue.declare",
    "api page of 100",
    "queue.bind",
    "basic.consume",
    "basic.cancel",
    "queue.delete",
    "queue.unbind",
    "definitions/queue",
    "vhost.delete/queue",
    "connection.open",
    "connection.close",
    "close 1k channels",
)


def table(brokers: list[Broker]) -> str:
    """One row per (phase, size): µs/op wall and CPU per broker, the amqpd/RabbitMQ wall ratio, and RSS per
    object; then, per broker and phase, the largest size's wall µs/op over the smallest's."""
    head = f"{'phase':20} {'n':>7} " + " ".join(f"{b.name + ' wall':>13} {b.name + ' cpu':>12}" for b in brokers)
    lines = [head + f" {'ratio':>6} " + " ".join(f"{b.name + ' B/obj':>13}" for b in brokers)]
    keys = sorted({k for b in brokers for k in b.results}, key=lambda k: (PHASES.index(k[0]), k[1]))
    for phase, size in keys:
        got = [b.results.get((phase, size)) for b in brokers]
        cells = " ".join(f"{r.wall_us():13.1f} {r.cpu_us():12.1f}" if r else f"{'-':>13} {'-':>12}" for r in got)
        ratio = f"{got[0].wall_s / got[1].wall_s:6.2f}" if len(got) > 1 and got[0] and got[1] else f"{'-':>6}"
        rss = " ".join(_per_object(r, phase) for r in got)
        lines.append(f"{phase:20} {size:7} {cells} {ratio} {rss}")
    lines.append("ratio: amqpd's wall time over RabbitMQ's, same size, same run (below 1: amqpd is faster)")
    lines.append("")
    lines.append(
        "growth: µs/op at the largest size over the smallest, wall and broker CPU (1.0 = independent of the count)"
    )
    for b in brokers:
        for phase in PHASES:
            sizes = sorted(s for p, s in b.results if p == phase)
            if len(sizes) > 1:
                lo, hi = b.results[(phase, sizes[0])], b.results[(phase, sizes[-1])]
                cpu = f"{hi.cpu_us() / lo.cpu_us():5.2f}" if lo.cpu_s > 0 else "  -  "
                growth = f"wall {hi.wall_us() / lo.wall_us():5.2f}  cpu {cpu}"
                lines.append(f"  {b.name:8} {phase:20} {sizes[0]:>6}→{sizes[-1]:<7} {growth}")
        for family, why in b.stopped_at.items():
            lines.append(f"  {b.name:8} stopped ({family}): {why}")
    return "\n".join(lines)


def _per_object(r: Result | None, phase: str) -> str:
    if r is None or r.rss_delta is None or phase not in ("queue.declare", "connection.open"):
        return f"{'':>13}"
    return f"{r.rss_delta / r.count:13.0f}"


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n", 1)[0])
    p.add_argument("--queues", type=int, nargs="*", default=[1_000, 10_000], help="queue counts (default 1k 10k)")
    p.add_argument("--connections", type=int, nargs="*", default=[100, 1_000], help="connection counts")
    p.add_argument("--targets", nargs="+", default=["amqpd", "rabbitmq"], choices=["amqpd", "rabbitmq"])
    p.add_argument(
        "--rabbitmq-url", default=os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    )
    p.add_argument("--rabbitmq-mgmt", default="http://127.0.0.1:15672")
    p.add_argument("--amqpd-arg", action="append", default=[], help="passed to the amqpd the bench starts")
    p.add_argument("--fleet", type=int, nargs="*", default=[], help="fleets of heartbeat-60 connections at 1 msg/s")
    p.add_argument("--fleet-seconds", type=float, default=30.0, help="how long each fleet is measured")
    p.add_argument("--fleet-rate", type=float, default=1.0, help="messages a second per connection (0: idle)")
    p.add_argument("--recovery", type=int, nargs="*", default=[], help="durable queue counts to time recovery of")
    p.add_argument("--no-phases", action="store_true", help="only the fleet and recovery runs asked for")
    return p.parse_args(argv)


def fleets(args: argparse.Namespace) -> list[str]:
    """Each fleet size on a fresh amqpd, then on RabbitMQ the largest fleet its free sockets allow."""
    lines: list[str] = []
    results: list[tuple[str, FleetResult]] = []
    for count in args.fleet if "amqpd" in args.targets else []:
        with BrokerProcess(extra_args=args.amqpd_arg) as proc:
            assert proc.proc is not None
            results.append(
                ("amqpd", run_fleet(proc.url, proc.proc.pid, count, args.fleet_seconds, rate=args.fleet_rate))
            )
            print(results[-1][1].line("amqpd"))
    if "rabbitmq" in args.targets and args.fleet:
        port = int(args.rabbitmq_url.rsplit(":", 1)[1].split("/")[0])
        rabbitmq = Broker("rabbitmq", args.rabbitmq_url, args.rabbitmq_mgmt, listener_pid(port))
        sockets = free_sockets(rabbitmq)
        free = sockets[0] - 8 if sockets else max(args.fleet)  # a few left for other engineers' tests
        for count in sorted({min(c, free) for c in args.fleet if free > 0}):
            if count < max(args.fleet):
                total = sockets[1] if sockets else "?"
                lines.append(f"  rabbitmq fleet capped at {count}: its socket limit is {total} (free: {free + 8})")
                print(lines[-1])
            results.append(
                (
                    "rabbitmq",
                    run_fleet(args.rabbitmq_url, rabbitmq.pid, count, args.fleet_seconds, rate=args.fleet_rate),
                )
            )
            print(results[-1][1].line("rabbitmq"))
    return lines + [r.line(name) for name, r in results]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    raise_fd_limit()
    print(f"load average before: {os.getloadavg()}")
    brokers: list[Broker] = []
    extra = fleets(args)
    if args.recovery:
        extra += recovery_report(run_recovery(args.recovery, args.amqpd_arg))
    if args.no_phases:
        print("\n".join(extra))
        return 0
    if "amqpd" in args.targets:
        amqpd = Broker("amqpd", "", "", None)
        brokers.append(amqpd)
        print("amqpd:")
        # A fresh broker per family: memory the queues freed would otherwise hide what connections take.
        for sizes, connections in ((args.queues, []), ([], args.connections)):
            if not sizes and not connections:
                continue
            with BrokerProcess(extra_args=args.amqpd_arg, management=True) as proc:
                assert proc.proc is not None
                amqpd.url, amqpd.mgmt_url, amqpd.pid = proc.url, proc.mgmt_url, proc.proc.pid
                run(amqpd, sizes, connections)
    if "rabbitmq" in args.targets:
        port = int(args.rabbitmq_url.rsplit(":", 1)[1].split("/")[0])
        rabbitmq = Broker("rabbitmq", args.rabbitmq_url, args.rabbitmq_mgmt, listener_pid(port))
        brokers.append(rabbitmq)
        print("rabbitmq:")
        run(rabbitmq, args.queues, args.connections)
    print(f"load average after: {os.getloadavg()}")
    print(table(brokers))
    print("\n".join(extra))
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(READ_TIMEOUT_S)
    sys.exit(main())
