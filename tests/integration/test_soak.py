"""The soak (bench/soak.py) in CI size: two minutes of churn against a fresh amqpd. It asserts the verdict —
nothing lost, fds flat, RSS not growing without bound — not timings. The long run, side by side with
RabbitMQ, is `python -m bench.soak --minutes 30 --rabbitmq` (docs/soak.md)."""

from __future__ import annotations

import asyncio

import pytest

from bench.soak import soak_amqpd

# two minutes of churn, then up to a minute to drain what TTL and delays still hold, and the broker's stop
pytestmark = pytest.mark.timeout(360)


def test_two_minutes_of_churn_lose_nothing_and_leak_no_fds_or_memory() -> None:
    report = asyncio.run(soak_amqpd(seconds=120, connections=100, rate=10, sample_s=10))
    flows = report["flows"]
    assert set(flows) == {"durable", "ttl", "stream", "delayed"}
    assert all(f["confirmed"] > 0 for f in flows.values()), flows
    assert {name: (f["lost"], f["duplicated"]) for name, f in flows.items()} == {name: (0, 0) for name in flows}
    churned = report["churned"]
    assert churned["connections_closed"] > 0 and churned["queues"] > 0 and churned["workers_stuck_at_stop"] == 0
    assert churned["workers_failed"] == 0, churned
    v = report["verdict"]
    assert not v["fds"]["grew"], v["fds"]
    assert not v["rss_mb"]["grew"], v["rss_mb"]
    # the broker held the whole pool of connections the whole time (a leak of closed ones would show here)
    assert max(s["connections"] for s in report["samples"]) <= 100 + 10
