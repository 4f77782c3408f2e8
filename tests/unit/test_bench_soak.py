"""bench.soak's own honesty: a management server that drops an idle keep-alive connection does not end the
sampling, and a worker that died early fails the verdict instead of leaving the run half measured."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bench.soak import HTTP_ATTEMPTS, Sample, Soak, Target, verdict


def flat_samples(n: int = 9) -> list[Sample]:
    return [Sample(t=60.0 * i, rss_mb=60.0, fds=665, ping_p99_ms=10.0, confirm_p99_ms=10.0, queues=5,
                   connections=100, channels=100, confirmed=1000 * i) for i in range(n)]  # fmt: skip


def soak_with(handler: httpx.MockTransport) -> Soak:
    soak = Soak(Target("amqpd", "amqp://x/", "http://mgmt", "/", 0), 1, 1, 1, 1)
    soak.http = httpx.AsyncClient(transport=handler)
    return soak


def test_a_get_survives_the_server_closing_a_reused_connection() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json=[{"vhost": "/"}, {"vhost": "/"}, {"vhost": "other"}])

    soak = soak_with(httpx.MockTransport(handler))
    counts = asyncio.run(soak.objects())
    assert counts == {"queues": 2, "connections": 2, "channels": 2}
    assert soak.churned["http_retries"] == 1


def test_a_management_api_that_stays_down_still_ends_the_sampler() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    soak = soak_with(httpx.MockTransport(handler))
    with pytest.raises(httpx.ConnectError):  # a management API that never answers is not an empty one
        asyncio.run(soak.objects())
    assert soak.churned["http_retries"] == HTTP_ATTEMPTS - 1


def test_a_worker_that_died_fails_the_verdict() -> None:
    flows = {"durable": {"confirmed": 10, "lost": 0, "duplicated": 0}}
    assert verdict(flat_samples(), flows)["pass"]
    failed = verdict(flat_samples(), flows, failed=1)
    assert not failed["pass"] and failed["workers_failed"] == 1
