"""Restart time with a durable backlog: `python -m bench.restart [--messages N] [--rounds R]`.

Publishes N persistent 100-byte messages with confirms into a durable queue of a fresh amqpd, then, for a
clean stop (SIGTERM) and for kill -9, measures the time from starting the process to a client seeing all N
messages in the queue (passive declare), plus disk usage before and after draining.

The reference RabbitMQ here is the machine's own service: a benchmark must not stop or kill it, so its
figures come from RABBITMQ-FACTS.md (measured on this machine type: 200k durable messages after kill -9
restart in ~7.8 s, of which 6.6 s is its empty boot) and are printed as such, never as a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from pamqp import commands

from amqpd.testing import BrokerProcess
from bench.codec import FrameScanner, publish_frames
from bench.wire import RawConnection, declare_queue, queue_depth

QUEUE = "bench-restart"
RABBITMQ_REFERENCE = {"messages": 200_000, "restart_after_kill_s": 7.8, "empty_boot_s": 6.6}


def fill(url: str, messages: int, window: int = 2000) -> float:
    """Publish with confirms, `window` outstanding; returns msg/s."""
    conn = RawConnection(url).connect()
    declare_queue(conn, QUEUE, durable=True)
    conn.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    assert conn.sock is not None
    one = publish_frames(1, "", QUEUE, b"x" * 100, delivery_mode=2)
    scanner = FrameScanner()
    sent = confirmed = 0
    started = time.perf_counter()
    while confirmed < messages:
        burst = min(window - (sent - confirmed), messages - sent)
        if burst > 0:
            conn.sock.sendall(one * burst)
            sent += burst
        n = conn.sock.recv_into(scanner.free())
        for tag, multiple in scanner.commit(n).acks:
            confirmed = max(confirmed, tag) if multiple else max(confirmed, tag)
    elapsed = time.perf_counter() - started
    conn.close()
    return messages / elapsed


def time_to_ready(data_dir: str, messages: int) -> float:
    """Seconds from process start until a client sees every message."""
    started = time.perf_counter()
    broker = BrokerProcess(data_dir=data_dir).start(timeout=600)
    try:
        conn = RawConnection(broker.url).connect()
        depth = queue_depth(conn, QUEUE)
        elapsed = time.perf_counter() - started
        conn.close()
    finally:
        broker.stop()
    if depth != messages:
        raise RuntimeError(f"expected {messages} messages after restart, found {depth}")
    return elapsed


def empty_boot(tmp: str) -> float:
    started = time.perf_counter()
    broker = BrokerProcess(data_dir=os.path.join(tmp, "empty")).start()
    RawConnection(broker.url).connect().close()
    elapsed = time.perf_counter() - started
    broker.stop()
    return elapsed


def disk_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def drain(url: str) -> None:
    conn = RawConnection(url).connect()
    conn.rpc(1, commands.Queue.Purge(queue=QUEUE), commands.Queue.PurgeOk)
    conn.close()


def run_round(messages: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="amqpd-restart-") as tmp:
        data_dir = os.path.join(tmp, "data")
        broker = BrokerProcess(data_dir=data_dir).start()
        rate = fill(broker.url, messages)
        broker.stop()
        clean = time_to_ready(data_dir, messages)
        broker = BrokerProcess(data_dir=data_dir).start(timeout=600)
        broker.kill()
        crashed = time_to_ready(data_dir, messages)
        disk_full = disk_bytes(data_dir)
        broker = BrokerProcess(data_dir=data_dir).start(timeout=600)
        drain(broker.url)
        broker.stop()  # a clean stop writes the checkpoint that lets drained segments go
        broker = BrokerProcess(data_dir=data_dir).start(timeout=600)
        broker.stop()
        return {
            "confirmed_publish_msg_s": rate,
            "restart_after_clean_stop_s": clean,
            "restart_after_kill_9_s": crashed,
            "empty_boot_s": empty_boot(tmp),
            "disk_bytes_per_message": disk_full / messages,
            "disk_bytes_after_drain": disk_bytes(data_dir),
        }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    rounds = [run_round(args.messages) for _ in range(args.rounds)]
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    ref = RABBITMQ_REFERENCE
    print(f"amqpd restart with {args.messages:,} durable 100-byte messages (median of {args.rounds}):")
    for key, value in medians.items():
        print(f"  {key:32s} {value:14,.2f}")
    print(
        f"RabbitMQ 3.10 reference (RABBITMQ-FACTS.md, not measured in this run): {ref['messages']:,} messages, "
        f"restart after kill -9 {ref['restart_after_kill_s']} s, empty boot {ref['empty_boot_s']} s"
    )
    os.makedirs(args.out, exist_ok=True)
    out = Path(args.out) / f"restart-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {"messages": args.messages, "rounds": rounds, "medians": medians, "rabbitmq_reference": ref}, indent=2
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
