"""Users, vhosts and permissions through the management API, and what each user tag may see and do.

Runs against RabbitMQ's management plugin too (AMQPD_TEST_TARGET_URL, AMQPD_TEST_TARGET_MGMT_URL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pika
import pytest
from management_target import Target, target_fixture  # noqa: F401 - the broker fixture


@pytest.fixture
def api(target: Target) -> httpx.Client:
    return target.http


@pytest.fixture
def made(api: httpx.Client) -> Iterator[dict[str, list[str]]]:
    """Names of users and vhosts a test creates, removed afterwards."""
    created: dict[str, list[str]] = {"users": [], "vhosts": []}
    yield created
    for user in created["users"]:
        api.delete(f"/api/users/{user}")
    for vhost in created["vhosts"]:
        api.delete(f"/api/vhosts/{vhost}")


def new_user(api: httpx.Client, made: dict[str, list[str]], tags: str, password: str = "pw") -> str:
    name = f"mgmt-user-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/api/users/{name}", json={"password": password, "tags": tags}).status_code == 201
    made["users"].append(name)
    return name


def as_user(api: httpx.Client, name: str, password: str = "pw") -> httpx.Client:
    return httpx.Client(base_url=api.base_url, auth=(name, password), timeout=20)


def test_a_user_created_over_http_can_log_in_over_amqp_and_is_deleted(
    api: httpx.Client, target: Target, made: dict[str, list[str]]
) -> None:
    name = new_user(api, made, "administrator,monitoring", password="s3cret")
    assert (
        api.put(f"/api/users/{name}", json={"password": "s3cret", "tags": "administrator,monitoring"}).status_code
        == 204
    )
    info = api.get(f"/api/users/{name}").json()
    assert info["name"] == name and sorted(info["tags"]) == ["administrator", "monitoring"]
    assert info["hashing_algorithm"] == "rabbit_password_hashing_sha256" and info["password_hash"]
    assert (
        api.put(f"/api/permissions/%2F/{name}", json={"configure": ".*", "write": ".*", "read": ".*"}).status_code
        == 201
    )
    assert api.get(f"/api/permissions/%2F/{name}").json() == {
        "user": name,
        "vhost": "/",
        "configure": ".*",
        "write": ".*",
        "read": ".*",
    }
    params = pika.URLParameters(target.amqp)
    params.credentials = pika.PlainCredentials(name, "s3cret")
    pika.BlockingConnection(params).close()
    assert name in [u["name"] for u in api.get("/api/users").json()]
    assert any(p["user"] == name for p in api.get("/api/permissions").json())
    assert api.delete(f"/api/users/{name}").status_code == 204
    assert api.get(f"/api/users/{name}").status_code == 404
    assert api.get(f"/api/permissions/%2F/{name}").status_code == 404


def test_a_password_hash_moves_a_user_between_brokers(api: httpx.Client, made: dict[str, list[str]]) -> None:
    # "test12" hashed by RabbitMQ (rabbit_password_hashing_sha256), as in its docs' definitions examples
    name = f"mgmt-user-{uuid.uuid4().hex[:8]}"
    made["users"].append(name)
    body = {
        "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
        "tags": "management",
        "hashing_algorithm": "rabbit_password_hashing_sha256",
    }
    assert api.put(f"/api/users/{name}", json=body).status_code == 201
    assert api.get(f"/api/users/{name}").json()["password_hash"] == body["password_hash"]
    with as_user(api, name, "test12") as client:
        assert client.get("/api/whoami").json() == {"name": name, "tags": ["management"]}


def test_users_without_a_management_tag_may_not_use_the_api(api: httpx.Client, made: dict[str, list[str]]) -> None:
    name = new_user(api, made, "")
    with as_user(api, name) as client:
        r = client.get("/api/overview")
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorised", "reason": "Not management user"}


def test_monitoring_and_management_users_may_not_manage_users(api: httpx.Client, made: dict[str, list[str]]) -> None:
    for tags in ("monitoring", "management", "policymaker"):
        name = new_user(api, made, tags)
        with as_user(api, name) as client:
            assert client.get("/api/overview").status_code == 200
            for path in ("/api/users", "/api/permissions", f"/api/users/{name}"):
                r = client.get(path)
                assert r.status_code == 401, (tags, path)
                assert r.json() == {"error": "not_authorised", "reason": "Not administrator user"}


def test_a_management_user_needs_permissions_on_the_vhost_to_act_in_it(
    api: httpx.Client, made: dict[str, list[str]]
) -> None:
    name = new_user(api, made, "management")
    queue = f"mgmt-perm-{uuid.uuid4().hex[:8]}"
    with as_user(api, name) as client:
        refused = client.put(f"/api/queues/%2F/{queue}", json={"durable": False})
        assert refused.status_code == 401
        assert refused.json() == {"error": "not_authorised", "reason": "User not authorised to access virtual host"}
        api.put(f"/api/permissions/%2F/{name}", json={"configure": "^mgmt-perm-", "write": "", "read": ""})
        try:
            assert client.put(f"/api/queues/%2F/{queue}", json={"durable": False}).status_code == 201
            assert queue in [q["name"] for q in client.get("/api/queues/%2F").json()]
            other = client.put(f"/api/queues/%2F/x{queue}", json={"durable": False})
            assert other.status_code == 401
            assert client.delete(f"/api/queues/%2F/{queue}").status_code == 204
        finally:
            api.delete(f"/api/queues/%2F/{queue}")


def test_vhosts_are_created_listed_and_deleted(api: httpx.Client, made: dict[str, list[str]]) -> None:
    vhost = f"mgmt-vhost-{uuid.uuid4().hex[:8]}"
    made["vhosts"].append(vhost)
    assert api.put(f"/api/vhosts/{vhost}", json={"description": "for a test"}).status_code == 201
    assert api.put(f"/api/vhosts/{vhost}", json={"description": "for a test"}).status_code == 204
    assert api.get(f"/api/vhosts/{vhost}").json()["name"] == vhost
    # whoever creates a vhost over HTTP gets full permissions on it
    assert api.get(f"/api/permissions/{vhost}/guest").json() == {
        "user": "guest",
        "vhost": vhost,
        "configure": ".*",
        "write": ".*",
        "read": ".*",
    }
    assert api.put(f"/api/queues/{vhost}/q", json={"durable": False}).status_code == 201
    assert [q["name"] for q in api.get(f"/api/queues/{vhost}").json()] == ["q"]
    assert {p["user"] for p in api.get(f"/api/vhosts/{vhost}/permissions").json()} >= {"guest"}
    assert api.delete(f"/api/vhosts/{vhost}").status_code == 204
    assert api.get(f"/api/vhosts/{vhost}").status_code == 404
    assert api.delete(f"/api/vhosts/{vhost}").status_code == 404


def test_topic_permissions_are_set_listed_and_cleared(api: httpx.Client, made: dict[str, list[str]]) -> None:
    name = new_user(api, made, "management")
    body = {"exchange": "amq.topic", "write": "^a\\.", "read": ".*"}
    assert api.put(f"/api/topic-permissions/%2F/{name}", json=body).status_code == 201
    assert api.get(f"/api/topic-permissions/%2F/{name}").json() == [
        {"user": name, "vhost": "/", "exchange": "amq.topic", "write": "^a\\.", "read": ".*"}
    ]
    assert any(t["user"] == name for t in api.get("/api/topic-permissions").json())
    assert api.delete(f"/api/topic-permissions/%2F/{name}").status_code == 204
    assert api.get(f"/api/topic-permissions/%2F/{name}").status_code == 404


def test_only_policymakers_set_policies_but_management_users_read_them(
    api: httpx.Client, made: dict[str, list[str]]
) -> None:
    body = {"pattern": "^mgmt-nothing-", "definition": {"max-length": 1}}
    for tags, allowed in (("management", False), ("policymaker", True)):
        name = new_user(api, made, tags)
        api.put(f"/api/permissions/%2F/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
        with as_user(api, name) as client:
            assert client.get("/api/policies/%2F").status_code == 200
            r = client.put(f"/api/policies/%2F/{name}", json=body)
            if allowed:
                assert r.status_code == 201
                assert client.delete(f"/api/policies/%2F/{name}").status_code == 204
            else:
                assert r.status_code == 401
                assert r.json() == {"error": "not_authorised", "reason": "User not authorised to access object"}
