"""Running out of file descriptors and of memory: amqpd refuses what it cannot serve, keeps serving what it
has, and comes back when the pressure goes."""

from __future__ import annotations

import resource
import socket
import threading
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


class BlockedPublisher(threading.Thread):
    """Publishes 256 KiB bodies on a connection of its own until the broker blocks it, then waits to be
    unblocked, as an application would. Once blocked, the broker reads no more of its socket, so a
    `basic_publish` already under way waits (pika flushes each publish) until the alarm clears: in its own
    thread that wait is the application being held, and the test's thread stays free to drain the queue."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(daemon=True)
        self.broker = broker
        self.events: list[str] = []
        self.published = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.publish_until_unblocked()
        except BaseException as e:  # reported by the test's thread
            self.error = e

    def publish_until_unblocked(self) -> None:
        connection = connect(self.broker)
        connection.add_on_connection_blocked_callback(lambda *_: self.events.append("blocked"))
        connection.add_on_connection_unblocked_callback(lambda *_: self.events.append("unblocked"))
        channel = connection.channel()
        channel.queue_declare("backlog")
        while "blocked" not in self.events and self.published < MAX_BODIES:
            channel.basic_publish("", "backlog", b"%08d" % self.published + b"m" * (BODY - 8))
            self.published += 1
            connection.process_data_events(time_limit=0)
        deadline = time.monotonic() + 60
        while "unblocked" not in self.events and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        connection.close()


def test_a_queue_nobody_consumes_from_blocks_its_publisher_at_the_memory_alarm_and_drains_losing_nothing() -> None:
    with BrokerProcess() as idle:  # the broker's own footprint, to set the watermark just above it
        connect(idle).close()
        assert idle.proc is not None
        baseline = rss_of(idle.proc.pid)
    env = {"AMQPD_MEMORY_HIGH_WATERMARK": str(baseline + 48 * 1024 * 1024), "AMQPD_ALARM_INTERVAL": "0.1"}
    with BrokerProcess(env=env) as broker:
        publisher = BlockedPublisher(broker)
        publisher.start()
        assert logged_within(broker, "memory alarm set", publisher), "the memory alarm never went off"

        consumer = connect(broker)
        sub = consumer.channel()
        got: list[int] = []
        deadline = time.monotonic() + 90
        while (publisher.is_alive() or len(got) < publisher.published) and time.monotonic() < deadline:
            method, _props, body = sub.basic_get("backlog", auto_ack=True)
            if method is None:
                time.sleep(0.02)  # the publisher's held publishes arrive once the alarm clears
                continue
            got.append(int(body[:8]))
        publisher.join(timeout=10)
        consumer.close()
        assert publisher.error is None, repr(publisher.error)
        alarms = [line for line in broker.stderr_lines if "alarm" in line]
        assert publisher.events[:1] == ["blocked"], f"the memory alarm never blocked the publisher: {alarms}"
        assert got == list(range(publisher.published)), f"messages lost, out of order or held back: {alarms}"
        assert publisher.events[-1] == "unblocked", "the memory alarm never cleared after the drain"


def logged_within(broker: BrokerProcess, text: str, publisher: threading.Thread) -> bool:
    """Whether the broker logs `text` before the publisher gives up (it stops at MAX_BODIES unblocked)."""
    deadline = time.monotonic() + 120
    while not any(text in line for line in broker.stderr_lines):
        if not publisher.is_alive() or time.monotonic() > deadline:
            return any(text in line for line in broker.stderr_lines)
        time.sleep(0.02)
    return True
