"""Running out of file descriptors and of memory: amqpd refuses what it cannot serve, keeps serving what it
has, and comes back when the pressure goes."""

from __future__ import annotations

import resource
import socket
import time

import pika
import pytest

from amqpd.testing import BrokerProcess

FD_LIMIT = 128
RAISED_FD_LIMIT = 384


def low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def low_soft_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, RAISED_FD_LIMIT))


def handshake_opened(broker: BrokerProcess) -> socket.socket | None:
    """A socket the broker answered with connection.start, or None if it closed it at once (refused)."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    try:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        if sock.recv(1) == b"\x01":  # the method frame of connection.start
            return sock
    except ConnectionResetError:  # closed with our header unread
        pass
    sock.close()
    return None


def logged(broker: BrokerProcess, text: str) -> bool:
    """Whether the broker logs `text` within a few seconds (its stderr is read by another thread)."""
    deadline = time.monotonic() + 10
    while not any(text in line for line in broker.stderr_lines):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def connect(broker: BrokerProcess) -> pika.BlockingConnection:
    params = pika.URLParameters(broker.url)
    params.socket_timeout = 5
    params.stack_timeout = 10
    params.connection_attempts = 1
    return pika.BlockingConnection(params)


def refusals_logged(broker: BrokerProcess) -> int:
    return sum("refusing new connections" in line for line in broker.stderr_lines)


def test_out_of_file_descriptors_new_connections_are_refused_and_existing_ones_carry_on() -> None:
    with BrokerProcess(preexec_fn=low_fd_limit) as broker:
        held: list[pika.BlockingConnection] = []
        for _ in range(FD_LIMIT):
            try:
                held.append(connect(broker))
            except pika.exceptions.AMQPConnectionError:
                break
        else:
            pytest.fail(f"{FD_LIMIT} connections accepted under ulimit -n {FD_LIMIT}")
        assert held, "not one connection accepted"

        # Refused again and again: the broker lives, logs at most a line a second, serves who it holds.
        started = time.monotonic()
        for _ in range(30):
            with pytest.raises(pika.exceptions.AMQPConnectionError):
                connect(broker)
        elapsed = time.monotonic() - started
        assert broker.proc is not None and broker.proc.poll() is None
        assert 1 <= refusals_logged(broker) <= elapsed + 2
        ch = held[0].channel()
        ch.queue_declare("still-served", auto_delete=True)
        ch.basic_publish("", "still-served", b"hello")
        assert ch.basic_get("still-served", auto_ack=True)[2] == b"hello"

        # Clients leave: their descriptors come back and new connections are accepted again.
        for conn in held[1:11]:
            conn.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                connect(broker).close()
                break
            except pika.exceptions.AMQPConnectionError:
                assert time.monotonic() < deadline, "no connection accepted after ten clients left"
                held[0].process_data_events(time_limit=0.1)
        for conn in [held[0], *held[11:]]:
            conn.close()


def test_a_low_soft_fd_limit_is_raised_to_the_hard_one_and_past_it_connections_are_refused() -> None:
    with BrokerProcess(preexec_fn=low_soft_fd_limit) as broker:
        assert logged(broker, f"ulimit -n raised from {FD_LIMIT} to {RAISED_FD_LIMIT}")
        held: list[socket.socket] = []
        try:
            while (sock := handshake_opened(broker)) is not None:
                held.append(sock)
                assert len(held) < RAISED_FD_LIMIT, f"{RAISED_FD_LIMIT} connections under ulimit -n {RAISED_FD_LIMIT}"
            assert len(held) > FD_LIMIT  # more than the soft limit it was started with
            assert broker.proc is not None and broker.proc.poll() is None
            assert logged(broker, "refusing new connections")
        finally:
            for sock in held:
                sock.close()


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


BODY = 256 * 1024
MAX_BODIES = 2000  # 500 MiB: far past the watermark set below


def test_a_queue_nobody_consumes_from_blocks_its_publisher_at_the_memory_alarm_and_drains_losing_nothing() -> None:
    with BrokerProcess() as idle:  # the broker's own footprint, to set the watermark just above it
        connect(idle).close()
        assert idle.proc is not None
        baseline = rss_of(idle.proc.pid)
    env = {"AMQPD_MEMORY_HIGH_WATERMARK": str(baseline + 48 * 1024 * 1024), "AMQPD_ALARM_INTERVAL": "0.1"}
    with BrokerProcess(env=env) as broker:
        publisher = connect(broker)
        events: list[str] = []
        publisher.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
        publisher.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
        pub = publisher.channel()
        pub.queue_declare("backlog")
        published = 0
        while "blocked" not in events:
            assert published < MAX_BODIES, "the memory alarm never blocked the publisher"
            pub.basic_publish("", "backlog", b"%08d" % published + b"m" * (BODY - 8))
            published += 1
            publisher.process_data_events(time_limit=0)

        consumer = connect(broker)
        sub = consumer.channel()
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < published and time.monotonic() < deadline:
            method, _props, body = sub.basic_get("backlog", auto_ack=True)
            if method is None:
                publisher.process_data_events(time_limit=0.05)  # what the block held back arrives now
                continue
            got.append(int(body[:8]))
        alarms = [line for line in broker.stderr_lines if "alarm" in line]
        assert got == list(range(published)), f"messages lost, out of order or held back: {alarms}"
        deadline = time.monotonic() + 20
        while "unblocked" not in events and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        assert events[-1] == "unblocked", "the memory alarm never cleared after the drain"
        consumer.close()
        publisher.close()
