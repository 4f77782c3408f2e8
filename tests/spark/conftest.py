"""Fixtures for the PySpark connector's tests: one SparkSession for the whole run (local[2,2]: two threads,
and a failed task is retried once, which the writer's exactly-once test needs), and one amqpd (with its
management API, which only the TLS test's managementUri override uses). Each test uses streams of its own names."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
from pyspark.sql import SparkSession

from amqpd.spark import register
from amqpd.testing import BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("amqpd-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # a Python worker's start on a loaded machine can take longer than the default 15 s to connect back
        .config("spark.python.authenticate.socketTimeout", "300s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(management=True) as b:
        yield b


@pytest.fixture
def stream_name() -> Callable[[str], str]:
    return lambda prefix: f"{prefix}-{next(_names)}"
