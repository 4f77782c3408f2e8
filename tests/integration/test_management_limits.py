"""/api/vhost-limits and /api/user-limits: RabbitMQ's list shape, one limit set or cleared at a time, and the
broker enforcing what was set."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pika
import pytest
from management_target import Target, target_fixture  # noqa: F401 - the broker fixture


@pytest.fixture
def vhost(target: Target) -> Iterator[str]:
    name = f"limits-{uuid.uuid4().hex[:8]}"
    target.http.put(f"/api/vhosts/{name}").raise_for_status()
    yield name
    target.http.delete(f"/api/vhosts/{name}")


def test_a_vhost_limit_is_listed_enforced_and_cleared(target: Target, vhost: str) -> None:
    api = target.http
    assert api.put(f"/api/vhost-limits/{vhost}/max-queues", json={"value": 1}).status_code == 204
    assert api.get(f"/api/vhost-limits/{vhost}").json() == [{"vhost": vhost, "value": {"max-queues": 1}}]
    assert {"vhost": vhost, "value": {"max-queues": 1}} in api.get("/api/vhost-limits").json()
    params = pika.URLParameters(target.amqp)
    params.virtual_host = vhost
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare("first")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_declare("second")
        assert refused.value.reply_code == 406
    assert api.delete(f"/api/vhost-limits/{vhost}/max-queues").status_code == 204
    assert api.get(f"/api/vhost-limits/{vhost}").json() == []
    assert api.put(f"/api/vhost-limits/{vhost}/max-queues", json={"value": "x"}).status_code == 400


def test_a_user_limit_is_listed_and_cleared(target: Target) -> None:
    api, user = target.http, f"limited-{uuid.uuid4().hex[:8]}"
    api.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}).raise_for_status()
    try:
        assert api.put(f"/api/user-limits/{user}/max-channels", json={"value": 3}).status_code == 204
        assert api.get(f"/api/user-limits/{user}").json() == [{"user": user, "value": {"max-channels": 3}}]
        assert api.delete(f"/api/user-limits/{user}/max-channels").status_code == 204
        assert api.get(f"/api/user-limits/{user}").json() == []
        assert api.get("/api/user-limits/no-such-user").status_code == 404
        refused = httpx.get(str(api.base_url) + "/api/vhost-limits", auth=(user, "pw"))
        assert refused.status_code == 401
    finally:
        api.delete(f"/api/users/{user}")
