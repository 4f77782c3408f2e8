"""The broker's log as operators read RabbitMQ's: a line per connection accepted, authenticated and closed,
channel errors at warning, a log file reopened on SIGUSR1, levels per category, JSON lines, and a start-up of
a few lines printed once."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pika
import pytest

from amqpd.testing import BrokerProcess

WAIT_S = 20.0


def wait_for(lines: Callable[[], list[str]], pattern: str) -> str:
    """The first line matching `pattern` once it has been logged (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for line in lines():
            if re.search(pattern, line):
                return line
        time.sleep(0.02)
    raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(lines()[-30:]))


def file_lines(path: Path) -> Callable[[], list[str]]:
    return lambda: path.read_text().splitlines() if path.exists() else []


def connect(broker: BrokerProcess, name: str | None = None) -> pika.BlockingConnection:
    props = {"connection_name": name} if name else None
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, client_properties=props))


def test_a_connection_is_logged_when_accepted_authenticated_and_closed() -> None:
    with BrokerProcess(extra_args=["--in-memory"]) as broker:
        conn = connect(broker, "orders-app")
        local = conn._impl._transport._sock.getsockname()  # the client's end: the broker's peer
        peer = f"{local[0]}:{local[1]} -> 127.0.0.1:{broker.port}"
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            channel.queue_declare("no-such-queue", passive=True)
        conn.close()
        log = lambda: broker.stderr_lines  # noqa: E731
        closed = wait_for(log, "closing AMQP connection")
    assert wait_for(log, "accepting AMQP connection").endswith(
        f" INFO amqpd.connection: accepting AMQP connection {peer}"
    )
    assert wait_for(log, "authenticated").endswith(
        f"connection {peer} - orders-app: user 'guest' authenticated and granted access to vhost '/'"
    )
    error = wait_for(log, "channel error")
    assert " WARNING amqpd.channel: " in error
    assert error.endswith(
        f"channel error on connection {peer} - orders-app, channel 1 (vhost '/', user 'guest'): "
        "404 NOT_FOUND - no queue 'no-such-queue' in vhost '/'"
    )
    assert re.search(
        rf" INFO amqpd.connection: closing AMQP connection {re.escape(peer)} - orders-app \(vhost '/', user 'guest'\) "
        r"after \d+\.\d s: client closed it \(200 Normal shutdown\)$",
        closed,
    ), closed


def test_a_connection_that_vanishes_is_a_warning() -> None:
    with BrokerProcess(extra_args=["--in-memory"]) as broker:
        sock = socket.create_connection(("127.0.0.1", broker.port))
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        sock.close()
        line = wait_for(lambda: broker.stderr_lines, "closing AMQP connection")
    assert " WARNING amqpd.connection: " in line
    assert re.search(r"\(vhost '', user ''\) after \d+\.\d s: client unexpectedly closed TCP connection$", line), line


def test_a_connection_closed_by_an_error_is_a_warning_with_the_reply() -> None:
    with BrokerProcess(extra_args=["--in-memory"]) as broker:
        params = pika.ConnectionParameters("127.0.0.1", broker.port, virtual_host="no-such-vhost")
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(params)
        line = wait_for(lambda: broker.stderr_lines, "closing AMQP connection")
    assert " WARNING amqpd.connection: " in line
    assert line.endswith("530 NOT_ALLOWED - vhost no-such-vhost not found"), line


def test_the_log_file_is_reopened_on_sigusr1(tmp_path: Path) -> None:
    log_file = tmp_path / "amqpd.log"
    with BrokerProcess(extra_args=["--in-memory", "--log-file", str(log_file)]) as broker:
        connect(broker, "before-rotation").close()
        wait_for(file_lines(log_file), "closing AMQP connection .* - before-rotation")
        rotated = tmp_path / "amqpd.log.1"
        log_file.rename(rotated)  # what logrotate does, before it signals
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGUSR1)
        wait_for(file_lines(log_file), "log file reopened")
        connect(broker, "after-rotation").close()
        wait_for(file_lines(log_file), "closing AMQP connection .* - after-rotation")
    assert broker.stderr_lines == []  # everything went to the file
    assert "after-rotation" not in rotated.read_text()
    assert "before-rotation" not in log_file.read_text()


def test_the_log_file_holds_the_start_up_lines_once_each(tmp_path: Path) -> None:
    log_file = tmp_path / "amqpd.log"
    with BrokerProcess(data_dir=str(tmp_path / "data"), management=True, extra_args=["--log-file", str(log_file)]):
        wait_for(file_lines(log_file), "amqpd listening on 127.0.0.1:")
        lines = [line.split(": ", 1)[1] for line in file_lines(log_file)()]
    assert len(lines) == len(set(lines))  # nothing printed twice
    assert sum(line.startswith("recovered 0 queues and 0 messages in ") for line in lines) == 1
    assert sum(line.startswith("amqpd management listening on ") for line in lines) == 1
    assert sum(line.startswith("amqpd prometheus listening on ") for line in lines) == 1
    assert not any("uvicorn" in line.lower() or "Started server process" in line for line in lines)
    assert not any("bindings" in line for line in lines)  # the recovery counters are at debug


def test_the_recovery_counters_are_at_debug(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path), extra_args=["--log-level", "debug"]) as broker:
        line = wait_for(lambda: broker.stderr_lines, "recovered .* exchanges")
    assert " DEBUG amqpd.recovery: recovered " in line


def test_json_logs_are_one_object_per_line(tmp_path: Path) -> None:
    with BrokerProcess(extra_args=["--in-memory"], env={"AMQPD_LOG_FORMAT": "json"}) as broker:
        connect(broker, "collector-test").close()
        wait_for(lambda: broker.stderr_lines, "closing AMQP connection")
        records = [json.loads(line) for line in broker.stderr_lines]
    closed = next(r for r in records if r["message"].startswith("closing AMQP connection"))
    assert closed["level"] == "info" and closed["logger"] == "amqpd.connection"
    assert (closed["user"], closed["vhost"], closed["client_name"]) == ("guest", "/", "collector-test")
    assert closed["reason"] == "client closed it (200 Normal shutdown)"
    assert isinstance(closed["duration_s"], float) and closed["peer"].startswith("127.0.0.1:")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", closed["time"])


def test_a_category_can_have_its_own_level(tmp_path: Path) -> None:
    env = {"AMQPD_LOG_LEVELS": "connection=warning"}
    with BrokerProcess(extra_args=["--in-memory"], env=env) as broker:
        connect(broker).close()
        sock = socket.create_connection(("127.0.0.1", broker.port))
        sock.close()
        wait_for(lambda: broker.stderr_lines, "client unexpectedly closed TCP connection")  # a warning: kept
        lines = list(broker.stderr_lines)
    assert not any("accepting AMQP connection" in line or "authenticated" in line for line in lines)
    assert any("in memory: nothing is kept on disk" in line for line in lines)  # other categories: INFO
