"""What survives a restart of amqpd, as a pika user sees it (RabbitMQ's rules)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.queue import Queue
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


def _channel(broker: BrokerProcess) -> pika.adapters.blocking_connection.BlockingChannel:
    return pika.BlockingConnection(pika.URLParameters(broker.url)).channel()


def _restart(broker: BrokerProcess, data_dir: str, crash: bool = False) -> BrokerProcess:
    broker.kill() if crash else broker.stop()
    return BrokerProcess(data_dir=data_dir).start()


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
def test_durable_topology_and_persistent_messages_survive_restart(
    broker: BrokerProcess, data_dir: str, crash: bool
) -> None:
    ch = _channel(broker)
    ch.confirm_delivery()
    ch.exchange_declare("d-x", "topic", durable=True, arguments={"alternate-exchange": "d-ae"})
    ch.queue_declare("d-q", durable=True, arguments={"x-max-length": 100, "x-message-ttl": 600_000})
    ch.queue_bind("d-q", "d-x", "a.#", arguments={"k": [1, "two", {"n": True}]})
    ch.queue_declare("t-q", durable=False)
    ch.exchange_declare("t-x", "fanout", durable=False)
    ch.basic_publish("d-x", "a.b", b"persistent", PERSISTENT)
    ch.basic_publish("d-x", "a.c", b"transient", pika.BasicProperties(delivery_mode=1))
    broker = _restart(broker, data_dir, crash)
    try:
        ch = _channel(broker)
        declared = ch.queue_declare("d-q", passive=True)
        assert declared.method.message_count == 1
        # redeclaring with the same arguments is accepted: they were recovered exactly
        ch.queue_declare("d-q", durable=True, arguments={"x-max-length": 100, "x-message-ttl": 600_000})
        ch.exchange_declare("d-x", "topic", durable=True, arguments={"alternate-exchange": "d-ae"})
        method, props, body = ch.basic_get("d-q", auto_ack=True)
        # never delivered: not flagged after a clean stop; after a crash everything is (RabbitMQ does the same)
        assert (body, props.delivery_mode, method.redelivered) == (b"persistent", 2, crash)
        ch.basic_publish("d-x", "a.z", b"routed by the recovered binding", PERSISTENT)
        assert ch.basic_get("d-q", auto_ack=True)[2] == b"routed by the recovered binding"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
            ch.queue_declare("t-q", passive=True)
        assert gone.value.reply_code == 404
        ch = _channel(broker)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
            ch.exchange_declare("t-x", passive=True)
        assert gone.value.reply_code == 404
    finally:
        broker.close()


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
def test_delivered_but_unacked_messages_come_back_redelivered(
    broker: BrokerProcess, data_dir: str, crash: bool
) -> None:
    ch = _channel(broker)
    ch.confirm_delivery()
    ch.queue_declare("d-unacked", durable=True)
    for body in (b"one", b"two", b"three"):
        ch.basic_publish("", "d-unacked", body, PERSISTENT)
    method, _, _ = ch.basic_get("d-unacked")  # delivered, never acked
    assert method is not None
    method, _, _ = ch.basic_get("d-unacked")
    ch.basic_ack(method.delivery_tag)  # "two" is acked and must not come back
    ch.queue_declare("d-unacked", passive=True)  # a round trip: the ack has been processed
    broker = _restart(broker, data_dir, crash=crash)
    try:
        ch = _channel(broker)
        got = []
        while (m := ch.basic_get("d-unacked", auto_ack=True))[0] is not None:
            got.append((m[2], m[0].redelivered))
        if not crash:
            # Exact flags after a clean stop: only the message that had been delivered (RabbitMQ marks all).
            assert got == [(b"one", True), (b"three", False)]
        else:
            # After a crash all are flagged; an ack not yet on disk may bring "two" back (at-least-once).
            assert got in ([(b"one", True), (b"three", True)], [(b"one", True), (b"two", True), (b"three", True)])
    finally:
        broker.close()


def test_message_ttl_keeps_counting_across_restart(broker: BrokerProcess, data_dir: str) -> None:
    ch = _channel(broker)
    ch.confirm_delivery()
    ch.queue_declare("d-ttl", durable=True)
    published = time.monotonic()
    ch.basic_publish("", "d-ttl", b"short", pika.BasicProperties(delivery_mode=2, expiration="2500"))
    ch.basic_publish("", "d-ttl", b"long", pika.BasicProperties(delivery_mode=2, expiration="600000"))
    time.sleep(1.5)
    broker = _restart(broker, data_dir)
    try:
        # 3 s after publishing: expired, had the clock restarted with the broker it would still be alive
        time.sleep(max(0.0, 3.0 - (time.monotonic() - published)))
        ch = _channel(broker)
        assert ch.basic_get("d-ttl", auto_ack=True)[2] == b"long"
        assert ch.basic_get("d-ttl", auto_ack=True)[0] is None
    finally:
        broker.close()


def test_backlog_beyond_the_memory_window_is_delivered_whole_and_in_order(broker: BrokerProcess) -> None:
    """Bodies deep in a durable queue's backlog are paged out to the store and read back on delivery."""
    ch = _channel(broker)
    ch.queue_declare("d-backlog", durable=True)
    count = Queue.PAGE_WINDOW + 300
    bodies = [uuid.uuid4().bytes * (Queue.PAGE_MIN_BODY // 16 + 1) for _ in range(count)]
    for body in bodies:
        ch.basic_publish("", "d-backlog", body, PERSISTENT)
    got = []
    for method, _props, body in ch.consume("d-backlog", inactivity_timeout=5):
        if method is None:
            break
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    assert got == bodies


def test_bindings_of_a_deleted_queue_do_not_come_back_with_a_new_queue_of_that_name(
    broker: BrokerProcess, data_dir: str
) -> None:
    ch = _channel(broker)
    ch.exchange_declare("d-bx", "direct", durable=True)
    ch.queue_declare("d-bq", durable=True)
    ch.queue_bind("d-bq", "d-bx", "old-key")
    ch.queue_delete("d-bq")
    ch.queue_declare("d-bq", durable=True)  # same name, no bindings
    broker = _restart(broker, data_dir)
    try:
        ch = _channel(broker)
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("d-bx", "old-key", b"x", PERSISTENT, mandatory=True)
    finally:
        broker.close()


def _publish_confirmed(broker: BrokerProcess, queue: str, bodies: list[bytes], **declare: object) -> None:
    ch = _channel(broker)
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True, **declare)  # type: ignore[arg-type]
    for body in bodies:
        ch.basic_publish("", queue, body, PERSISTENT)
    ch.connection.close()


def _consume_all(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    got = []
    for method, _props, body in ch.consume(queue, inactivity_timeout=3):
        if method is None:
            break
        got.append((body, method.redelivered))
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    return got


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
def test_a_recovered_backlog_is_read_back_in_order_before_new_messages(
    broker: BrokerProcess, data_dir: str, crash: bool
) -> None:
    """After a restart a durable queue's backlog is read back from the store in batches as it is consumed
    (restart time does not grow with the backlog); consumers see the same queue either way."""
    count = 2 * Backlog.BATCH + 500
    bodies = [b"before-%05d" % i for i in range(count)]
    _publish_confirmed(broker, "d-recovered", bodies)
    ch = _channel(broker)
    first, _, _ = ch.basic_get("d-recovered")  # delivered, unacked at the restart
    assert first is not None
    broker = _restart(broker, data_dir, crash)
    try:
        ch = _channel(broker)
        assert ch.queue_declare("d-recovered", passive=True).method.message_count == count
        ch.confirm_delivery()
        ch.basic_publish("", "d-recovered", b"after", PERSISTENT)
        got = _consume_all(ch, "d-recovered")
        assert [body for body, _ in got] == [*bodies, b"after"]
        flags = [redelivered for _, redelivered in got]
        # the delivered one is flagged; after a crash every recovered message is (as in RabbitMQ)
        assert flags == [True, *([crash] * (count - 1)), False]
    finally:
        broker.close()


def test_purging_a_recovered_backlog_is_permanent(broker: BrokerProcess, data_dir: str) -> None:
    count = Backlog.BATCH + 100
    _publish_confirmed(broker, "d-purged", [b"%d" % i for i in range(count)])
    broker = _restart(broker, data_dir)
    ch = _channel(broker)
    assert ch.basic_get("d-purged", auto_ack=True)[2] == b"0"
    assert ch.queue_purge("d-purged").method.message_count == count - 1
    broker = _restart(broker, data_dir)
    try:
        ch = _channel(broker)
        assert ch.queue_declare("d-purged", passive=True).method.message_count == 0
    finally:
        broker.close()


def test_a_priority_queue_recovers_its_order(broker: BrokerProcess, data_dir: str) -> None:
    """Priority queues take their recovered messages up front (each needs its level)."""
    ch = _channel(broker)
    ch.confirm_delivery()
    ch.queue_declare("d-prio", durable=True, arguments={"x-max-priority": 5})
    for i, priority in enumerate([1, 5, 3, 5, 0]):
        ch.basic_publish("", "d-prio", b"%d" % i, pika.BasicProperties(delivery_mode=2, priority=priority))
    broker = _restart(broker, data_dir)
    try:
        ch = _channel(broker)
        got = []
        while (m := ch.basic_get("d-prio", auto_ack=True))[0] is not None:
            got.append(m[2])
        assert got == [b"1", b"3", b"2", b"0", b"4"]
    finally:
        broker.close()


def test_confirmed_16_mib_bodies_survive_kill_9_and_reach_a_consumer_with_a_small_frame_max(
    broker: BrokerProcess, data_dir: str
) -> None:
    """Large bodies as one confirm each: stored whole before the confirm, read back whole after a crash, and
    framed again at the consumer's own frame_max (4 KiB here: thousands of body frames per message)."""
    bodies = [bytes([n]) * (16 * 1024 * 1024 - n) + bytes(range(256)) for n in range(3)]
    ch = _channel(broker)
    ch.confirm_delivery()
    ch.queue_declare("big", durable=True)
    for n, body in enumerate(bodies):
        ch.basic_publish("", "big", body, pika.BasicProperties(delivery_mode=2, message_id=f"m{n}"))
    broker = _restart(broker, data_dir, crash=True)
    try:
        params = pika.URLParameters(broker.url)
        params.frame_max = 4096
        small = pika.BlockingConnection(params)
        try:
            got = []
            for method, props, body in small.channel().consume("big", auto_ack=True, inactivity_timeout=30):
                assert method is not None, f"only {len(got)} of {len(bodies)} large messages came back"
                got.append((props.message_id, body))
                if len(got) == len(bodies):
                    break
        finally:
            small.close()
        assert [m for m, _ in got] == ["m0", "m1", "m2"]
        assert [b == body for (_, b), body in zip(got, bodies, strict=True)] == [True, True, True]
    finally:
        broker.close()
