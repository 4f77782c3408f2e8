"""The PySpark connector's wire over TLS: an `amqps://` URI (RabbitMQ's URI query parameters cacertfile,
certfile, keyfile, verify, server_name_indication) for the executors' stream reader and publisher, and an
https management URI for the driver's offsets, checked with the same CA. Without pyspark: the connector's
wire and positions modules need none (tests/spark reads through Spark itself)."""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from test_tls import Certs

from amqpd.spark.positions import Bounds, HttpPositions
from amqpd.spark.reader import arrow_batches
from amqpd.spark.wire import Endpoint, Outgoing, Publisher, StreamReader
from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # streams' offsets API and amqps on a broker of its own


def amqps_broker(certs: Certs, directory: Path) -> BrokerProcess:
    """amqps on a free port and the management API over HTTPS (and both plain, for the setup)."""
    settings: dict[str, Any] = {"tls_port": 0, "mgmt_tls_port": 0}
    for prefix in ("tls", "mgmt_tls"):
        settings |= {
            f"{prefix}_cert_file": str(certs.server_cert),
            f"{prefix}_key_file": str(certs.server_key),
            f"{prefix}_ca_file": str(certs.ca_file),
        }
    config = directory / "amqpd.toml"
    config.write_text("[amqpd]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    return BrokerProcess(management=True, extra_args=["--config", str(config), "--in-memory"])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("stream-tls"))


@pytest.fixture(scope="module")
def broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with amqps_broker(certs, tmp_path_factory.mktemp("broker")) as b:
        assert b.tls_port
        yield b


def _stream(broker: BrokerProcess, name: str, count: int, size: int = 0) -> None:
    """Messages m0, m1, … (padded with dots to `size` bytes)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", name, f"m{i}".encode().ljust(size, b"."))
    conn.close()


def _uri(broker: BrokerProcess, **query: str) -> str:
    return f"amqps://guest:guest@localhost:{broker.tls_port}/%2F?{urllib.parse.urlencode(query)}"


def _read(endpoint: Endpoint, stream: str, end: int) -> list[bytes]:
    reader = StreamReader(endpoint, stream, 0, end, with_headers=False)
    return [body for batch in arrow_batches(reader) for body in batch.column("body").to_pylist()]


def test_an_amqps_uri_with_the_ca_reads_a_stream_and_https_gives_its_offsets(
    broker: BrokerProcess, certs: Certs
) -> None:
    _stream(broker, "tls-read", 40)
    endpoint = Endpoint.parse(_uri(broker, cacertfile=str(certs.ca_file)))
    assert endpoint.tls and endpoint.port == broker.tls_port
    assert _read(endpoint, "tls-read", 40) == [f"m{i}".encode() for i in range(40)]
    assert HttpPositions(broker.mgmt_tls_url, endpoint).bounds("tls-read") == Bounds(0, 40)


def test_chunks_of_many_frames_read_over_amqps_as_sent(broker: BrokerProcess, certs: Certs) -> None:
    """Chunk bodies of several 128 KiB frames, received straight into the batch's buffer from TLS records
    of at most 16 KiB: recvs end inside frames and frames inside recvs."""
    _stream(broker, "tls-large", 60, 50_000)
    endpoint = Endpoint.parse(_uri(broker, cacertfile=str(certs.ca_file)))
    assert _read(endpoint, "tls-large", 60) == [f"m{i}".encode().ljust(50_000, b".") for i in range(60)]


def test_the_publisher_confirms_over_amqps(broker: BrokerProcess, certs: Certs) -> None:
    _stream(broker, "tls-write", 0)
    publisher = Publisher(Endpoint.parse(_uri(broker, cacertfile=str(certs.ca_file))))
    try:
        for i in range(25):
            publisher.publish(Outgoing(exchange="", routing_key="tls-write", body=b"w%d" % i))
        publisher.flush()
    finally:
        publisher.close()
    plain = Endpoint.parse(broker.url)
    assert _read(plain, "tls-write", 25) == [b"w%d" % i for i in range(25)]


def test_a_broker_certificate_the_system_does_not_trust_is_refused(broker: BrokerProcess) -> None:
    _stream(broker, "tls-untrusted", 1)
    with pytest.raises(ssl.SSLCertVerificationError):
        _read(Endpoint.parse(_uri(broker)), "tls-untrusted", 1)


def test_verify_none_connects_without_the_ca(broker: BrokerProcess) -> None:
    _stream(broker, "tls-noverify", 3)
    assert _read(Endpoint.parse(_uri(broker, verify="verify_none")), "tls-noverify", 3) == [b"m0", b"m1", b"m2"]


def test_server_name_indication_is_the_name_checked() -> None:
    endpoint = Endpoint.parse("amqps://u:p@10.0.0.5/v?server_name_indication=broker.example&verify=verify_peer")
    assert (endpoint.port, endpoint.vhost, endpoint.server_name) == (5671, "v", "broker.example")
    with pytest.raises(ValueError, match="verify"):
        Endpoint.parse("amqps://u:p@host/?verify=sometimes")
