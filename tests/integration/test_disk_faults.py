"""A full disk, for real: amqpd on a 4 MiB tmpfs mounted by the test. RabbitMQ's answer to a full disk is
its disk alarm; amqpd must raise it, nack what it could not store, keep serving consumers, and go on once
the consumers have freed the space. The process never dies. (Mounting needs root; CI runs as root.)"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest

from amqpd.testing import BrokerProcess

BODY = 32 * 1024
MAX_PUBLISHES = 400  # 12.5 MiB: three times the disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def wait_for(condition: Callable[[], bool], conn: pika.BlockingConnection, limit_s: float = 20.0) -> bool:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return condition()


def test_a_full_disk_raises_the_alarm_nacks_keeps_consumers_served_and_recovers(small_disk: Path) -> None:
    env = {"AMQPD_DISK_FREE_LIMIT": "1", "AMQPD_SEGMENT_SIZE": str(512 * 1024), "AMQPD_ALARM_INTERVAL": "0.2"}
    broker = BrokerProcess(data_dir=str(small_disk / "data"), env=env).start()
    try:
        params = pika.URLParameters(broker.url)
        params.blocked_connection_timeout = 60
        publisher = pika.BlockingConnection(params)
        events: list[str] = []
        publisher.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
        publisher.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
        pub = publisher.channel()
        pub.queue_declare("full", durable=True)
        pub.confirm_delivery()
        confirmed: list[bytes] = []
        nacked = b""
        for n in range(MAX_PUBLISHES):
            body = b"%06d" % n + b"x" * (BODY - 6)
            try:
                pub.basic_publish("", "full", body, pika.BasicProperties(delivery_mode=2))
            except pika.exceptions.NackError:
                nacked = body
                break
            confirmed.append(body[:6])
        assert nacked, "a 4 MiB disk took 12.5 MiB of persistent messages"
        assert wait_for(lambda: "blocked" in events, publisher), "no connection.blocked after ENOSPC"

        # Consumers go on: every confirmed message is delivered and its ack accepted.
        consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
        sub = consumer.channel()
        got: list[bytes] = []
        while True:
            method, _props, body = sub.basic_get("full")
            if method is None:
                break
            got.append(body[:6])
            sub.basic_ack(method.delivery_tag)
        assert set(confirmed) <= set(got)

        # The acks freed the disk: the alarm clears and publishing is confirmed again.
        assert wait_for(lambda: "unblocked" in events, publisher), "the disk alarm never cleared"
        pub.basic_publish("", "full", b"after", pika.BasicProperties(delivery_mode=2))
        assert broker.proc is not None and broker.proc.poll() is None
        consumer.close()
        publisher.close()
        assert broker.stop() == 0
        assert any("STORE WRITE FAILED" in line for line in broker.stderr_lines)

        broker = BrokerProcess(data_dir=str(small_disk / "data"), env=env).start()
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        method, _props, body = ch.basic_get("full", auto_ack=True)
        assert body == b"after"
        assert ch.basic_get("full", auto_ack=True)[0] is None
        conn.close()
    finally:
        broker.stop()
