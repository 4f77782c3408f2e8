"""Delayed delivery through a real broker process: timers, confirms, restart and kill -9.

The semantics are those of rabbitmq_delayed_message_exchange (README.md of
https://github.com/rabbitmq/rabbitmq-delayed-message-exchange: type x-delayed-message, x-delayed-type,
the x-delay header in ms; "Limitations": the plugin keeps delayed messages in a single-node Mnesia table).
amqpd keeps persistent ones in its store instead: they survive restart and kill -9 and are delivered once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from amqpd.testing import BrokerProcess

DELAYED = {"x-delayed-type": "direct"}


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def broker(data_dir: str) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=data_dir).start()
    yield b
    b.close()


def _channel(broker: BrokerProcess) -> Any:
    ch = pika.BlockingConnection(pika.URLParameters(broker.url)).channel()
    ch.confirm_delivery()
    return ch


def _topology(ch: Any, durable: bool = True) -> None:
    ch.exchange_declare("dx", "x-delayed-message", durable=durable, arguments=DELAYED)
    ch.queue_declare("q", durable=True)
    ch.queue_bind("q", "dx", "k")


def _publish(ch: Any, body: bytes, delay: int, persistent: bool = True) -> None:
    ch.basic_publish(
        "dx", "k", body, pika.BasicProperties(headers={"x-delay": delay}, delivery_mode=2 if persistent else 1)
    )


def _collect(ch: Any, n: int, limit: float = 20.0) -> list[tuple[bytes, float, dict[str, Any]]]:
    """(body, arrival wall time, headers) of the next n messages on q (acked), bounded by `limit` s."""
    got: list[tuple[bytes, float, dict[str, Any]]] = []

    def on_message(c: Any, m: Any, p: Any, b: bytes) -> None:
        got.append((b, time.time(), p.headers))
        c.basic_ack(m.delivery_tag)

    tag = ch.basic_consume("q", on_message)
    deadline = time.monotonic() + limit
    while len(got) < n and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)
    ch.basic_cancel(tag)
    return got


def test_consumer_gets_delayed_messages_in_due_order_never_early(broker: BrokerProcess) -> None:
    ch = _channel(broker)
    _topology(ch)
    sent = time.time()
    delays = {b"a": 900, b"b": 300, b"c": 600, b"d": 0}
    for body, delay in delays.items():
        _publish(ch, body, delay)
    got = _collect(ch, 4)
    assert [b for b, _, _ in got] == [b"d", b"b", b"c", b"a"]
    for body, arrived, headers in got:
        assert arrived >= sent + delays[body] / 1000 - 0.002  # never before its time (2 ms for clock rounding)
        assert headers["x-delay"] == -delays[body] if delays[body] else True


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
def test_confirmed_delayed_messages_survive_restart_and_are_delivered_once(
    broker: BrokerProcess, data_dir: str, crash: bool
) -> None:
    ch = _channel(broker)
    _topology(ch)
    _publish(ch, b"due-while-down", 200)
    _publish(ch, b"due-after", 2500)
    _publish(ch, b"transient", 200, persistent=False)  # kept in memory only: lost with the broker
    _publish(ch, b"early", 1)
    assert [b for b, _, _ in _collect(ch, 1)] == [b"early"]
    # A confirmed publish after the ack: its confirm waits for the commit carrying the ack (and the release
    # of "early" from the exchange's holder) too, so kill -9 cannot bring "early" back as unacked.
    ch.queue_declare("marker", durable=True)
    ch.basic_publish("", "marker", b"x", pika.BasicProperties(delivery_mode=2))
    ch.connection.close()  # a clean stop waits for open connections; the messages must not come due meanwhile
    broker.kill() if crash else broker.stop()
    time.sleep(0.3)  # let "due-while-down" come due while no broker runs
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        ch = _channel(broker)
        got = _collect(ch, 2)
        assert [b for b, _, _ in got] == [b"due-while-down", b"due-after"]
        assert [h["x-delay"] for _, _, h in got] == [-200, -2500]
        assert ch.exchange_declare("dx", "x-delayed-message", passive=True)
        broker.stop()  # and once more: nothing comes back twice
        broker = BrokerProcess(data_dir=data_dir).start()
        ch = _channel(broker)
        assert ch.queue_declare("q", passive=True).method.message_count == 0
        assert _collect(ch, 1, limit=0.5) == []
    finally:
        broker.close()


def test_a_deleted_delayed_exchange_leaves_nothing_waiting_after_restart(broker: BrokerProcess, data_dir: str) -> None:
    ch = _channel(broker)
    _topology(ch)
    _publish(ch, b"m", 500)
    ch.exchange_delete("dx")
    _topology(ch)  # declared again, with an empty schedule
    broker.stop()
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        ch = _channel(broker)
        assert _collect(ch, 1, limit=1.5) == []
    finally:
        broker.close()


def test_many_waiting_messages_come_out_in_due_order(broker: BrokerProcess) -> None:
    """10k messages with random delays up to 2 s (the bench runs 100k over a minute): every one arrives, in
    due order (equal due times in publish order), none before its time."""
    ch = _channel(broker)
    _topology(ch)
    rng = random.Random(15)
    delays = [rng.randrange(1, 2000) for _ in range(10_000)]
    sent = []
    for i, delay in enumerate(delays):
        sent.append(time.time())
        ch.basic_publish("dx", "k", b"%d" % i, pika.BasicProperties(headers={"x-delay": delay}))
    got = _collect(ch, len(delays), limit=60)
    assert len(got) == len(delays)
    order = [int(b) for b, _, _ in got]
    assert sorted(set(order)) == list(range(len(delays)))
    for i, arrived, _ in got:
        assert arrived >= sent[int(i)] + delays[int(i)] / 1000 - 0.002


def test_kombu_producer_with_x_delay(broker: BrokerProcess) -> None:
    """kombu/Celery setups that use the plugin declare the exchange and set x-delay themselves."""
    import kombu

    with kombu.Connection(broker.url) as conn:
        ex = kombu.Exchange("kx", type="x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
        queue = kombu.Queue("kq", ex, routing_key="task", durable=True)
        queue(conn.default_channel).declare()
        sent = time.time()
        conn.Producer().publish(
            {"n": 1}, exchange=ex, routing_key="task", headers={"x-delay": 400}, declare=[queue], serializer="json"
        )
        got: list[tuple[Any, float, Any]] = []
        with conn.Consumer(queue, callbacks=[lambda body, m: (got.append((body, time.time(), m.headers)), m.ack())]):
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    pass
    assert [g[0] for g in got] == [{"n": 1}]
    assert got[0][1] >= sent + 0.4 - 0.002 and got[0][2]["x-delay"] == -400


def test_message_ids_are_kept_across_restart(broker: BrokerProcess, data_dir: str) -> None:
    ch = _channel(broker)
    ch.queue_declare("ids", durable=True, arguments={"x-amqpd-message-id": True})
    for i in range(3):
        ch.basic_publish("", "ids", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    _, before, _ = ch.basic_get("ids", auto_ack=False)
    ch.connection.close()
    broker.stop()
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        ch = _channel(broker)
        got = [ch.basic_get("ids", auto_ack=True)[1] for _ in range(3)]
        ids = [p.headers["x-amqpd-message-id"] for p in got]
        assert ids[0] == before.headers["x-amqpd-message-id"] and ids == sorted(ids) and len(set(ids)) == 3
        assert [p.message_id for p in got] == [f"{i:020d}" for i in ids]
    finally:
        broker.close()


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
def test_thousands_waiting_across_a_restart_arrive_once_and_never_early(
    broker: BrokerProcess, data_dir: str, crash: bool
) -> None:
    ch = _channel(broker)
    _topology(ch)
    rng = random.Random(crash)
    delays = [rng.randrange(1, 3000) for _ in range(5000)]
    sent = []
    for i, delay in enumerate(delays):  # confirmed one by one (confirm_delivery): all stored before the stop
        sent.append(time.time())
        _publish(ch, b"%d" % i, delay)
    ch.connection.close()
    broker.kill() if crash else broker.stop()
    broker = BrokerProcess(data_dir=data_dir).start()
    try:
        got = _collect(_channel(broker), len(delays), limit=60)
        indexes = [int(b) for b, _, _ in got]
        assert sorted(indexes) == list(range(len(delays)))  # every one, once
        assert all(arrived >= sent[int(b)] + delays[int(b)] / 1000 - 0.002 for b, arrived, _ in got)
    finally:
        broker.close()
