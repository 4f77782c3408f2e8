"""AMQPD_DEFAULT_USER / AMQPD_DEFAULT_PASS / AMQPD_DEFAULT_VHOST, as RABBITMQ_DEFAULT_USER/PASS/VHOST: a fresh
data dir starts with that administrator and vhost instead of guest on "/"; once seeded, the data dir's own
catalogue holds the users and these settings are not read again. AMQPD_LOOPBACK_USERS from the environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pika
import pika.exceptions as pex
import pytest

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # brokers of their own

APP = {"AMQPD_DEFAULT_USER": "app", "AMQPD_DEFAULT_PASS": "s3cret", "AMQPD_DEFAULT_VHOST": "app-vh"}


def connect(port: int, user: str, password: str, vhost: str = "/", host: str = "127.0.0.1") -> pika.BlockingConnection:
    credentials = pika.PlainCredentials(user, password)
    params = pika.ConnectionParameters(host, port, vhost, credentials, connection_attempts=1, socket_timeout=10)
    return pika.BlockingConnection(params)


def declares_a_queue(port: int, user: str, password: str, vhost: str) -> bool:
    """Logs in and declares (then deletes) a queue: the user exists with configure permission on vhost."""
    conn = connect(port, user, password, vhost)
    try:
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_delete(queue)
        return True
    finally:
        conn.close()


def test_the_default_user_and_vhost_replace_guest_on_a_fresh_data_dir(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path), env=APP) as broker:
        assert declares_a_queue(broker.port, "app", "s3cret", "app-vh")
        with pytest.raises(pex.ProbableAuthenticationError):
            connect(broker.port, "guest", "guest")
        with pytest.raises(pex.ProbableAccessDeniedError):  # no "/" vhost either: the default one replaced it
            connect(broker.port, "app", "s3cret", "/")


def test_a_restart_keeps_the_catalogue_and_does_not_recreate_the_default_user(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path), env=APP, management=True) as broker:
        changed = httpx.put(
            f"{broker.mgmt_url}/api/users/app",
            json={"password": "changed", "tags": "administrator"},
            auth=("app", "s3cret"),
        )
        assert changed.status_code == 204
    # The same environment again, and another default user: neither touches a seeded data dir.
    with BrokerProcess(data_dir=str(tmp_path), env=APP) as broker:
        assert declares_a_queue(broker.port, "app", "changed", "app-vh")
        with pytest.raises(pex.ProbableAuthenticationError):
            connect(broker.port, "app", "s3cret", "app-vh")
        with pytest.raises(pex.ProbableAuthenticationError):
            connect(broker.port, "guest", "guest")
    other = {"AMQPD_DEFAULT_USER": "other", "AMQPD_DEFAULT_PASS": "pw"}
    with BrokerProcess(data_dir=str(tmp_path), env=other) as broker:
        with pytest.raises(pex.ProbableAuthenticationError):
            connect(broker.port, "other", "pw", "app-vh")
        assert declares_a_queue(broker.port, "app", "changed", "app-vh")


def test_without_a_default_user_a_fresh_data_dir_starts_with_guest(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path)) as broker:
        assert declares_a_queue(broker.port, "guest", "guest", "/")


def test_a_default_user_without_a_password_is_refused_at_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMQPD_")} | {"AMQPD_DEFAULT_USER": "app"}
    args = ["--port", "0", "--data-dir", str(tmp_path), "--management-port", "off", "--prometheus-port", "off"]
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "amqpd", *args]
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 78  # EX_CONFIG, one line naming where the user came from
    assert done.stderr.strip().splitlines() == [
        'amqpd: configuration error: AMQPD_DEFAULT_USER: default_pass: expected a password for default_user "app", '
        "got none"
    ]


def non_loopback_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if addr.startswith("127.") else addr


@pytest.mark.parametrize(("value", "guest_from_outside"), [("", True), ("guest", False), ("monitor, guest", False)])
def test_loopback_users_from_the_environment(value: str, guest_from_outside: bool) -> None:
    addr = non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    env = {"AMQPD_LOOPBACK_USERS": value}
    with BrokerProcess(hosts=("0.0.0.0",), extra_args=["--in-memory"], env=env) as broker:
        if guest_from_outside:
            connect(broker.port, "guest", "guest", host=addr).close()
        else:
            with pytest.raises(pex.ProbableAuthenticationError):
                connect(broker.port, "guest", "guest", host=addr)
