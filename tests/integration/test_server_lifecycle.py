"""The broker process as an operator sees it: start-up line, SIGTERM, heartbeats, handshake timeout."""

from __future__ import annotations

import signal
import socket
import time

import pika
import pytest
from raw_amqp import RawConnection

from amqpd.testing import BrokerProcess


@pytest.mark.amqpd_only
def test_sigterm_closes_clients_with_320_and_exits_zero() -> None:
    with BrokerProcess(extra_args=["--in-memory"]) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare("", exclusive=True)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            conn.process_data_events(time_limit=10)
            conn.sleep(10)
        assert closed.value.reply_code == 320
        assert broker.proc.wait(15) == 0


@pytest.mark.amqpd_only
def test_port_zero_reports_the_port_it_listens_on() -> None:
    with BrokerProcess(extra_args=["--in-memory"]) as broker:
        assert broker.port > 0
        with socket.create_connection((broker.host, broker.port), timeout=5):
            pass


@pytest.mark.amqpd_only
def test_client_silent_past_two_heartbeats_is_disconnected() -> None:
    with BrokerProcess(extra_args=["--in-memory"]) as broker:
        raw = RawConnection(broker.url, timeout=15)
        raw.handshake(heartbeat=1)
        started = time.monotonic()
        raw.read_until_eof(timeout=15)  # heartbeats from the broker, then the close
        assert time.monotonic() - started < 15  # bounded wait, not a timing claim: it did hang up


@pytest.mark.amqpd_only
def test_handshake_not_finished_in_time_is_dropped() -> None:
    with BrokerProcess(extra_args=["--in-memory"], env={"AMQPD_HANDSHAKE_TIMEOUT": "1"}) as broker:
        with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            data = b""
            while chunk := sock.recv(65536):  # connection.start, then EOF when the deadline passes
                data += chunk
            assert data[:1] == b"\x01"  # the broker did answer with a method frame first


@pytest.mark.amqpd_only
def test_refused_login_does_not_disturb_other_clients(amqpd_url: str) -> None:
    good = pika.BlockingConnection(pika.URLParameters(amqpd_url))
    bad = pika.URLParameters(amqpd_url.replace("guest:guest", "guest:wrong"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(bad)
    ch = good.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"still here")
    assert ch.basic_get(q, auto_ack=True)[2] == b"still here"
    good.close()


@pytest.mark.amqpd_only
@pytest.mark.parametrize(
    "env",
    [{"AMQPD_MEMORY_HIGH_WATERMARK": "100"}, {"AMQPD_DISK_FREE_LIMIT": str(2**62)}],
    ids=["memory", "disk"],
)
def test_resource_alarm_blocks_publishers_but_not_consumers(env: dict[str, str]) -> None:
    with BrokerProcess(env={**env, "AMQPD_ALARM_INTERVAL": "0.1"}) as broker:
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        blocked: list[str] = []
        publisher.add_on_connection_blocked_callback(lambda _conn, frame: blocked.append(frame.method.reason))
        pch = publisher.channel()
        q = pch.queue_declare("alarm-q").method.queue
        pch.basic_publish("", q, b"first")
        deadline = time.monotonic() + 10
        while not blocked and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.2)
        assert blocked and blocked[0].startswith("low on")
        # A connection that does not publish is not blocked: it still declares, gets and consumes.
        consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
        cch = consumer.channel()
        declared = cch.queue_declare(q, passive=True).method
        assert declared.queue == q
        # Whether "first" was read before the block depends on when the alarm check ran; either way the
        # get is answered, and with what the queue holds.
        method, _props, body = cch.basic_get(q, auto_ack=True)
        assert (body if method is not None else None) == (b"first" if declared.message_count else None)
        assert cch.basic_get(q, auto_ack=True)[0] is None
        consumer.close()


@pytest.mark.amqpd_only
def test_delivery_left_unacked_past_consumer_timeout_closes_the_channel_with_406() -> None:
    env = {"AMQPD_CONSUMER_TIMEOUT": "500", "AMQPD_ALARM_INTERVAL": "0.1"}
    with BrokerProcess(extra_args=["--in-memory"], env=env) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=False).method.queue
        ch.basic_publish("", q, b"slow")
        assert ch.basic_get(q)[0] is not None  # delivered, never acked
        idle = ch.queue_declare("", exclusive=True).method.queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            for _ in ch.consume(idle, inactivity_timeout=5):  # waits on the channel, so the close lands here
                break  # 5 s of silence: no close came
        assert closed.value.reply_code == 406
        assert "delivery acknowledgement on channel 1 timed out" in closed.value.reply_text
        again = conn.channel()  # the message went back to the queue, redelivered
        method, _props, body = again.basic_get(q, auto_ack=True)
        assert (body, method.redelivered) == (b"slow", True)


@pytest.mark.amqpd_only
def test_a_taken_port_is_reported_and_exits_1() -> None:
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "amqpd", "--in-memory", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


@pytest.mark.amqpd_only
def test_a_second_broker_on_the_same_data_dir_is_refused(tmp_path) -> None:  # noqa: ANN001
    import subprocess
    import sys

    with BrokerProcess(data_dir=str(tmp_path)):
        done = subprocess.run(
            [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert "is in use by another amqpd" in done.stderr
