"""Delivery limits as pika and aio-pika consumers see them, counted across restarts (RabbitMQ 3.10's quorum
queues are the reference; amqpd also honours x-delivery-limit on classic queues, which RabbitMQ refuses)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest

from amqpd.testing import BrokerProcess

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def broker(data_dir: str) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=data_dir).start()
    yield b
    b.close()


def _channel(broker: BrokerProcess) -> Any:
    return pika.BlockingConnection(pika.URLParameters(broker.url)).channel()


def _declare(ch: Any, queue_type: str, limit: int = 3) -> None:
    ch.queue_declare("dlq", durable=True)
    args: dict[str, Any] = {"x-delivery-limit": limit, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    if queue_type == "quorum":
        args["x-queue-type"] = "quorum"
    ch.queue_declare("work", durable=True, arguments=args)


def _get_count(ch: Any, queue: str) -> tuple[int, int] | None:
    method, props, _ = ch.basic_get(queue)
    if method is None:
        return None
    return method.delivery_tag, (props.headers or {}).get("x-delivery-count")


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_delivery_count_survives_restart(broker: BrokerProcess, data_dir: str, crash: bool, queue_type: str) -> None:
    ch = _channel(broker)
    ch.confirm_delivery()
    _declare(ch, queue_type)
    ch.basic_publish("", "work", b"poison", PERSISTENT)
    seen = []
    for _ in range(2):
        tag, count = _get_count(ch, "work")  # type: ignore[misc]
        seen.append(count)
        ch.basic_nack(tag, requeue=True)
    # A confirmed publish after the nacks: its confirm waits for the commit that carries their counts too.
    ch.basic_publish("", "dlq", b"marker", PERSISTENT)
    if crash:
        broker.kill()
    else:
        broker.stop()
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        ch = _channel(broker)
        for _ in range(3):
            got = _get_count(ch, "work")
            if got is None:
                break
            seen.append(got[1])
            ch.basic_nack(got[0], requeue=True)
        assert seen == [0, 1, 2, 3]
        bodies = [ch.basic_get("dlq", auto_ack=True) for _ in range(2)]
        _, props, body = bodies[1]
        assert (bodies[0][2], body) == (b"marker", b"poison")
        assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    finally:
        broker.close()


def test_pika_consumer_requeue_loop_ends_in_the_dead_letter_queue(broker: BrokerProcess) -> None:
    ch = _channel(broker)
    _declare(ch, "classic", limit=4)
    ch.basic_publish("", "work", b"poison")
    counts: list[Any] = []

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        counts.append((props.headers or {}).get("x-delivery-count"))
        ch.basic_reject(method.delivery_tag, requeue=True)

    ch.basic_consume("work", on_message)
    deadline = 200
    while ch.queue_declare("dlq", passive=True).method.message_count == 0 and deadline:
        ch.connection.process_data_events(time_limit=0.05)
        deadline -= 1
    assert counts == [None, 1, 2, 3, 4]  # the first delivery to a consumer has no count (RabbitMQ 3.10)
    assert ch.queue_declare("work", passive=True).method.message_count == 0


def test_aio_pika_consumer_requeue_loop(broker: BrokerProcess) -> None:
    async def run() -> list[Any]:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel()
            await ch.declare_queue("dlq", durable=True)
            q = await ch.declare_queue(
                "work",
                durable=True,
                arguments={
                    "x-queue-type": "quorum",
                    "x-delivery-limit": 2,
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": "dlq",
                },
            )
            await ch.default_exchange.publish(aio_pika.Message(b"poison"), routing_key="work")
            counts: list[Any] = []
            async with q.iterator() as it:
                async for message in it:
                    counts.append(message.headers.get("x-delivery-count"))  # type: ignore[arg-type]
                    await message.nack(requeue=True)
                    if len(counts) == 3:
                        break
            dlq = await ch.get_queue("dlq")
            dead = await dlq.get(timeout=5, fail=False)
            for _ in range(50):
                if dead is not None:
                    break
                await asyncio.sleep(0.05)
                dead = await dlq.get(fail=False)
            assert dead is not None and dead.headers["x-first-death-reason"] == "delivery_limit"
            return counts

    assert asyncio.run(run()) == [None, 1, 2]
