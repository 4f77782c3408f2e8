"""The broker the management tests talk to: a fresh amqpd with its management API on an ephemeral port, or,
with AMQPD_TEST_TARGET_URL set, RabbitMQ and its management plugin (AMQPD_TEST_TARGET_MGMT_URL, default
http://127.0.0.1:15672), so the same tests check that they assert RabbitMQ's behaviour."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from amqpd.testing import BrokerProcess


@dataclass
class Target:
    amqp: str
    http: httpx.Client
    is_amqpd: bool


@pytest.fixture(scope="module", name="target")
def target_fixture() -> Iterator[Target]:
    override = os.environ.get("AMQPD_TEST_TARGET_URL")
    if override:
        base = os.environ.get("AMQPD_TEST_TARGET_MGMT_URL", "http://127.0.0.1:15672")
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=20) as client:
            yield Target(override, client, False)
        return
    with BrokerProcess(management=True, env={"AMQPD_STATS_INTERVAL": "0.2"}) as broker:
        with httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"), timeout=20) as client:
            yield Target(broker.url, client, True)


def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """The first truthy result of check(), polled until the deadline (RabbitMQ's stats settle every 5 s)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)
