"""Definitions: export in RabbitMQ's shape, atomic import, and the round trip with the reference RabbitMQ
(its management plugin on 127.0.0.1:15672): RabbitMQ's export imports into amqpd and amqpd's into RabbitMQ."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from amqpd.testing import BrokerProcess

REFERENCE_MGMT = os.environ.get("AMQPD_REFERENCE_MGMT_URL", "http://127.0.0.1:15672")
SECTIONS = ("users", "vhosts", "permissions", "topic_permissions", "policies", "queues", "exchanges", "bindings")

pytestmark = pytest.mark.amqpd_only  # it compares amqpd with RabbitMQ itself


@pytest.fixture(scope="module")
def amqpd() -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    with BrokerProcess(management=True) as broker:
        with httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"), timeout=30) as client:
            yield broker, client


@pytest.fixture(scope="module")
def rabbit() -> Iterator[httpx.Client]:
    with httpx.Client(base_url=REFERENCE_MGMT, auth=("guest", "guest"), timeout=30) as client:
        try:
            client.get("/api/overview").raise_for_status()
        except httpx.HTTPError as exc:
            pytest.fail(
                f"the reference RabbitMQ's management API at {REFERENCE_MGMT} is not reachable ({exc}): "
                "rabbitmq-plugins enable rabbitmq_management"
            )
        yield client


def only(doc: dict[str, Any], vhost: str, user: str) -> dict[str, Any]:
    """The parts of a whole-broker document that concern one vhost and one user, in a comparable form."""

    def mine(item: dict[str, Any]) -> bool:
        return item.get("vhost") == vhost or item.get("name") in (vhost, user) and "vhost" not in item

    out: dict[str, Any] = {}
    for section in SECTIONS:
        items = [i for i in doc.get(section, []) if mine(i)]
        if section == "vhosts":
            items = [{"name": i["name"]} for i in items]
        if section == "users":
            items = [{k: i[k] for k in ("name", "password_hash", "hashing_algorithm", "tags")} for i in items]
        out[section] = sorted(items, key=lambda i: repr(sorted(i.items())))
    return out


def populate(api: httpx.Client, vhost: str, user: str) -> None:
    """One of everything, over the API (the same calls on both brokers)."""

    def ok(r: httpx.Response) -> None:
        assert r.status_code in (201, 204), (r.request.method, r.request.url, r.status_code, r.text)

    ok(api.put(f"/api/vhosts/{vhost}", json={}))
    ok(api.put(f"/api/users/{user}", json={"password": "pw-" + user, "tags": "management"}))
    ok(api.put(f"/api/permissions/{vhost}/{user}", json={"configure": "^q", "write": ".*", "read": ".*"}))
    ok(api.put(f"/api/topic-permissions/{vhost}/{user}", json={"exchange": "amq.topic", "write": "^a", "read": ".*"}))
    ok(
        api.put(
            f"/api/policies/{vhost}/limit",
            json={"pattern": "^q", "definition": {"max-length": 100}, "priority": 2, "apply-to": "queues"},
        )
    )
    ok(api.put(f"/api/exchanges/{vhost}/events", json={"type": "topic", "durable": True}))
    ok(api.put(f"/api/exchanges/{vhost}/fan", json={"type": "fanout", "durable": True}))
    ok(api.put(f"/api/queues/{vhost}/q1", json={"durable": True, "arguments": {"x-message-ttl": 60000}}))
    ok(api.post(f"/api/bindings/{vhost}/e/events/q/q1", json={"routing_key": "a.#", "arguments": {}}))
    ok(api.post(f"/api/bindings/{vhost}/e/events/e/fan", json={"routing_key": "b.*", "arguments": {}}))


def cleanup(api: httpx.Client, vhost: str, user: str) -> None:
    api.delete(f"/api/vhosts/{vhost}")
    api.delete(f"/api/users/{user}")


def test_rabbitmqs_export_imports_into_amqpd_and_amqpds_export_into_rabbitmq(
    amqpd: tuple[BrokerProcess, httpx.Client], rabbit: httpx.Client
) -> None:
    broker, api = amqpd
    vhost, user = f"defs-{uuid.uuid4().hex[:8]}", f"defs-user-{uuid.uuid4().hex[:8]}"
    try:
        populate(rabbit, vhost, user)
        from_rabbit = only(rabbit.get("/api/definitions").json(), vhost, user)
        assert all(from_rabbit[s] for s in SECTIONS), from_rabbit

        r = api.post("/api/definitions", json=from_rabbit)
        assert r.status_code == 204, r.text
        assert only(api.get("/api/definitions").json(), vhost, user) == from_rabbit
        params = pika.URLParameters(broker.url.replace("%2F", vhost))
        params.credentials = pika.PlainCredentials(user, "pw-" + user)  # the hash carried the password
        pika.BlockingConnection(params).close()

        cleanup(rabbit, vhost, user)
        from_amqpd = only(api.get("/api/definitions").json(), vhost, user)
        r = rabbit.post("/api/definitions", json=from_amqpd)
        assert r.status_code in (200, 201, 204), r.text
        assert only(rabbit.get("/api/definitions").json(), vhost, user) == from_rabbit
    finally:
        cleanup(rabbit, vhost, user)
        cleanup(api, vhost, user)


def test_a_bad_entry_changes_nothing_and_is_named(amqpd: tuple[BrokerProcess, httpx.Client]) -> None:
    _broker, api = amqpd
    vhost = f"defs-{uuid.uuid4().hex[:8]}"
    doc = {
        "vhosts": [{"name": vhost}],
        "queues": [{"name": "good", "vhost": vhost, "durable": True, "auto_delete": False, "arguments": {}}],
        "exchanges": [
            {
                "name": "x",
                "vhost": vhost,
                "type": "direct",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "bindings": [
            {
                "source": "x",
                "vhost": vhost,
                "destination": "good",
                "destination_type": "queue",
                "routing_key": "k",
                "arguments": {},
            },
            {
                "source": "x",
                "vhost": vhost,
                "destination": "missing",
                "destination_type": "queue",
                "routing_key": "k",
                "arguments": {},
            },
        ],
    }
    before = api.get("/api/definitions").json()
    r = api.post("/api/definitions", json=doc)
    assert r.status_code == 400
    assert r.json() == {
        "error": "bad_request",
        "reason": f"bindings[1] 'missing' in vhost '{vhost}': no queue 'missing' in vhost '{vhost}'",
    }
    assert api.get("/api/definitions").json() == before
    assert api.get(f"/api/vhosts/{vhost}").status_code == 404

    bad_args = dict(doc, bindings=[], queues=[{"name": "q", "vhost": vhost, "arguments": {"x-max-length": "ten"}}])
    r = api.post("/api/definitions", json=bad_args)
    assert r.status_code == 400 and r.json()["reason"].startswith(f"queues[0] 'q' in vhost '{vhost}': invalid arg")
    assert api.get("/api/definitions").json() == before

    # an exchange type's own arguments, as its declare checks them (here the federation upstream's x-max-hops)
    for hops, reason in (("two", "Argument x-max-hops must be of type long"), (None, "Argument x-max-hops missing")):
        upstream = dict(doc["exchanges"][0], type="x-federation-upstream", arguments={"x-max-hops": hops})
        if hops is None:
            upstream["arguments"] = {}
        r = api.post("/api/definitions", json=dict(doc, bindings=[], exchanges=[upstream]))
        assert r.status_code == 400 and r.json()["reason"] == f"exchanges[0] 'x' in vhost '{vhost}': {reason}"
        assert api.get("/api/definitions").json() == before


def test_a_vhost_export_imports_into_another_vhost(amqpd: tuple[BrokerProcess, httpx.Client]) -> None:
    _broker, api = amqpd
    src, dst = f"defs-src-{uuid.uuid4().hex[:6]}", f"defs-dst-{uuid.uuid4().hex[:6]}"
    try:
        for v in (src, dst):
            api.put(f"/api/vhosts/{v}", json={})
        api.put(f"/api/queues/{src}/jobs", json={"durable": True})
        api.put(f"/api/exchanges/{src}/work", json={"type": "direct"})
        api.post(f"/api/bindings/{src}/e/work/q/jobs", json={"routing_key": "run"})
        doc = api.get(f"/api/definitions/{src}").json()
        assert "vhost" not in doc["queues"][0] and "users" not in doc
        assert api.post(f"/api/definitions/{dst}", json=doc).status_code == 204
        bindings = api.get(f"/api/bindings/{dst}/e/work/q/jobs").json()
        assert [b["routing_key"] for b in bindings] == ["run"]
    finally:
        for v in (src, dst):
            api.delete(f"/api/vhosts/{v}")


def test_definitions_given_at_start_are_loaded(tmp_path: Any) -> None:
    path = tmp_path / "defs.json"
    path.write_text(
        '{"queues": [{"name": "from-file", "vhost": "/", "durable": true, "auto_delete": false, '
        '"arguments": {}}], "policies": [{"vhost": "/", "name": "p", "pattern": "^from", '
        '"definition": {"max-length": 1}, "priority": 0, "apply-to": "queues"}]}'
    )
    with BrokerProcess(management=True, extra_args=["--definitions", str(path)]) as broker:
        q = httpx.get(broker.mgmt_url + "/api/queues/%2F/from-file", auth=("guest", "guest")).json()
    assert (q["name"], q["policy"], q["effective_policy_definition"]) == ("from-file", "p", {"max-length": 1})
