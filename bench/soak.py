"""Long runs and churn: `python -m bench.soak --minutes N [--connections N] [--rabbitmq]`.

Starts its own amqpd on ephemeral ports (with `--rabbitmq`, runs the same generator against the reference
RabbitMQ at 127.0.0.1:5672 too, in a vhost of its own that it deletes afterwards) and, for N minutes, keeps
a pool of connections that open and close, queues declared, consumed, cancelled and deleted, channels opened
and closed, and four confirmed flows at a steady rate: persistent messages to a durable queue, messages that
expire in a TTL queue and are dead-lettered, a stream appended and read, and delayed messages through an
x-delayed-message exchange (skipped where that exchange type does not exist: Debian's RabbitMQ has no
plugin for it). Every sample it records the broker process's RSS and open fds, the p99 of a ping (a
passive queue.declare round trip on a connection of its own: the loop's lag seen from outside), the p99 of
publish-to-confirm, and the objects the management API counts. At the end every confirmed message must have
been consumed exactly once; the verdict (see `verdict`) also asks RSS and fds to stay flat after warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import statistics
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

import aiormq
import httpx
from pamqp.commands import Basic

from bench.procstat import listener_pid, rss_bytes

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
RABBITMQ_MGMT = "http://127.0.0.1:15672"
FLOWS = ("durable", "ttl", "stream", "delayed")
# Flat after warm-up: the last third's median within this share (plus a small floor) of the second third's.
RSS_GROWTH = 0.10
RSS_FLOOR = 8 << 20
FD_GROWTH = 0.10
FD_FLOOR = 20
P99_GROWTH = 2.0  # the ping and confirm p99: noisy on a shared machine, so only a doubling counts
P99_FLOOR_MS = 20.0
CONNECT_TIMEOUT = 30.0
RABBITMQ_SOCKETS_LEFT = 200  # for the other users of the shared reference broker
STOP_TIMEOUT = 60.0
HTTP_ATTEMPTS = 3


@dataclass
class Sample:
    t: float
    rss_mb: float
    fds: int
    ping_p99_ms: float
    confirm_p99_ms: float
    queues: int
    connections: int
    channels: int
    confirmed: int


@dataclass
class Target:
    name: str
    url: str  # the AMQP URL, vhost included
    mgmt: str
    vhost: str
    pid: int


@dataclass
class Flow:
    confirmed: list[int] = field(default_factory=list)
    seen: Counter[int] = field(default_factory=Counter)

    def lost(self) -> int:
        return sum(1 for n in self.confirmed if self.seen[n] == 0)

    def duplicated(self) -> int:
        return sum(1 for n in self.confirmed if self.seen[n] > 1)


async def close_all(conns: list[aiormq.abc.AbstractConnection]) -> None:
    await asyncio.gather(*(asyncio.wait_for(c.close(), CONNECT_TIMEOUT) for c in conns), return_exceptions=True)


def p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Soak:
    def __init__(self, target: Target, seconds: float, connections: int, rate: float, sample_s: float) -> None:
        self.target = target
        self.seconds = seconds
        self.connections = connections
        self.rate = rate
        self.sample_s = sample_s
        self.flows = {f: Flow() for f in FLOWS}
        self.pings: list[float] = []
        self.confirms: list[float] = []
        self.samples: list[Sample] = []
        self.delayed = True
        self.churned = Counter[str]()
        self.prefix = f"soak-{uuid.uuid4().hex[:8]}"
        self.stop = asyncio.Event()
        self.http = httpx.AsyncClient(auth=("guest", "guest"), timeout=30)

    def q(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    async def run(self) -> dict[str, Any]:
        conn = await aiormq.connect(self.target.url)
        try:
            await self.declare(conn)
            await self.consume(conn)
            self.started = time.monotonic()
            workers = [
                self.population(),
                self.ping(),
                self.queue_churn(),
                self.sampler(),
                *(self.publisher(flow) for flow in FLOWS if flow != "delayed" or self.delayed),
            ]
            tasks = [asyncio.ensure_future(w) for w in workers]
            await asyncio.sleep(self.seconds)
            self.stop.set()
            # Bounded: a worker stuck on a broker that stopped answering must not keep the run going.
            done, stuck = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
            for t in stuck:
                t.cancel()
            self.churned["workers_stuck_at_stop"] = len(stuck)
            # a worker that died early (the sampler, a publisher) leaves the rest of the run unmeasured
            self.churned["workers_failed"] = sum(1 for t in done if t.exception() is not None)
            await self.drain()
            await self.cleanup(conn)
        finally:
            await conn.close()
            await self.http.aclose()
        return self.report()

    async def declare(self, conn: aiormq.abc.AbstractConnection) -> None:
        ch = await conn.channel()
        await ch.queue_declare(self.q("durable"), durable=True)
        await ch.queue_declare(self.q("dlq"), durable=True)
        ttl = {"x-message-ttl": 100, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.q("dlq")}
        await ch.queue_declare(self.q("ttl"), durable=True, arguments=ttl)
        # small, so that retention holds the stream at a steady size within the warm-up third
        stream = {
            "x-queue-type": "stream",
            "x-max-length-bytes": 1_000_000,
            "x-stream-max-segment-size-bytes": 100_000,
        }
        await ch.queue_declare(self.q("stream"), durable=True, arguments=stream)
        await ch.queue_declare(self.q("delayed"), durable=True)
        await ch.close()
        self.delayed = await self.declare_delayed()

    async def declare_delayed(self) -> bool:
        """False when the broker has no x-delayed-message exchange type (it closes the connection)."""
        conn = await aiormq.connect(self.target.url)
        try:
            ch = await conn.channel()
            args = {"x-delayed-type": "direct"}
            await ch.exchange_declare(self.q("delay"), exchange_type="x-delayed-message", durable=True, arguments=args)
            await ch.queue_bind(self.q("delayed"), self.q("delay"), routing_key="d")
            return True
        except aiormq.exceptions.AMQPError:
            return False
        finally:
            if not conn.is_closed:
                await conn.close()

    async def consume(self, conn: aiormq.abc.AbstractConnection) -> None:
        for flow, queue, args in (
            ("durable", "durable", None),
            ("ttl", "dlq", None),
            ("stream", "stream", {"x-stream-offset": "first"}),
            ("delayed", "delayed", None),
        ):
            ch = await conn.channel()
            await ch.basic_qos(prefetch_count=200)
            await ch.basic_consume(self.q(queue), self.counter(flow, ch), arguments=args)

    def counter(self, flow: str, ch: aiormq.abc.AbstractChannel) -> Any:
        seen = self.flows[flow].seen

        async def on_message(m: aiormq.abc.DeliveredMessage) -> None:
            seen[int(m.body[:12])] += 1
            await ch.basic_ack(m.delivery_tag)

        return on_message

    async def publisher(self, flow: str) -> None:
        """One confirmed message per tick, each awaited: a steady rate whatever the broker's pace."""
        conn = await aiormq.connect(self.target.url)
        ch = await conn.channel(publisher_confirms=True)
        exchange, key, headers = "", self.q(flow), None
        if flow == "delayed":
            exchange, key, headers = self.q("delay"), "d", {"x-delay": 300}
        props = Basic.Properties(delivery_mode=2, headers=headers)
        period = 1 / self.rate
        next_at = time.monotonic()
        for n in itertools.count():
            if self.stop.is_set():
                break
            t0 = time.monotonic()
            body = b"%012d" % n + b"." * 500
            ok = await ch.basic_publish(body, exchange=exchange, routing_key=key, properties=props)
            self.confirms.append(time.monotonic() - t0)
            if isinstance(ok, Basic.Ack):
                self.flows[flow].confirmed.append(n)
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await conn.close()

    async def population(self) -> None:
        """`connections` connections held open; the oldest are closed and new ones opened all the time, so that
        the whole pool is replaced about every minute."""
        pool: list[aiormq.abc.AbstractConnection] = []

        async def open_one() -> None:
            try:
                c = await asyncio.wait_for(aiormq.connect(self.target.url), CONNECT_TIMEOUT)
                await asyncio.wait_for(c.channel(), CONNECT_TIMEOUT)
            except (TimeoutError, aiormq.exceptions.AMQPError, OSError):
                self.churned["connections_failed"] += 1  # a refusal is a figure, not the end of the run
                return
            pool.append(c)
            self.churned["connections_opened"] += 1

        for i in range(0, self.connections, 20):
            await asyncio.gather(*(open_one() for _ in range(min(20, self.connections - i))))
            if self.stop.is_set():
                break
        per_tick = max(1, self.connections // 60)
        while not self.stop.is_set():
            old, pool[:] = pool[:per_tick], pool[per_tick:]
            await close_all(old)
            self.churned["connections_closed"] += len(old)
            await asyncio.gather(*(open_one() for _ in range(self.connections - len(pool))))
            await asyncio.sleep(1)
        await close_all(pool)

    async def queue_churn(self) -> None:
        """Queues declared, bound, consumed, cancelled and deleted; channels opened and closed; now and then a
        stream reader from the first offset that reads a little and goes."""
        conn = await aiormq.connect(self.target.url)
        for n in itertools.count():
            if self.stop.is_set():
                break
            ch = await conn.channel()
            name = self.q(f"tmp{n}")
            await ch.queue_declare(name)
            await ch.queue_bind(name, "amq.direct", routing_key=name)
            await ch.basic_publish(b"x", exchange="amq.direct", routing_key=name)
            ok = await ch.basic_consume(name, self.ack_on(ch))
            await ch.basic_cancel(ok.consumer_tag)
            await ch.queue_delete(name)
            if n % 10 == 0:
                await ch.basic_qos(prefetch_count=10)
                reader = await ch.basic_consume(
                    self.q("stream"), self.ack_on(ch), arguments={"x-stream-offset": "first"}
                )
                await asyncio.sleep(0.1)
                await ch.basic_cancel(reader.consumer_tag)
            await ch.close()
            self.churned["queues"] += 1
            await asyncio.sleep(0.2)
        await conn.close()

    @staticmethod
    def ack_on(ch: aiormq.abc.AbstractChannel) -> Any:
        async def on_message(m: aiormq.abc.DeliveredMessage) -> None:
            await ch.basic_ack(m.delivery_tag)

        return on_message

    async def ping(self) -> None:
        conn = await aiormq.connect(self.target.url)
        ch = await conn.channel()
        while not self.stop.is_set():
            t0 = time.monotonic()
            await ch.queue_declare(self.q("durable"), passive=True)
            self.pings.append(time.monotonic() - t0)
            await asyncio.sleep(0.2)
        await conn.close()

    async def sampler(self) -> None:
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), self.sample_s)
            except TimeoutError:
                pass
            await self.sample()

    async def sample(self) -> None:
        pings, self.pings = self.pings, []
        confirms, self.confirms = self.confirms, []
        counts = await self.objects()
        pid = self.target.pid
        self.samples.append(
            Sample(
                t=round(time.monotonic() - self.started, 1),
                rss_mb=round(rss_bytes(pid) / 2**20, 1),
                fds=len(os.listdir(f"/proc/{pid}/fd")),
                ping_p99_ms=round(p99(pings) * 1000, 2),
                confirm_p99_ms=round(p99(confirms) * 1000, 2),
                confirmed=sum(len(f.confirmed) for f in self.flows.values()),
                **counts,
            )
        )
        print(json.dumps({"broker": self.target.name, **asdict(self.samples[-1])}), flush=True)

    async def objects(self) -> dict[str, int]:
        """Queues, connections and channels of our vhost, as the management API counts them."""
        vhost = self.target.vhost
        counts = {}
        for key, path in (
            ("queues", f"queues/{quote(vhost, safe='')}"),
            ("connections", "connections"),
            ("channels", "channels"),
        ):
            r = await self.get(f"{self.target.mgmt}/api/{path}")
            counts[key] = sum(1 for o in r.json() if o.get("vhost") == vhost)
        return counts

    async def get(self, url: str) -> httpx.Response:
        """A GET that survives the server closing an idle keep-alive connection just as it is reused (seen after
        15 minutes of a 30-minute run: the sampler died with it, and the rest of the run went unsampled)."""
        for attempt in range(HTTP_ATTEMPTS):
            try:
                r = await self.http.get(url)
                r.raise_for_status()
                return r
            except httpx.TransportError:
                if attempt == HTTP_ATTEMPTS - 1:
                    raise
                self.churned["http_retries"] += 1
        raise AssertionError("unreachable")

    async def drain(self, timeout: float = 60) -> None:
        """Wait (bounded) until every confirmed message has been consumed: TTL, dead-lettering and delays are
        asynchronous."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(f.lost() for f in self.flows.values()):
            await asyncio.sleep(0.5)

    async def cleanup(self, conn: aiormq.abc.AbstractConnection) -> None:
        ch = await conn.channel()
        for name in ("durable", "dlq", "ttl", "stream", "delayed"):
            await ch.queue_delete(self.q(name))
        if self.delayed:
            await ch.exchange_delete(self.q("delay"))

    def report(self) -> dict[str, Any]:
        flows = {
            name: {"confirmed": len(f.confirmed), "lost": f.lost(), "duplicated": f.duplicated()}
            for name, f in self.flows.items()
            if name != "delayed" or self.delayed
        }
        return {
            "broker": self.target.name,
            "seconds": self.seconds,
            "connections": self.connections,
            "delayed": self.delayed if self.delayed else "skipped: no x-delayed-message exchange type",
            "flows": flows,
            "churned": dict(self.churned),
            "samples": [asdict(s) for s in self.samples],
            "verdict": verdict(
                self.samples, flows, self.churned["workers_stuck_at_stop"], self.churned["workers_failed"]
            ),
        }


def _grew(values: list[float], share: float, floor: float) -> dict[str, Any]:
    """Warm-up is the first third; the last third's median must be within `share` (or `floor`) of the second's."""
    third = max(1, len(values) // 3)
    second, last = values[third : 2 * third] or values[:1], values[2 * third :] or values[-1:]
    before, after = statistics.median(second), statistics.median(last)
    return {"second_third": before, "last_third": after, "grew": after > before * (1 + share) + floor}


def verdict(samples: list[Sample], flows: dict[str, dict[str, int]], stuck: int = 0, failed: int = 0) -> dict[str, Any]:
    lost = sum(f["lost"] for f in flows.values())
    duplicated = sum(f["duplicated"] for f in flows.values())
    if len(samples) < 3:
        return {"pass": False, "why": "fewer than three samples"}
    rss = _grew([s.rss_mb for s in samples], RSS_GROWTH, RSS_FLOOR / 2**20)
    fds = _grew([float(s.fds) for s in samples], FD_GROWTH, FD_FLOOR)
    ping = _grew([s.ping_p99_ms for s in samples], P99_GROWTH - 1, P99_FLOOR_MS)
    confirm = _grew([s.confirm_p99_ms for s in samples], P99_GROWTH - 1, P99_FLOOR_MS)
    return {
        "pass": not (
            stuck or failed or lost or duplicated or rss["grew"] or fds["grew"] or ping["grew"] or confirm["grew"]
        ),
        "lost": lost,
        "duplicated": duplicated,
        "workers_stuck_at_stop": stuck,
        "workers_failed": failed,
        "rss_mb": rss,
        "fds": fds,
        "ping_p99_ms": ping,
        "confirm_p99_ms": confirm,
    }


def connection_budget(wanted: int, brokers: int) -> int:
    """The generator holds one socket per connection, and a broker it started inherits the same fd limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, min(wanted, (soft - 200) // max(1, brokers)))


async def soak_amqpd(seconds: float, connections: int, rate: float, sample_s: float) -> dict[str, Any]:
    from amqpd.testing import BrokerProcess

    with BrokerProcess(management=True) as broker:
        assert broker.proc is not None
        target = Target("amqpd", broker.url, broker.mgmt_url, "/", broker.proc.pid)
        return await Soak(target, seconds, connections, rate, sample_s).run()


async def soak_rabbitmq(seconds: float, connections: int, rate: float, sample_s: float) -> dict[str, Any]:
    vhost = f"soak-{uuid.uuid4().hex[:8]}"
    pid = listener_pid(5672)
    if pid is None:
        raise SystemExit("no RabbitMQ listening on 127.0.0.1:5672 (bash scripts/ensure-rabbitmq.sh)")
    async with httpx.AsyncClient(auth=("guest", "guest"), timeout=30) as http:
        v = quote(vhost, safe="")
        (await http.put(f"{RABBITMQ_MGMT}/api/vhosts/{v}")).raise_for_status()
        try:
            perms = {"configure": ".*", "write": ".*", "read": ".*"}
            (await http.put(f"{RABBITMQ_MGMT}/api/permissions/{v}/guest", json=perms)).raise_for_status()
            target = Target("rabbitmq", RABBITMQ_URL + v, RABBITMQ_MGMT, vhost, pid)
            return await Soak(target, seconds, connections, rate, sample_s).run()
        finally:
            await http.delete(f"{RABBITMQ_MGMT}/api/vhosts/{v}")


def run_one(broker: str, seconds: float, connections: int, rate: float, sample_s: float) -> dict[str, Any]:
    soak = soak_amqpd if broker == "amqpd" else soak_rabbitmq
    try:
        return asyncio.run(soak(seconds, connections, rate, sample_s))
    except Exception as e:  # noqa: BLE001 — one broker's failed run must not lose the other's report
        return {"broker": broker, "flows": {}, "delayed": None, "verdict": {"pass": False, "why": repr(e)}}


def rabbitmq_free_sockets() -> int:
    """What RabbitMQ can still accept, less room for everyone else using it: its socket limit follows its own
    fd limit, which is not ours to change."""
    node = httpx.get(f"{RABBITMQ_MGMT}/api/nodes", auth=("guest", "guest"), timeout=30).json()[0]
    return max(1, int(node["sockets_total"]) - int(node["sockets_used"]) - RABBITMQ_SOCKETS_LEFT)


def run_all(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Side by side, each generator in a process of its own, so that neither slows the other's client; both
    with the same number of connections."""
    seconds = a.minutes * 60
    brokers = ["amqpd", "rabbitmq"] if a.rabbitmq else ["amqpd"]
    connections = connection_budget(a.connections, len(brokers))
    if a.rabbitmq:
        connections = min(connections, rabbitmq_free_sockets())
    print(f"soak: {connections} connections per broker for {a.minutes:g} min", flush=True)
    if len(brokers) == 1:
        return [run_one("amqpd", seconds, connections, a.rate, a.sample_seconds)]
    with ProcessPoolExecutor(len(brokers)) as pool:
        runs = [pool.submit(run_one, b, seconds, connections, a.rate, a.sample_seconds) for b in brokers]
        return [r.result() for r in runs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=1000, help="held open and churned (capped by the fd limit)")
    ap.add_argument("--rate", type=float, default=20.0, help="confirmed messages per second, per flow")
    ap.add_argument("--sample-seconds", type=float, default=60.0)
    ap.add_argument("--rabbitmq", action="store_true", help="also run against the reference RabbitMQ, side by side")
    ap.add_argument("--json", help="write the full report here")
    a = ap.parse_args(argv)
    reports = run_all(a)
    for r in reports:
        print(
            json.dumps(
                {"broker": r["broker"], "flows": r["flows"], "delayed": r["delayed"], "verdict": r["verdict"]}, indent=1
            )
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0 if all(r["verdict"]["pass"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
