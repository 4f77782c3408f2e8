"""Spark over TLS: `amqps://` URIs with RabbitMQ's query parameters (cacertfile, …) for the executors, and an
https managementUri for the driver, checked with the same CA; reading and writing a stream as over amqp://."""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_streams import declare_stream, publish
from pyspark.sql import SparkSession

from amqpd.testing import BrokerProcess

# The TLS tests' certificates and amqps broker live with them (tests/integration).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
from test_stream_reader_tls import amqps_broker  # noqa: E402
from test_tls import Certs  # noqa: E402


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    certs = Certs(tmp_path_factory.mktemp("spark-tls"))
    with amqps_broker(certs, tmp_path_factory.mktemp("broker")) as broker:
        yield broker, certs.ca_file


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
