"""Shovel throughput: N persistent messages moved with ack-mode on-confirm, amqpd's shovel and RabbitMQ's
shovel plugin doing the same move, amqpd -> RabbitMQ and RabbitMQ -> amqpd.

    python -m bench.shovel --messages 20000

Needs the reference RabbitMQ with rabbitmq_shovel enabled (its management API on 15672). Bounded: each move
waits at most --timeout seconds; queues and shovels are named bench-shovel-<random> and removed after."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import httpx
import pika

from amqpd.testing import BrokerProcess

RABBIT_AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
RABBIT_API = "http://127.0.0.1:15672"


def fill(url: str, queue: str, n: int) -> None:
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        body = b"x" * 100
        for _ in range(n):
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


def depth(url: str, queue: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        return conn.channel().queue_declare(queue, durable=True).method.message_count


def timed_move(start: Callable[[], None], done: Callable[[], bool], timeout: float) -> float:
    began = time.monotonic()
    start()
    while not done():
        if time.monotonic() - began > timeout:
            raise TimeoutError("the move did not finish")
        time.sleep(0.05)
    return time.monotonic() - began


def run(n: int, timeout: float) -> list[tuple[str, str, float]]:
    rows = []
    rabbit = httpx.Client(base_url=RABBIT_API, auth=("guest", "guest"), timeout=30)
    with BrokerProcess(management=True) as broker:
        ours = httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"), timeout=30)
        for direction in ("amqpd -> RabbitMQ", "RabbitMQ -> amqpd"):
            src_url, dest_url = (
                (broker.url, RABBIT_AMQP) if direction.startswith("amqpd") else (RABBIT_AMQP, broker.url)
            )
            for runner, api in (("amqpd's shovel", ours), ("RabbitMQ's shovel", rabbit)):
                name = f"bench-shovel-{uuid.uuid4().hex[:8]}"
                runs_on_src = (api is ours) == direction.startswith("amqpd")
                value = {
                    "src-uri": "amqp://" if runs_on_src else src_url,
                    "src-queue": f"{name}-src",
                    "dest-uri": dest_url if runs_on_src else "amqp://",
                    "dest-queue": f"{name}-dest",
                    "src-prefetch-count": 1000,
                    "ack-mode": "on-confirm",
                }
                fill(src_url, f"{name}-src", n)
                depth(dest_url, f"{name}-dest")
                try:
                    seconds = timed_move(
                        lambda api=api, name=name, value=value: api.put(
                            f"/api/parameters/shovel/%2F/{name}", json={"value": value}
                        ).raise_for_status(),
                        lambda dest_url=dest_url, name=name: depth(dest_url, f"{name}-dest") >= n,
                        timeout,
                    )
                    rows.append((direction, runner, n / seconds))
                finally:
                    api.delete(f"/api/parameters/shovel/%2F/{name}")
                    for client in (ours, rabbit):
                        for q in ("src", "dest"):
                            client.delete(f"/api/queues/%2F/{name}-{q}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args()
    rows = run(args.messages, args.timeout)
    print(f"{'move':<20} {'shovel':<18} {'msg/s':>8}")
    for direction, runner, rate in rows:
        print(f"{direction:<20} {runner:<18} {rate:>8.0f}")


if __name__ == "__main__":
    main()
