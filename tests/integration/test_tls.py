"""amqps: pika and aio-pika over TLS with certificates made here, client certificates checked against the
CA (wrong or missing ones refused at the handshake, the broker serving others meanwhile), EXTERNAL logins
as the certificate's user, and a certificate replaced without a restart (SIGHUP)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions as pex
import pytest
from cryptography import x509
from tls_certs import CA, write_pair

from amqpd.broker.access.control import hash_password
from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # brokers of their own, configured for TLS


class Certs:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = CA("amqpd test CA")
        self.ca_file = self.ca.write(directory / "ca.crt")
        self.server_cert, self.server_key = write_pair(*self.ca.issue("localhost", server=True), directory, "server")
        self.client = write_pair(*self.ca.issue("certuser"), directory, "client")
        self.stranger = write_pair(*self.ca.issue("stranger"), directory, "stranger")
        self.san_client = write_pair(*self.ca.issue("ignored-cn", san_dns=["sanuser"]), directory, "san")
        self.rogue = write_pair(*CA("rogue CA").issue("certuser"), directory, "rogue")

    def client_context(self, pair: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if pair is not None:
            ctx.load_cert_chain(str(pair[0]), str(pair[1]))
        return ctx


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("tls"))


def definitions(directory: Path) -> Path:
    """certuser and sanuser: password-less, full permissions on "/"."""
    users = ["certuser", "sanuser"]
    doc = {
        "users": [{"name": u, "password_hash": "", "tags": []} for u in users]
        + [{"name": "pwuser", "password_hash": hash_password("pw"), "tags": []}],
        "permissions": [
            {"user": u, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"} for u in [*users, "pwuser"]
        ],
    }
    path = directory / "definitions.json"
    path.write_text(json.dumps(doc))
    return path


def tls_broker(certs: Certs, directory: Path, **extra: Any) -> BrokerProcess:
    settings = {
        "tls_port": 0,
        "tls_cert_file": str(certs.server_cert),
        "tls_key_file": str(certs.server_key),
        "tls_ca_file": str(certs.ca_file),
        "tls_verify_peer": True,
        "tls_fail_if_no_peer_cert": False,
        **extra,
    }
    config = directory / "amqpd.toml"
    config.write_text("[amqpd]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    # The environment outranks the config file.
    env = {"AMQPD_LOAD_DEFINITIONS": str(definitions(directory))}
    return BrokerProcess(extra_args=["--config", str(config), "--in-memory"], env=env)


@pytest.fixture(scope="module")
def broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with tls_broker(certs, tmp_path_factory.mktemp("broker")) as b:
        assert b.tls_port
        yield b


def pika_params(broker: BrokerProcess, ctx: ssl.SSLContext, credentials: Any = None) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "127.0.0.1",
        broker.tls_port,
        ssl_options=pika.SSLOptions(ctx, server_hostname="localhost"),
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        connection_attempts=1,
        socket_timeout=10,
        stack_timeout=20,
    )


def round_trip(conn: pika.BlockingConnection, body: bytes = b"over tls") -> bytes | None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, body)
    for _ in range(50):
        _, _, got = ch.basic_get(q, auto_ack=True)
        if got is not None:
            return got
        conn.process_data_events(0.05)
    return None


def test_pika_round_trip_over_tls(broker: BrokerProcess, certs: Certs) -> None:
    conn = pika.BlockingConnection(pika_params(broker, certs.client_context()))
    try:
        assert round_trip(conn) == b"over tls"
    finally:
        conn.close()


def test_aio_pika_round_trip_over_tls(broker: BrokerProcess, certs: Certs) -> None:
    async def main() -> bytes:
        conn = await aio_pika.connect(
            f"amqps://guest:guest@localhost:{broker.tls_port}/", ssl_context=certs.client_context(), timeout=20
        )
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("", exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio over tls"), routing_key=q.name)
            msg = await q.get(timeout=10, fail=True)
            assert msg is not None
            await msg.ack()
            return msg.body

    assert asyncio.run(main()) == b"aio over tls"


def test_the_plain_port_still_serves(broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        assert round_trip(conn, b"plain") == b"plain"
    finally:
        conn.close()


def test_external_logs_in_as_the_certificates_common_name(broker: BrokerProcess, certs: Certs) -> None:
    ctx = certs.client_context(certs.client)
    conn = pika.BlockingConnection(pika_params(broker, ctx, pika.credentials.ExternalCredentials()))
    try:
        assert round_trip(conn) == b"over tls"
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.direct", "k", b"x", pika.BasicProperties(user_id="certuser"))  # user_id checks pass
    finally:
        conn.close()


@pytest.mark.parametrize("who", ["no certificate", "unknown user"])
def test_external_is_refused_without_a_certificate_or_for_an_unknown_user(
    broker: BrokerProcess, certs: Certs, who: str
) -> None:
    ctx = certs.client_context(None if who == "no certificate" else certs.stranger)
    with pytest.raises(pex.ProbableAuthenticationError) as exc:
        pika.BlockingConnection(pika_params(broker, ctx, pika.credentials.ExternalCredentials()))
    assert "ACCESS_REFUSED" in str(exc.value)


def test_a_password_less_user_cannot_use_plain_even_over_tls(broker: BrokerProcess, certs: Certs) -> None:
    with pytest.raises(pex.ProbableAuthenticationError):
        pika.BlockingConnection(
            pika_params(broker, certs.client_context(certs.client), pika.PlainCredentials("certuser", ""))
        )


def test_a_certificate_from_another_ca_is_refused_at_the_handshake(broker: BrokerProcess, certs: Certs) -> None:
    with pytest.raises((pex.AMQPConnectionError, ssl.SSLError)):
        pika.BlockingConnection(pika_params(broker, certs.client_context(certs.rogue)))  # guest/guest
    conn = pika.BlockingConnection(pika_params(broker, certs.client_context()))  # others go on
    conn.close()


def test_a_client_not_trusting_the_server_certificate_gives_up(broker: BrokerProcess, certs: Certs) -> None:
    with pytest.raises((pex.AMQPConnectionError, ssl.SSLError)):
        pika.BlockingConnection(pika_params(broker, ssl.create_default_context()))  # system CAs only


def test_fail_if_no_peer_cert_refuses_clients_without_one(certs: Certs, tmp_path: Path) -> None:
    with tls_broker(certs, tmp_path, tls_fail_if_no_peer_cert=True) as b:
        with pytest.raises((pex.AMQPConnectionError, ssl.SSLError)):
            pika.BlockingConnection(pika_params(b, certs.client_context()))
        conn = pika.BlockingConnection(pika_params(b, certs.client_context(certs.client)))
        conn.close()


def test_subject_alternative_name_as_the_user(certs: Certs, tmp_path: Path) -> None:
    with tls_broker(certs, tmp_path, tls_cert_login_from="subject_alternative_name") as b:
        conn = pika.BlockingConnection(
            pika_params(b, certs.client_context(certs.san_client), pika.credentials.ExternalCredentials())
        )
        conn.close()


def test_minimum_tls_version_is_enforced(certs: Certs, tmp_path: Path) -> None:
    with tls_broker(certs, tmp_path, tls_min_version="TLSv1.3") as b:
        ctx = certs.client_context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((pex.AMQPConnectionError, ssl.SSLError)):
            pika.BlockingConnection(pika_params(b, ctx))
        conn = pika.BlockingConnection(pika_params(b, certs.client_context()))
        conn.close()


def served_certificate(port: int, ca_file: Path) -> x509.Certificate:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_sighup_reloads_the_certificate_without_a_restart(certs: Certs, tmp_path: Path) -> None:
    server_cert, server_key = write_pair(*certs.ca.issue("localhost", server=True), tmp_path, "reloaded")
    with tls_broker(certs, tmp_path, tls_cert_file=str(server_cert), tls_key_file=str(server_key)) as b:
        before = served_certificate(b.tls_port, certs.ca_file).serial_number
        kept = pika.BlockingConnection(pika_params(b, certs.client_context()))
        write_pair(*certs.ca.issue("localhost", server=True), tmp_path, "reloaded")
        assert b.proc is not None
        b.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while served_certificate(b.tls_port, certs.ca_file).serial_number == before:
            assert time.monotonic() < deadline, "the new certificate was not served after SIGHUP"
            time.sleep(0.05)
        assert round_trip(kept, b"still here") == b"still here"  # open connections carry on
        kept.close()
        assert any("TLS certificate reloaded" in line for line in b.stderr_lines)


def test_plain_amqp_and_garbage_on_the_tls_port_cost_nothing_but_those_sockets(certs: Certs, tmp_path: Path) -> None:
    with tls_broker(certs, tmp_path) as b:
        for junk in (b"AMQP\x00\x00\x09\x01", b"\x16\x03\x01\x00\x05hello", b"GET / HTTP/1.1\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", b.tls_port), timeout=10) as raw:
                raw.sendall(junk)
                raw.settimeout(10)
                try:
                    while raw.recv(4096):
                        pass
                except (ConnectionResetError, TimeoutError):
                    pass
        with pytest.raises((pex.AMQPConnectionError, ssl.SSLError)):
            pika.BlockingConnection(pika_params(b, certs.client_context(certs.rogue)))
        conn = pika.BlockingConnection(pika_params(b, certs.client_context()))
        assert round_trip(conn) == b"over tls"
        conn.close()
        assert not [line for line in b.stderr_lines if "Traceback" in line or " ERROR " in line]
