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
RESERVE = {"AMQPD_DISK_RESERVE": str(256 * 1024)}  # the default would not fit beside any data


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
    env = {
        "AMQPD_DISK_FREE_LIMIT": "1",
        "AMQPD_SEGMENT_SIZE": str(512 * 1024),
        "AMQPD_ALARM_INTERVAL": "0.2",
        **RESERVE,
    }
    broker = BrokerProcess(data_dir=str(small_disk / "data"), env=env).start()
    try:
        # The publisher is nacked or blocked (connection.blocked) before the disk is full.
        confirmed = fill_until_refused(broker)
        assert any("disk alarm set" in line for line in broker.stderr_lines)

        # Consumers go on: every confirmed message is delivered and its ack accepted.
        assert drain(broker) >= confirmed

        # The acks freed the disk: the alarm clears and publishing is confirmed again.
        assert publish_confirmed_within(broker, 20.0), "the disk alarm never cleared"
        assert broker.proc is not None and broker.proc.poll() is None
        assert broker.stop() == 0

        broker = BrokerProcess(data_dir=str(small_disk / "data"), env=env).start()
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        bodies = []
        while (got := ch.basic_get("full", auto_ack=True))[0] is not None:
            bodies.append(got[2])
        # the publish the block held back (unconfirmed) may have been read once the alarm cleared
        assert b"after" in bodies and len(bodies) <= 2
        conn.close()
    finally:
        broker.stop()


def fill_until_refused(broker: BrokerProcess) -> int:
    """Publish persistent messages with confirms until the broker nacks one or blocks the connection; how
    many were confirmed."""
    params = pika.URLParameters(broker.url)
    params.blocked_connection_timeout = 2  # the one publish sent as the block arrives is not waited for
    conn = pika.BlockingConnection(params)
    blocked: list[bool] = []
    conn.add_on_connection_blocked_callback(lambda *_: blocked.append(True))
    ch = conn.channel()
    ch.queue_declare("full", durable=True)
    ch.confirm_delivery()
    confirmed = 0
    try:
        for n in range(MAX_PUBLISHES):
            conn.process_data_events(time_limit=0)
            if blocked:
                break
            ch.basic_publish("", "full", b"%06d" % n + b"x" * (BODY - 6), pika.BasicProperties(delivery_mode=2))
            confirmed += 1
        else:
            pytest.fail("a 4 MiB disk took 12.5 MiB of persistent messages")
    except (pika.exceptions.NackError, pika.exceptions.ConnectionBlockedTimeout):
        pass
    try:
        conn.close()  # a blocked broker reads nothing: the close may time out instead
    except pika.exceptions.AMQPError:
        pass
    return confirmed


def drain(broker: BrokerProcess) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare("full", durable=True)
    got = 0
    while True:
        method, _props, _body = ch.basic_get("full")
        if method is None:
            break
        ch.basic_ack(method.delivery_tag)
        got += 1
    conn.close()
    return got


def publish_confirmed_within(broker: BrokerProcess, limit_s: float) -> bool:
    """Whether one persistent publish is confirmed within limit_s (nacks and a block count as not yet)."""
    params = pika.URLParameters(broker.url)
    params.blocked_connection_timeout = limit_s
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.confirm_delivery()
    deadline = time.monotonic() + limit_s
    try:
        while True:
            try:
                ch.basic_publish("", "full", b"after", pika.BasicProperties(delivery_mode=2))
                return True
            except pika.exceptions.NackError:
                if time.monotonic() > deadline:
                    return False
                conn.process_data_events(time_limit=0.1)
    except pika.exceptions.ConnectionBlockedTimeout:
        return False
    finally:
        if conn.is_open:
            conn.close()


@pytest.mark.parametrize("free_limit", [1, 1024 * 1024], ids=["no-limit", "1MiB-limit"])
def test_a_disk_filled_then_killed_heals_after_a_drain_three_times_over(small_disk: Path, free_limit: int) -> None:
    """kill -9 on a full disk, restart, drain: publishing with confirms works again within 5 s, and the same
    again twice more on the same data dir (nothing left behind by one round fills the next)."""
    env = {
        "AMQPD_DISK_FREE_LIMIT": str(free_limit),
        "AMQPD_SEGMENT_SIZE": str(512 * 1024),
        "AMQPD_ALARM_INTERVAL": "0.2",
        **RESERVE,
    }
    data = str(small_disk / "data")
    for round_ in range(3):
        broker = BrokerProcess(data_dir=data, env=env).start()
        try:
            drain(broker)  # what the last round's check published
            confirmed = fill_until_refused(broker)
            assert confirmed > 0, f"round {round_}: nothing was confirmed on an emptied disk"
            broker.kill()
            broker = BrokerProcess(data_dir=data, env=env).start()
            assert drain(broker) >= confirmed, f"round {round_}: confirmed messages lost"
            assert publish_confirmed_within(broker, 5.0), f"round {round_}: no confirm 5 s after the drain"
        finally:
            broker.kill()


def test_a_stop_on_a_full_disk_is_clean_and_says_so_once(small_disk: Path) -> None:
    env = {
        "AMQPD_DISK_FREE_LIMIT": "1",
        "AMQPD_SEGMENT_SIZE": str(512 * 1024),
        "AMQPD_ALARM_INTERVAL": "0.2",
        **RESERVE,
    }
    data = str(small_disk / "data")
    broker = BrokerProcess(data_dir=data, env=env).start()
    try:
        confirmed = fill_until_refused(broker)
        assert broker.stop() == 0
        assert not any("Traceback" in line for line in broker.stderr_lines), "\n".join(broker.stderr_lines[-30:])
        broker = BrokerProcess(data_dir=data, env=env).start()
        deadline = time.monotonic() + 10  # stderr is read by a thread of its own: the line may lag
        while not any("recovered" in line for line in broker.stderr_lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any("after a clean stop" in line for line in broker.stderr_lines)
        assert drain(broker) >= confirmed
        assert publish_confirmed_within(broker, 5.0)
    finally:
        broker.kill()
