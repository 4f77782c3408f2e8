"""Fixtures for integration tests: real clients against the broker under test (`amqpd_url`).

Every test here must pass against RabbitMQ 3.10 too:
    AMQPD_TEST_TARGET_URL=amqp://guest:guest@127.0.0.1:5672/%2F python -m pytest tests/integration
except those marked `amqpd_only`, where amqpd deliberately answers better than RabbitMQ (which only drops
the socket); they are skipped when AMQPD_TEST_TARGET_URL is set.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "amqpd_only: amqpd answers better than RabbitMQ here (RabbitMQ drops the socket); "
        "skipped when AMQPD_TEST_TARGET_URL points the suite at another broker",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = os.environ.get("AMQPD_TEST_TARGET_URL")
    if not target:
        return
    skip = pytest.mark.skip(reason=f"amqpd-only behaviour; AMQPD_TEST_TARGET_URL={target}")
    for item in items:
        if "amqpd_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def params(amqpd_url: str) -> pika.URLParameters:
    p = pika.URLParameters(amqpd_url)
    p.blocked_connection_timeout = 30
    p.socket_timeout = 10
    p.stack_timeout = 30
    return p


@pytest.fixture
def connect(params: pika.URLParameters) -> Iterator[Callable[[], pika.BlockingConnection]]:
    """Opens pika BlockingConnections to the broker under test; closes them at the end of the test."""
    opened: list[pika.BlockingConnection] = []

    def _connect() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(params)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        if conn.is_open:
            conn.close()


@pytest.fixture
def conn(connect: Callable[[], pika.BlockingConnection]) -> pika.BlockingConnection:
    return connect()


@pytest.fixture
def ch(conn: pika.BlockingConnection) -> BlockingChannel:
    return conn.channel()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique entity names: name("q") -> "it.<test>.q.<random>"."""
    test = request.node.name.replace("[", ".").replace("]", "")[:60]

    def _name(kind: str = "x") -> str:
        return f"it.{test}.{kind}.{uuid.uuid4().hex[:8]}"

    return _name


@pytest.fixture
def cleanup(connect: Callable[[], pika.BlockingConnection]) -> Iterator[Callable[[str, str], None]]:
    """cleanup("queue", name) / cleanup("exchange", name): deleted after the test on a fresh connection."""
    todo: list[tuple[str, str]] = []
    yield lambda kind, n: todo.append((kind, n))
    if not todo:
        return
    try:
        conn = connect()
        for kind, n in todo:
            c = conn.channel()
            if kind == "queue":
                c.queue_delete(n)
            else:
                c.exchange_delete(n)
    except pika.exceptions.AMQPError:
        pass  # best effort: a broken broker must not hide the test's own failure
