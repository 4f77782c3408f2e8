"""Policies through the management API: applied to existing and new queues and exchanges, with RabbitMQ's
precedence between a policy and a queue's own arguments. Runs against RabbitMQ too (management_target)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pika
import pytest
from management_target import Target, eventually, target_fixture  # noqa: F401 - the broker fixture


@pytest.fixture
def api(target: Target) -> httpx.Client:
    return target.http


@pytest.fixture
def prefix(api: httpx.Client) -> Iterator[str]:
    """A name prefix for this test's queues, exchanges and policies; all removed afterwards."""
    p = f"mgmt-pol-{uuid.uuid4().hex[:8]}"
    yield p
    for policy in api.get("/api/policies/%2F").json():
        if policy["name"].startswith(p):
            api.delete(f"/api/policies/%2F/{policy['name']}")
    for q in api.get("/api/queues/%2F", params={"columns": "name"}).json():
        if q["name"].startswith(p):
            api.delete(f"/api/queues/%2F/{q['name']}")
    for x in api.get("/api/exchanges/%2F", params={"columns": "name"}).json():
        if x["name"].startswith(p):
            api.delete(f"/api/exchanges/%2F/{x['name']}")


@pytest.fixture
def ch(target: Target) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(target.amqp))
    channel = conn.channel()
    channel.confirm_delivery()
    yield channel
    conn.close()


def ready(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def test_a_policy_is_stored_listed_and_deleted(api: httpx.Client, prefix: str) -> None:
    body = {"pattern": f"^{prefix}", "definition": {"max-length": 2}, "priority": 1, "apply-to": "queues"}
    assert api.put(f"/api/policies/%2F/{prefix}", json=body).status_code == 201
    assert api.put(f"/api/policies/%2F/{prefix}", json=body).status_code == 204
    assert api.get(f"/api/policies/%2F/{prefix}").json() == {
        "vhost": "/",
        "name": prefix,
        "pattern": f"^{prefix}",
        "apply-to": "queues",
        "definition": {"max-length": 2},
        "priority": 1,
    }
    assert prefix in [p["name"] for p in api.get("/api/policies").json()]
    assert api.delete(f"/api/policies/%2F/{prefix}").status_code == 204
    assert api.get(f"/api/policies/%2F/{prefix}").status_code == 404


@pytest.mark.parametrize("definition", [{"max-length": "x"}, {"no-such-setting": 1}, {"overflow": "sideways"}])
def test_an_invalid_policy_is_refused_with_400(api: httpx.Client, prefix: str, definition: dict) -> None:
    r = api.put(f"/api/policies/%2F/{prefix}", json={"pattern": ".*", "definition": definition})
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request" and r.json()["reason"].startswith("Validation failed")
    assert api.get(f"/api/policies/%2F/{prefix}").status_code == 404


def test_the_lower_of_policy_and_argument_max_length_applies_to_existing_queues(
    api: httpx.Client, ch: pika.adapters.blocking_connection.BlockingChannel, prefix: str
) -> None:
    low, high = f"{prefix}-low", f"{prefix}-high"
    ch.queue_declare(low, arguments={"x-max-length": 1})
    ch.queue_declare(high, arguments={"x-max-length": 10})
    for q in (low, high):
        for i in range(5):
            ch.basic_publish("", q, b"%d" % i)
    api.put(
        f"/api/policies/%2F/{prefix}",
        json={"pattern": f"^{prefix}", "definition": {"max-length": 3}, "apply-to": "queues"},
    )
    assert eventually(lambda: ready(ch, high) == 3)  # the policy's 3 is lower: it trims the existing backlog
    assert ready(ch, low) == 1  # the argument's 1 is lower
    method, _props, body = ch.basic_get(high, auto_ack=True)
    assert body == b"2"  # trimmed from the head
    info = eventually(
        lambda: (lambda q: q if q.get("policy") == prefix else None)(api.get(f"/api/queues/%2F/{high}").json())
    )
    assert info["effective_policy_definition"] == {"max-length": 3}
    assert info["arguments"] == {"x-max-length": 10}


def test_a_new_queue_gets_the_matching_policy_with_the_highest_priority(
    api: httpx.Client, ch: pika.adapters.blocking_connection.BlockingChannel, prefix: str
) -> None:
    api.put(
        f"/api/policies/%2F/{prefix}-a",
        json={"pattern": f"^{prefix}", "definition": {"max-length": 1}, "priority": 5, "apply-to": "queues"},
    )
    api.put(
        f"/api/policies/%2F/{prefix}-b",
        json={"pattern": f"^{prefix}", "definition": {"max-length": 4}, "priority": 1, "apply-to": "queues"},
    )
    api.put(
        f"/api/policies/%2F/{prefix}-c",
        json={"pattern": f"^{prefix}", "definition": {"max-length": 0}, "priority": 9, "apply-to": "exchanges"},
    )
    q = f"{prefix}-q"
    ch.queue_declare(q)
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    assert eventually(lambda: ready(ch, q) == 1)
    assert ch.basic_get(q, auto_ack=True)[2] == b"2"


def test_dead_letter_exchange_from_a_policy_and_the_argument_wins_over_it(
    api: httpx.Client, ch: pika.adapters.blocking_connection.BlockingChannel, prefix: str
) -> None:
    dlq_policy, dlq_arg = f"{prefix}-dlq-policy", f"{prefix}-dlq-arg"
    ch.queue_declare(dlq_policy)
    ch.queue_declare(dlq_arg)
    plain, own = f"{prefix}-plain", f"{prefix}-own"
    ch.queue_declare(plain)
    ch.queue_declare(own, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq_arg})
    api.put(
        f"/api/policies/%2F/{prefix}",
        json={
            "pattern": f"^{prefix}-(plain|own)$",
            "apply-to": "queues",
            "definition": {"dead-letter-exchange": "", "dead-letter-routing-key": dlq_policy},
        },
    )

    def rejected_to(queue: str, dlq: str) -> bool:
        ch.basic_publish("", queue, b"x")
        method, _props, _body = ch.basic_get(queue)
        ch.basic_reject(method.delivery_tag, requeue=False)
        return bool(eventually(lambda: ready(ch, dlq) >= 1, timeout=5))

    assert eventually(lambda: rejected_to(plain, dlq_policy))
    assert rejected_to(own, dlq_arg)


def test_an_alternate_exchange_from_a_policy_takes_unroutable_messages(
    api: httpx.Client, ch: pika.adapters.blocking_connection.BlockingChannel, prefix: str
) -> None:
    x, ae, q = f"{prefix}-x", f"{prefix}-ae", f"{prefix}-catch"
    ch.exchange_declare(x, "direct")
    ch.exchange_declare(ae, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, ae)
    api.put(
        f"/api/policies/%2F/{prefix}",
        json={"pattern": f"^{x}$", "definition": {"alternate-exchange": ae}, "apply-to": "exchanges"},
    )

    def caught() -> bool:
        ch.basic_publish(x, "nowhere", b"lost?")
        return ready(ch, q) > 0

    assert eventually(caught)
    api.delete(f"/api/policies/%2F/{prefix}")
    ch.queue_purge(q)

    def gone() -> bool:
        ch.basic_publish(x, "nowhere", b"lost")
        return ready(ch, q) == 0

    assert eventually(gone)


def test_deleting_a_policy_lifts_its_limit(
    api: httpx.Client, ch: pika.adapters.blocking_connection.BlockingChannel, prefix: str
) -> None:
    q = f"{prefix}-q"
    ch.queue_declare(q)
    api.put(f"/api/policies/%2F/{prefix}", json={"pattern": f"^{q}$", "definition": {"max-length": 1}})

    def limited() -> bool:
        for _ in range(3):
            ch.basic_publish("", q, b"x")
        return ready(ch, q) == 1

    assert eventually(limited)
    api.delete(f"/api/policies/%2F/{prefix}")

    def unlimited() -> bool:
        ch.queue_purge(q)
        for _ in range(3):
            ch.basic_publish("", q, b"x")
        return ready(ch, q) == 3

    assert eventually(unlimited)


@pytest.mark.amqpd_only
def test_policies_survive_a_restart_and_apply_to_recovered_queues(tmp_path: object) -> None:
    from amqpd.testing import BrokerProcess

    data = str(tmp_path)
    with BrokerProcess(data_dir=data, management=True) as broker:
        api = httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"))
        api.put("/api/queues/%2F/kept", json={"durable": True})
        assert (
            api.put(
                "/api/policies/%2F/lim",
                json={"pattern": "^kept$", "definition": {"max-length": 2}, "apply-to": "queues"},
            ).status_code
            == 201
        )
        api.put("/api/policies/%2F/dropped", json={"pattern": "x", "definition": {"max-length": 9}})
        api.delete("/api/policies/%2F/dropped")
    with BrokerProcess(data_dir=data, management=True) as broker:
        api = httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"))
        assert [p["name"] for p in api.get("/api/policies").json()] == ["lim"]
        assert api.get("/api/queues/%2F/kept").json()["policy"] == "lim"
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.confirm_delivery()
        for _ in range(4):
            ch.basic_publish("", "kept", b"x", pika.BasicProperties(delivery_mode=2))
        assert ready(ch, "kept") == 2
        conn.close()
