"""Runtime parameters through the management API, asked of amqpd and of the reference RabbitMQ (with its
shovel plugin) side by side: the same request gets the same status and, for refusals, the same reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from amqpd.testing import BrokerProcess

REFERENCE = "http://127.0.0.1:15672"


@pytest.fixture(scope="module")
def amqpd_api() -> Iterator[httpx.Client]:
    with BrokerProcess(management=True) as broker:
        with httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"), timeout=20) as client:
            yield client


@pytest.fixture(scope="module")
def rabbit_api() -> Iterator[httpx.Client]:
    with httpx.Client(base_url=REFERENCE, auth=("guest", "guest"), timeout=20) as client:
        try:
            shovels = client.get("/api/shovels")
        except httpx.HTTPError:
            pytest.fail("the reference RabbitMQ's management plugin is not answering on 15672")
        if shovels.status_code != 200:
            pytest.fail("the reference RabbitMQ has no shovel plugin (rabbitmq-plugins enable rabbitmq_shovel ...)")
        yield client


@pytest.fixture
def name(amqpd_api: httpx.Client, rabbit_api: httpx.Client) -> Iterator[str]:
    """A unique parameter name; whatever this test set under it is cleared on both brokers afterwards."""
    n = f"s28-{uuid.uuid4().hex[:8]}"
    yield n
    for api in (amqpd_api, rabbit_api):
        api.delete(f"/api/parameters/shovel/%2F/{n}")
        api.delete(f"/api/global-parameters/{n}")
        for q in ("src", "dest"):
            api.delete(f"/api/queues/%2F/{n}-{q}")


def both(amqpd_api: httpx.Client, rabbit_api: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
    """The same request to both; asserts the same status and (when there is one) the same JSON body."""
    ours, theirs = amqpd_api.request(method, path, **kw), rabbit_api.request(method, path, **kw)
    assert ours.status_code == theirs.status_code, (path, ours.text, theirs.text)
    if theirs.content:
        assert ours.json() == theirs.json()
    return ours


def shovel(name: str, **extra: Any) -> dict[str, Any]:
    value = {"src-uri": "amqp://", "src-queue": f"{name}-src", "dest-uri": "amqp://", "dest-queue": f"{name}-dest"}
    return {"value": {**value, **extra}}


def test_an_unknown_component_is_refused_as_rabbitmq_refuses_it(amqpd_api, rabbit_api, name) -> None:
    r = both(amqpd_api, rabbit_api, "PUT", f"/api/parameters/no-such-plugin/%2F/{name}", json={"value": {"a": 1}})
    assert r.status_code == 400
    assert r.json()["reason"] == "Validation failed\n\ncomponent no-such-plugin not found\n"
    both(amqpd_api, rabbit_api, "GET", "/api/parameters/no-such-plugin")


def test_a_parameter_in_a_missing_vhost_is_404(amqpd_api, rabbit_api, name) -> None:
    both(amqpd_api, rabbit_api, "PUT", f"/api/parameters/shovel/no-such-vhost-{name}/{name}", json=shovel(name))
    both(amqpd_api, rabbit_api, "GET", f"/api/parameters/shovel/%2F/{name}")
    both(amqpd_api, rabbit_api, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_a_global_parameter_is_set_read_and_cleared(amqpd_api, rabbit_api, name) -> None:
    path = f"/api/global-parameters/{name}"
    assert both(amqpd_api, rabbit_api, "PUT", path, json={"value": {"a": [1, "b"]}}).status_code == 201
    assert both(amqpd_api, rabbit_api, "GET", path).json() == {"value": {"a": [1, "b"]}, "name": name}
    assert both(amqpd_api, rabbit_api, "PUT", path, json={"value": 2}).status_code == 204
    assert both(amqpd_api, rabbit_api, "DELETE", path).status_code == 204
    assert both(amqpd_api, rabbit_api, "GET", path).status_code == 404


def test_a_shovel_parameter_is_listed_as_rabbitmq_lists_it(amqpd_api, rabbit_api, name) -> None:
    path = f"/api/parameters/shovel/%2F/{name}"
    assert both(amqpd_api, rabbit_api, "PUT", path, json=shovel(name)).status_code == 201
    expected = {"value": shovel(name)["value"], "vhost": "/", "component": "shovel", "name": name}
    assert both(amqpd_api, rabbit_api, "GET", path).json() == expected
    assert expected in amqpd_api.get("/api/parameters/shovel/%2F").json()
    assert both(amqpd_api, rabbit_api, "DELETE", path).status_code == 204


@pytest.mark.parametrize(
    "extra",
    [
        {"bogus": 1},
        {"src-queue": 5},
        {"src-uri": "foo://x"},
        {"src-uri": 5},
        {"src-exchange": "amq.direct"},
        {"src-prefetch-count": "x"},
        {"dest-add-forward-headers": 3},
        {"src-delete-after": "bad"},
        {"reconnect-delay": "x"},
        {"ack-mode": "bad"},
        {"dest-publish-properties": 3},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_a_bad_shovel_is_refused_with_rabbitmqs_reason(amqpd_api, rabbit_api, name, extra) -> None:
    r = both(amqpd_api, rabbit_api, "PUT", f"/api/parameters/shovel/%2F/{name}", json=shovel(name, **extra))
    assert r.status_code == 400
    assert r.json()["reason"].startswith("Validation failed\n\n")


def test_a_shovel_without_a_source_or_destination_uri_is_refused(amqpd_api, rabbit_api, name) -> None:
    for missing in ("src-queue", "dest-uri"):
        value = shovel(name)["value"]
        del value[missing]
        r = both(amqpd_api, rabbit_api, "PUT", f"/api/parameters/shovel/%2F/{name}", json={"value": value})
        assert r.status_code == 400
