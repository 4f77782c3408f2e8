"""Delayed delivery under load: `python -m bench.delayed [--messages N] [--max-delay-ms MS] [--transient]`.

Publishes N messages (100-byte bodies, persistent by default, with confirms, 2,000 outstanding) to a
durable x-delayed-message exchange of a fresh amqpd, each with a random `x-delay` from 1 ms to
--max-delay-ms, while a consumer (another process, no-ack) waits on the bound queue. Reports the publish
rate, how late each message arrived after its due time (p50 / p99 / max, measured from the client's send
time, so it includes the trip to the broker), how many arrived out of due order, and the broker's RSS
before publishing and at its peak while messages waited. Only amqpd: the reference RabbitMQ has no
delayed-message plugin.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

import pika
from pamqp import body as pbody
from pamqp import commands, frame, header

from amqpd.testing import BrokerProcess
from bench.codec import FrameScanner
from bench.procstat import PeakRss, rss_bytes
from bench.wire import RawConnection

EXCHANGE = "bench-delayed"
QUEUE = "bench-delayed-q"
# A message's number fills the first 8 body bytes, where FrameScanner(want_stamps=True) reads its "stamp".
INDEX = struct.Struct(">Q")


def _publish_frames(i: int, delay: int, persistent: bool) -> bytes:
    props = commands.Basic.Properties(headers={"x-delay": delay}, delivery_mode=2 if persistent else 1)
    payload = INDEX.pack(i).ljust(100, b".")
    return (
        frame.marshal(commands.Basic.Publish(0, EXCHANGE, "k"), 1)
        + frame.marshal(header.ContentHeader(0, len(payload), props), 1)
        + frame.marshal(pbody.ContentBody(payload), 1)
    )


def receive_indexes(
    url: str, queue: str, n: int, limit_s: float, on_ready: Callable[[], None] | None = None
) -> list[tuple[int, float]]:
    """(index, arrival wall time) of the next n deliveries on queue (consumed with no-ack), bounded by
    limit_s. Raw frames through the bench's scanner, so that 100k fit in a test's time (tests use it too).
    The arrival time is when the read that brought the delivery returned, never earlier than the delivery."""
    conn = RawConnection(url).connect()
    assert conn.sock is not None
    scanner = FrameScanner(want_stamps=True)
    conn.rpc(1, commands.Basic.Consume(queue=queue, no_ack=True), commands.Basic.ConsumeOk)
    if on_ready is not None:
        on_ready()
    got: list[tuple[int, float]] = [(i, time.time()) for i in scanner.feed(conn.take_buffered()).stamps]
    deadline = time.monotonic() + limit_s
    conn.sock.settimeout(0.2)
    while len(got) < n and time.monotonic() < deadline:
        try:
            read = conn.sock.recv_into(scanner.free())
        except TimeoutError:
            continue
        if not read:
            raise ConnectionError("broker closed the consumer's connection")
        now = time.time()
        got.extend((i, now) for i in scanner.commit(read).stamps)
    conn.close(wait=False)
    return got


def _consume(url: str, n: int, limit_s: float, out: Any) -> None:
    """Consumer process: sends "ready", then every (index, arrival) once all came or time ran out."""
    out.put(receive_indexes(url, QUEUE, n, limit_s, lambda: out.put("ready")))


def publish_delayed(
    url: str, delays: list[int], persistent: bool = True, window: int = 2000
) -> tuple[list[float], list[float], float]:
    """Send every message with confirms; returns each message's send and confirm times and the publish rate.
    The broker took each message in between: its due time is its arrival at the broker plus its delay."""
    frames = [_publish_frames(i, d, persistent) for i, d in enumerate(delays)]
    conn = RawConnection(url).connect()
    conn.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    assert conn.sock is not None
    scanner = FrameScanner()
    sent_at: list[float] = []
    confirmed_at: list[float] = []
    sent = confirmed = 0
    started = time.perf_counter()
    while confirmed < len(frames):
        burst = min(window - (sent - confirmed), len(frames) - sent, 500)
        if burst > 0:
            now = time.time()
            conn.sock.sendall(b"".join(frames[sent : sent + burst]))
            sent_at.extend([now] * burst)
            sent += burst
        n = conn.sock.recv_into(scanner.free())
        now = time.time()
        for tag, _multiple in scanner.commit(n).acks:
            confirmed = max(confirmed, tag)
        confirmed_at.extend([now] * (confirmed - len(confirmed_at)))
    rate = len(frames) / (time.perf_counter() - started)
    conn.close()
    return sent_at, confirmed_at, rate


def run(messages: int, max_delay_ms: int, persistent: bool = True, seed: int = 15) -> dict[str, Any]:
    rng = random.Random(seed)
    delays = [rng.randint(1, max_delay_ms) for _ in range(messages)]
    with BrokerProcess() as broker:
        setup = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = setup.channel()
        ch.exchange_declare(EXCHANGE, "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
        ch.queue_declare(QUEUE, durable=True)
        ch.queue_bind(QUEUE, EXCHANGE, "k")
        setup.close()
        assert broker.proc is not None
        pid = broker.proc.pid
        rss_before = rss_bytes(pid)
        out: Any = mp.get_context("spawn").Queue()
        consumer = mp.get_context("spawn").Process(
            target=_consume, args=(broker.url, messages, max_delay_ms / 1000 + 120, out)
        )
        consumer.start()
        assert out.get(timeout=30) == "ready"
        with PeakRss(pid, 0.2) as rss:
            sent_at, confirmed_at, rate = publish_delayed(broker.url, delays, persistent)
            arrivals = out.get(timeout=max_delay_ms / 1000 + 150)
        consumer.join(10)
    return _report(
        messages,
        max_delay_ms,
        persistent,
        delays,
        (sent_at, confirmed_at),
        arrivals,
        rate,
        rss_before,
        max(rss_before, rss.peak),
    )


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    pct = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
    return round(pct[49], 1), round(pct[98], 1), round(values[-1], 1)


def _report(
    messages: int,
    max_delay_ms: int,
    persistent: bool,
    delays: list[int],
    times: tuple[list[float], list[float]],
    arrivals: list[tuple[int, float]],
    rate: float,
    rss_before: int,
    rss_peak: int,
) -> dict[str, Any]:
    """Lateness is bracketed: the broker fixed each due time between the message's send and its confirm,
    so the true lateness lies between `late_ms` from the confirm (a lower bound) and from the send (upper)."""
    sent_at, confirmed_at = times
    late_upper = [(at - sent_at[i]) * 1000 - delays[i] for i, at in arrivals]
    late_lower = [(at - confirmed_at[i]) * 1000 - delays[i] for i, at in arrivals]
    # Surely out of order: arrived after a message whose due time was surely later than its own.
    due_low = [sent_at[i] * 1000 + delays[i] for i, _ in arrivals]
    due_high = [confirmed_at[i] * 1000 + delays[i] for i, _ in arrivals]
    out_of_order = sum(1 for k in range(1, len(arrivals)) if due_high[k] < due_low[k - 1])
    upper, lower = _percentiles(late_upper), _percentiles(late_lower)
    # Once the publisher is done, the broker has only the timers to serve: lateness then is the timers' own.
    done = max(confirmed_at)
    quiet = [late for late, d in zip(late_lower, due_low, strict=True) if d / 1000 > done + 0.5]
    return {
        "messages": messages,
        "max_delay_ms": max_delay_ms,
        "persistent": persistent,
        "delivered": len(arrivals),
        "publish_msg_s": round(rate),
        "late_ms_p50_p99_max_from_send": upper,
        "late_ms_p50_p99_max_from_confirm": lower,
        "late_ms_p50_p99_max_after_publishing": _percentiles(quiet) if quiet else None,
        "early": sum(1 for x in late_upper if x < -2),
        "surely_out_of_order": out_of_order,
        "rss_before_mb": round(rss_before / 2**20, 1),
        "rss_peak_mb": round(rss_peak / 2**20, 1),
        "rss_per_waiting_message_bytes": round((rss_peak - rss_before) / messages) if messages else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--max-delay-ms", type=int, default=60_000)
    parser.add_argument("--transient", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.messages, args.max_delay_ms, not args.transient), indent=2))


if __name__ == "__main__":
    main()
