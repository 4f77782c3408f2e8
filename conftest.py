"""Fixtures shared by tests/ and interop/: an amqpd on an ephemeral port, and the reference RabbitMQ."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, settings

from amqpd.testing import BrokerProcess

# The suite runs on loaded machines: a property is judged by its examples, never by how long one took to make
# or run (a test's own @settings still overrides the rest).
settings.register_profile("amqpd", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("amqpd")

REFERENCE_URL = os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


@pytest.fixture(scope="session")
def project_broker() -> Iterator[BrokerProcess]:
    """One amqpd for the session; tests use unique names so they don't disturb each other. It listens on
    its default addresses (both loopbacks), as a user's would. (Not named amqpd_broker: that is the fixture of
    the amqpd pytest plugin, amqpd.testing.pytest_plugin, which these tests leave alone.)"""
    with BrokerProcess(hosts=()) as broker:
        yield broker


@pytest.fixture(scope="session")
def amqpd_url(request: pytest.FixtureRequest) -> str:
    """The broker under test. AMQPD_TEST_TARGET_URL points the same tests at another broker (RabbitMQ),
    which is how we check that a test asserts RabbitMQ's behaviour and not merely ours."""
    override = os.environ.get("AMQPD_TEST_TARGET_URL")
    if override:
        return override
    broker: BrokerProcess = request.getfixturevalue("project_broker")
    return broker.url


@pytest.fixture
def fresh_broker() -> Iterator[BrokerProcess]:
    """A broker of one's own, for tests that restart, crash or overload it."""
    with BrokerProcess() as broker:
        yield broker


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5672), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """The reference RabbitMQ; its absence is a failure, never a skip."""
    if not _reachable(REFERENCE_URL):
        pytest.fail(
            f"no reference RabbitMQ at {REFERENCE_URL}: run `bash scripts/ensure-rabbitmq.sh` "
            "(installs Debian's rabbitmq-server and starts it) or set AMQPD_REFERENCE_URL"
        )
    return REFERENCE_URL
