"""Spark over TLS: `amqps://` URIs with RabbitMQ's query parameters (cacertfile, …) for the executors, and an
https managementUri for the driver, checked with the same CA; reading and writing a stream as over amqp://."""

from __future__ import annotations

import json
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_streams import declare_stream, publish
from pyspark.sql import SparkSession

from amqpd.testing import BrokerProcess

# The TLS tests' certificate maker lives with them (tests/integration); these tests make their own CA with it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
from tls_certs import CA, write_pair  # noqa: E402


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    directory = tmp_path_factory.mktemp("spark-tls")
    ca = CA("amqpd spark test CA")
    ca_file = ca.write(directory / "ca.crt")
    cert, key = write_pair(*ca.issue("localhost", server=True), directory, "server")
    settings: dict[str, object] = {"tls_port": 0, "mgmt_tls_port": 0}
    for prefix in ("tls", "mgmt_tls"):
        settings |= {f"{prefix}_cert_file": str(cert), f"{prefix}_key_file": str(key)}
    config = directory / "amqpd.toml"
    config.write_text("[amqpd]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    with BrokerProcess(management=True, extra_args=["--config", str(config), "--in-memory"]) as broker:
        yield broker, ca_file


def test_read_and_write_over_amqps_with_an_https_management_uri(
    spark: SparkSession, tls: tuple[BrokerProcess, Path], stream_name: Callable[[str], str]
) -> None:
    broker, ca_file = tls
    source, target = stream_name("tls-src"), stream_name("tls-dst")
    declare_stream(broker, source)
    declare_stream(broker, target)
    publish(broker, source, [f"e{i}".encode() for i in range(30)])
    uri = f"amqps://guest:guest@localhost:{broker.tls_port}/%2F?" + urllib.parse.urlencode({"cacertfile": ca_file})

    df = (
        spark.read.format("amqpd")
        .option("uri", uri)
        .option("managementUri", broker.mgmt_tls_url)
        .option("queue", source)
        .load()
    )
    rows = sorted((r.offset, bytes(r.body)) for r in df.select("offset", "body").collect())
    assert rows == [(i, f"e{i}".encode()) for i in range(30)]

    df.select("stream", "offset", "body").write.format("amqpd").mode("append").option("uri", uri).option(
        "routing_key", target
    ).save()
    copied = spark.read.format("amqpd").option("uri", broker.url).option("managementUri", broker.mgmt_url)
    copied_rows = copied.option("queue", target).load().select("body").collect()
    assert sorted(bytes(r.body) for r in copied_rows) == sorted(f"e{i}".encode() for i in range(30))
