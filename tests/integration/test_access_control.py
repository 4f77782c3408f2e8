"""Access control seen by real clients on sockets: guest refused from a non-loopback address (RabbitMQ's
loopback_users, observed the same on RabbitMQ 3.10.8 at this machine's 192.0.2.2: 403 with the generic
login text), other users accepted from anywhere; permissions and users imported with load_definitions
survive a restart of a durable broker (tests/store/test_access_catalog.py: guest is not re-created once deleted)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pika
import pika.exceptions as pex
import pytest

from amqpd.broker.access.control import hash_password
from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # brokers of their own


def non_loopback_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if addr.startswith("127.") else addr


def write_definitions(directory: Path) -> Path:
    doc = {
        "users": [{"name": "remote", "password_hash": hash_password("pw"), "tags": []}],
        "permissions": [{"user": "remote", "vhost": "/", "configure": "^remote\\.", "write": ".*", "read": ".*"}],
    }
    path = directory / "definitions.json"
    path.write_text(json.dumps(doc))
    return path


def connect(host: str, port: int, user: str, password: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host, port, credentials=pika.PlainCredentials(user, password), connection_attempts=1, socket_timeout=10
        )
    )


def test_guest_only_from_loopback_other_users_from_anywhere(tmp_path: Path) -> None:
    addr = non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    env = {"AMQPD_LOAD_DEFINITIONS": str(write_definitions(tmp_path))}
    with BrokerProcess(hosts=("0.0.0.0",), extra_args=["--in-memory"], env=env) as broker:
        with pytest.raises(pex.ProbableAuthenticationError) as exc:
            connect(addr, broker.port, "guest", "guest")
        assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in str(exc.value)
        connect("127.0.0.1", broker.port, "guest", "guest").close()
        conn = connect(addr, broker.port, "remote", "pw")
        ch = conn.channel()
        ch.queue_declare("remote.q", exclusive=True)
        with pytest.raises(pex.ChannelClosedByBroker) as refused:
            ch.queue_declare("other.q", exclusive=True)
        assert refused.value.reply_code == 403
        conn.close()
        assert any(
            "login refused for user 'guest'" in line and "can only connect via localhost" in line
            for line in broker.stderr_lines
        )


def test_imported_users_and_permissions_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"AMQPD_LOAD_DEFINITIONS": str(write_definitions(tmp_path))}
    with BrokerProcess(data_dir=str(data), env=env) as broker:
        connect("127.0.0.1", broker.port, "remote", "pw").close()
    # No definitions this time: what the catalogue kept is all there is.
    with BrokerProcess(data_dir=str(data), env={"AMQPD_LOAD_DEFINITIONS": ""}) as broker:
        conn = connect("127.0.0.1", broker.port, "remote", "pw")
        ch = conn.channel()
        with pytest.raises(pex.ChannelClosedByBroker) as refused:
            ch.queue_declare("other.q", exclusive=True)
        assert refused.value.reply_code == 403
        conn.close()
