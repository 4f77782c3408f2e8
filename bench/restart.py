"""Restart time with a durable backlog: `python -m bench.restart [--messages N] [--rounds R]`.

Publishes N persistent 100-byte messages with confirms into a durable queue of a fresh amqpd, then, for a
clean stop (SIGTERM) and for kill -9, measures the time from starting the process to a client seeing all N
messages in the queue (passive declare), plus disk usage before and after draining.

The same for the reference RabbitMQ only with `--rabbitmq`, because it stops and kills the reference broker:
use it only on a RabbitMQ you started yourself (e.g. by scripts/ensure-rabbitmq.sh in this session), never on
a machine's service somebody else relies on. It is restarted the way ensure-rabbitmq.sh starts it
(`rabbitmq-server -detached`) and left running. Without the flag, RabbitMQ's figures come from
RABBITMQ-FACTS.md (200k durable messages: ~7.8 s after kill -9, of which 6.6 s is its empty boot) and are
printed as such, never as a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from pamqp import commands

from amqpd.testing import BrokerProcess
from bench.backlog import DRAIN_ACK_EVERY, DRAIN_PREFETCH, _phase
from bench.codec import FrameScanner, publish_frames
from bench.options import Options
from bench.wire import RawConnection, Target, declare_queue, queue_depth
from bench.workers import ConsumerSpec

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


RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
RABBITMQ_BOOT_LIMIT_S = 900


def rabbitmq_pid() -> int:
    out = subprocess.run(["pgrep", "-f", "beam.smp.*-s rabbit"], capture_output=True, text=True).stdout.split()
    if len(out) != 1:
        raise RuntimeError(f"expected one RabbitMQ node process, found {out}")
    return int(out[0])


def port_open(port: int = 5672) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_gone(pid: int, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise RuntimeError(f"RabbitMQ pid {pid} did not exit")


def rabbitmq_time_to_ready(messages: int) -> float:
    """Start the stopped node and time it until a client sees every message (its boot included, as amqpd's)."""
    started = time.perf_counter()
    subprocess.run(["rabbitmq-server", "-detached"], check=True, capture_output=True)
    deadline = time.monotonic() + RABBITMQ_BOOT_LIMIT_S
    while time.monotonic() < deadline:
        if port_open():
            try:
                conn = RawConnection(RABBITMQ_URL).connect()
                depth = queue_depth(conn, QUEUE)
                conn.close()
                if depth == messages:
                    return time.perf_counter() - started
            except (OSError, RuntimeError, AssertionError, EOFError):
                pass  # listening but still booting, or the queue not recovered yet
        time.sleep(0.05)
    raise RuntimeError(f"RabbitMQ did not show {messages} messages within {RABBITMQ_BOOT_LIMIT_S} s")


def rabbitmq_round(messages: int) -> dict[str, float]:
    """The reference's restart with the same backlog: after `rabbitmqctl stop` and after kill -9."""
    rate = fill(RABBITMQ_URL, messages)
    pid = rabbitmq_pid()
    subprocess.run(["rabbitmqctl", "stop"], check=True, capture_output=True)
    wait_gone(pid)
    clean = rabbitmq_time_to_ready(messages)
    pid = rabbitmq_pid()
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    crashed = rabbitmq_time_to_ready(messages)
    drained = drain_after_restart(Target("rabbitmq", RABBITMQ_URL, rabbitmq_pid()), messages)
    conn = RawConnection(RABBITMQ_URL).connect()
    conn.rpc(1, commands.Queue.Delete(queue=QUEUE), commands.Queue.DeleteOk)
    conn.close()
    return {
        "confirmed_publish_msg_s": rate,
        "restart_after_clean_stop_s": clean,
        "restart_after_kill_9_s": crashed,
        "drain_after_restart_msg_s": drained,
    }


def drain_after_restart(target: Target, messages: int) -> float:
    """Consume the recovered backlog (manual acks, as S4 drains): msg/s. Every message must come back."""
    spec = ConsumerSpec(
        target.url, QUEUE, no_ack=False, prefetch=DRAIN_PREFETCH, ack_every=DRAIN_ACK_EVERY, limit=messages
    )
    window, _ = _phase(target, Options(), [spec])
    if window.consumed != messages:
        raise RuntimeError(f"drained {window.consumed} of {messages} recovered messages")
    return window.consumed / window.seconds


def empty_boot(tmp: str) -> float:
    started = time.perf_counter()
    broker = BrokerProcess(data_dir=os.path.join(tmp, "empty")).start()
    RawConnection(broker.url).connect().close()
    elapsed = time.perf_counter() - started
    broker.stop()
    return elapsed


def disk_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


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
        drained = drain_after_restart(Target("amqpd", broker.url, broker.proc.pid if broker.proc else None), messages)
        broker.stop()  # a clean stop writes the checkpoint that lets drained segments go
        broker = BrokerProcess(data_dir=data_dir).start(timeout=600)
        broker.stop()
        return {
            "confirmed_publish_msg_s": rate,
            "restart_after_clean_stop_s": clean,
            "restart_after_kill_9_s": crashed,
            "drain_after_restart_msg_s": drained,
            "empty_boot_s": empty_boot(tmp),
            "disk_bytes_per_message": disk_full / messages,
            "disk_bytes_after_drain": disk_bytes(data_dir),
        }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="bench/results")
    p.add_argument(
        "--rabbitmq",
        action="store_true",
        help="also stop, kill -9 and restart the reference RabbitMQ on 127.0.0.1:5672 (only one you started)",
    )
    args = p.parse_args(argv)
    rounds = [run_round(args.messages) for _ in range(args.rounds)]
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"amqpd restart with {args.messages:,} durable 100-byte messages (median of {args.rounds}):")
    for key, value in medians.items():
        print(f"  {key:32s} {value:14,.2f}")
    result: dict[str, object] = {"messages": args.messages, "rounds": rounds, "medians": medians}
    if args.rabbitmq:
        reference = [rabbitmq_round(args.messages) for _ in range(args.rounds)]
        ref_medians = {key: statistics.median(r[key] for r in reference) for key in reference[0]}
        print(f"RabbitMQ (measured in this run, median of {args.rounds}), and amqpd/RabbitMQ:")
        for key, value in ref_medians.items():
            print(f"  {key:32s} {value:14,.2f}   {medians[key] / value:6.2f}")
        result.update(rabbitmq_rounds=reference, rabbitmq_medians=ref_medians)
    else:
        ref = RABBITMQ_REFERENCE
        print(
            f"RabbitMQ 3.10 reference (RABBITMQ-FACTS.md, not measured in this run): {ref['messages']:,} messages, "
            f"restart after kill -9 {ref['restart_after_kill_s']} s, empty boot {ref['empty_boot_s']} s"
        )
        result["rabbitmq_reference"] = ref
    os.makedirs(args.out, exist_ok=True)
    out = Path(args.out) / f"restart-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
