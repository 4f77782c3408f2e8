"""Helpers for the connector's tests: declare and fill a stream with pika, build a reader with the options
every test needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
from pyspark.sql import SparkSession

from amqpd.testing import BrokerProcess


def declare_stream(broker: BrokerProcess, name: str, **arguments: Any) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **arguments})
    conn.close()


def publish(
    broker: BrokerProcess, name: str, bodies: list[bytes], props: Callable[[int], pika.BasicProperties] | None = None
) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i, body in enumerate(bodies):
        ch.basic_publish("", name, body, props(i) if props else None)
    conn.close()


def reader(spark: SparkSession, broker: BrokerProcess, queue: str, streaming: bool = False, **options: Any) -> Any:
    r = (spark.readStream if streaming else spark.read).format("amqpd").option("uri", broker.url)
    r = r.option("queue", queue)  # offsets over AMQP: no management URI
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()
