"""The management HTTP API with a real HTTP client against a running amqpd, as rabbitmqadmin and other tools
use it: paths, status codes, JSON field names, error bodies.

Like the rest of tests/integration these assert RabbitMQ's behaviour: with AMQPD_TEST_TARGET_URL set they run
against RabbitMQ's management plugin at AMQPD_TEST_TARGET_MGMT_URL (default http://127.0.0.1:15672).
RabbitMQ's statistics lag up to 5 s, so reads of counts poll (bounded) until they settle.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from management_target import Target, eventually, target_fixture  # noqa: F401 - the broker fixture

from amqpd.testing import BrokerProcess

Q = urllib.parse.quote


@pytest.fixture
def api(target: Target) -> httpx.Client:
    return target.http


@pytest.fixture
def amqp(target: Target) -> Iterator[pika.BlockingConnection]:
    conn = pika.BlockingConnection(pika.URLParameters(target.amqp))
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def qname(api: httpx.Client) -> Iterator[str]:
    name = f"mgmt-test-{uuid.uuid4().hex[:10]}"
    yield name
    api.delete(f"/api/queues/%2F/{Q(name, safe='')}")


def queue_path(name: str) -> str:
    return f"/api/queues/%2F/{Q(name, safe='')}"


def test_requests_without_valid_credentials_get_401_with_rabbitmqs_body(api: httpx.Client) -> None:
    r = httpx.get(str(api.base_url) + "/api/overview", auth=("guest", "wrong"))
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorized", "reason": "Login failed"}
    assert httpx.get(str(api.base_url) + "/api/queues").status_code == 401


def test_overview_whoami_and_nodes_carry_the_fields_tools_read(api: httpx.Client) -> None:
    overview = api.get("/api/overview").json()
    for key in (
        "management_version",
        "rabbitmq_version",
        "cluster_name",
        "node",
        "object_totals",
        "queue_totals",
        "message_stats",
        "listeners",
        "exchange_types",
    ):
        assert key in overview, key
    assert {"connections", "channels", "exchanges", "queues", "consumers"} <= set(overview["object_totals"])
    assert any(listener["protocol"] == "amqp" for listener in overview["listeners"])
    assert api.get("/api/whoami").json() == {"name": "guest", "tags": ["administrator"]}
    nodes = api.get("/api/nodes").json()
    assert nodes[0]["name"] == overview["node"] and nodes[0]["running"] is True
    assert api.get(f"/api/nodes/{nodes[0]['name']}").json()["name"] == nodes[0]["name"]


def test_vhosts_and_the_default_exchanges_are_listed(api: httpx.Client) -> None:
    assert "/" in [v["name"] for v in api.get("/api/vhosts").json()]
    assert api.get("/api/vhosts/%2F").json()["name"] == "/"
    names = {x["name"] for x in api.get("/api/exchanges/%2F").json()}
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= names
    direct = api.get("/api/exchanges/%2F/amq.direct").json()
    assert (direct["type"], direct["durable"], direct["internal"], direct["vhost"]) == ("direct", True, False, "/")


def test_a_missing_object_is_404_with_rabbitmqs_body(api: httpx.Client) -> None:
    for path in (
        "/api/queues/%2F/no-such-queue-here",
        "/api/exchanges/%2F/no-such-x",
        "/api/vhosts/no-such-vhost",
        "/api/queues/no-such-vhost",
    ):
        r = api.get(path)
        assert r.status_code == 404, path
        assert r.json() == {"error": "Object Not Found", "reason": "Not Found"}


def test_a_queue_declared_over_http_is_usable_by_clients_and_shows_its_messages(
    api: httpx.Client, amqp: pika.BlockingConnection, qname: str
) -> None:
    r = api.put(queue_path(qname), json={"durable": False, "arguments": {"x-max-length": 10}})
    assert r.status_code == 201
    assert api.put(queue_path(qname), json={"durable": False, "arguments": {"x-max-length": 10}}).status_code == 204
    ch = amqp.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", qname, b"m%d" % i)

    def settled() -> Any:
        q = api.get(queue_path(qname)).json()
        return q if q.get("messages") == 3 else None

    q = eventually(settled)
    assert q["messages_ready"] == 3 and q["messages_unacknowledged"] == 0
    assert q["arguments"] == {"x-max-length": 10}
    assert (q["durable"], q["auto_delete"], q["exclusive"], q["state"]) == (False, False, False, "running")


def test_redeclaring_a_queue_differently_is_400_with_the_amqp_reason(api: httpx.Client, qname: str) -> None:
    api.put(queue_path(qname), json={"durable": False})
    r = api.put(queue_path(qname), json={"durable": True})
    assert r.status_code == 400
    assert r.json() == {
        "error": "bad_request",
        "reason": f"inequivalent arg 'durable' for queue '{qname}' in vhost '/': received 'true' but current is "
        "'false'",
    }


def test_queue_listing_supports_columns_sort_and_pages(api: httpx.Client) -> None:
    prefix = f"mgmt-page-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i}" for i in range(3)]
    try:
        for n in names:
            api.put(queue_path(n), json={"durable": False})
        listed = api.get(
            "/api/queues/%2F", params={"columns": "name,messages", "sort": "name", "sort_reverse": "true"}
        ).json()
        mine = [q for q in listed if q["name"].startswith(prefix)]
        assert [q["name"] for q in mine] == sorted(names, reverse=True)
        assert all(set(q) <= {"name", "messages"} and "name" in q for q in listed)
        page = api.get("/api/queues/%2F", params={"page": 2, "page_size": 1, "name": prefix, "sort": "name"}).json()
        assert {k: page[k] for k in ("filtered_count", "item_count", "page", "page_count", "page_size")} == {
            "filtered_count": 3,
            "item_count": 1,
            "page": 2,
            "page_count": 3,
            "page_size": 1,
        }
        assert page["items"][0]["name"] == sorted(names)[1]
        regex = api.get("/api/queues/%2F", params={"page": 1, "name": f"^{prefix}-[02]$", "use_regex": "true"}).json()
        assert sorted(q["name"] for q in regex["items"]) == [names[0], names[2]]
        bad = api.get("/api/queues", params={"page": 1, "page_size": 600})
        assert bad.status_code == 400
        assert bad.json() == {
            "error": "invalid_pagination_parameters",
            "reason": "Invalid pagination parameters: page number 1, page size 600",
        }
        out = api.get("/api/queues/%2F", params={"page": 9, "page_size": 1, "name": prefix})
        assert out.status_code == 400 and out.json()["error"] == "page_out_of_range"
    finally:
        for n in names:
            api.delete(queue_path(n))


def test_delete_queue_honours_if_empty_and_if_unused(
    api: httpx.Client, amqp: pika.BlockingConnection, qname: str
) -> None:
    api.put(queue_path(qname), json={"durable": False})
    ch = amqp.channel()
    ch.confirm_delivery()
    ch.basic_publish("", qname, b"x")
    r = api.delete(queue_path(qname), params={"if-empty": "true"})
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": f"queue '{qname}' in vhost '/' not empty"}
    ch.basic_consume(qname, lambda *a: None, auto_ack=False)
    r = api.delete(queue_path(qname), params={"if-unused": "true"})
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": f"queue '{qname}' in vhost '/' in use"}
    assert api.delete(queue_path(qname)).status_code == 204
    assert api.get(queue_path(qname)).status_code == 404
    assert api.delete(queue_path(qname)).status_code == 404


def test_purge_empties_the_queue(api: httpx.Client, amqp: pika.BlockingConnection, qname: str) -> None:
    api.put(queue_path(qname), json={"durable": False})
    ch = amqp.channel()
    ch.confirm_delivery()
    for _ in range(5):
        ch.basic_publish("", qname, b"x")
    assert api.delete(queue_path(qname) + "/contents").status_code == 204
    assert ch.queue_declare(qname, passive=True).method.message_count == 0


def test_publish_routes_and_get_returns_messages_with_rabbitmqs_ack_modes(api: httpx.Client, qname: str) -> None:
    api.put(queue_path(qname), json={"durable": True})
    body = {
        "routing_key": qname,
        "payload": "hello",
        "payload_encoding": "string",
        "properties": {"content_type": "text/plain", "headers": {"a": 1}, "delivery_mode": 2},
    }
    assert api.post("/api/exchanges/%2F/amq.default/publish", json=body).json() == {"routed": True}
    raw = {"routing_key": qname, "payload": "AP8=", "payload_encoding": "base64", "properties": {}}
    assert api.post("/api/exchanges/%2F/amq.default/publish", json=raw).json() == {"routed": True}
    unrouted = dict(body, routing_key="nowhere-" + qname)
    assert api.post("/api/exchanges/%2F/amq.default/publish", json=unrouted).json() == {"routed": False}

    got = api.post(queue_path(qname) + "/get", json={"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert got.status_code == 200
    first, second = got.json()
    assert first == {
        "payload_bytes": 5,
        "redelivered": False,
        "exchange": "",
        "routing_key": qname,
        "message_count": 1,
        "payload": "hello",
        "payload_encoding": "string",
        "properties": {"content_type": "text/plain", "headers": {"a": 1}, "delivery_mode": 2},
    }
    assert (second["payload"], second["payload_encoding"], second["message_count"]) == ("AP8=", "base64", 0)
    again = api.post(
        queue_path(qname) + "/get", json={"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
    ).json()
    assert (again[0]["payload"], again[0]["redelivered"]) == ("hello", True)
    rest = api.post(
        queue_path(qname) + "/get", json={"count": 5, "ackmode": "ack_requeue_false", "encoding": "base64"}
    ).json()
    assert [(m["payload"], m["payload_encoding"]) for m in rest] == [("AP8=", "base64")]
    empty = api.post(queue_path(qname) + "/get", json={"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"})
    assert empty.json() == []


def test_publish_to_a_missing_exchange_is_400_naming_the_amqp_error(api: httpx.Client) -> None:
    body = {"routing_key": "k", "payload": "x", "payload_encoding": "string", "properties": {}}
    r = api.post("/api/exchanges/%2F/mgmt-no-such-exchange/publish", json=body)
    assert r.status_code in (400, 404)  # RabbitMQ 3.10: 400 with the AMQP error; a missing object may be 404
    if r.status_code == 400:
        assert r.json()["reason"] == "404 NOT_FOUND - no exchange 'mgmt-no-such-exchange' in vhost '/'"


def test_a_body_that_is_not_json_is_400_not_json(api: httpx.Client) -> None:
    r = api.put("/api/exchanges/%2F/mgmt-not-json", content=b"garbage", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": "not_json"}


def test_exchanges_are_declared_and_deleted_and_amq_names_refused(api: httpx.Client) -> None:
    name = f"mgmt-x-{uuid.uuid4().hex[:8]}"
    path = f"/api/exchanges/%2F/{name}"
    try:
        assert api.put(path, json={"type": "topic", "durable": False}).status_code == 201
        assert api.get(path).json()["type"] == "topic"
        bad = api.put(f"/api/exchanges/%2F/{name}-2", json={"type": "nope"})
        assert bad.status_code == 400 and bad.json()["reason"] == "unknown exchange type 'nope'"
        assert api.put("/api/exchanges/%2F/amq.mgmt-test", json={"type": "direct"}).status_code == 401
        assert api.delete(path).status_code == 204
        assert api.get(path).status_code == 404
    finally:
        api.delete(path)


def test_bindings_are_created_with_a_location_and_deleted_by_it(api: httpx.Client, qname: str) -> None:
    api.put(queue_path(qname), json={"durable": False})
    pair = f"/api/bindings/%2F/e/amq.direct/q/{qname}"
    r = api.post(pair, json={"routing_key": "a key~1", "arguments": {}})
    assert r.status_code == 201
    assert r.headers["location"] == f"{qname}/a%2Bkey%257E1"  # the properties key, URL-quoted once more
    listed = api.get(pair).json()
    assert [
        (b["source"], b["destination"], b["destination_type"], b["routing_key"], b["properties_key"]) for b in listed
    ] == [("amq.direct", qname, "queue", "a key~1", "a+key%7E1")]
    assert api.get(f"{pair}/a+key%257E1").status_code == 200
    in_queue = api.get(queue_path(qname) + "/bindings").json()
    assert {(b["source"], b["routing_key"]) for b in in_queue} == {("", qname), ("amq.direct", "a key~1")}
    assert api.delete(f"{pair}/a+key%257E1").status_code == 204
    assert api.get(pair).json() == []
    missing = api.post(f"/api/bindings/%2F/e/mgmt-no-such-x/q/{qname}", json={"routing_key": "k"})
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "reason": "no exchange 'mgmt-no-such-x' in vhost '/'"}


def test_connections_channels_and_consumers_are_listed_and_a_connection_can_be_closed(
    api: httpx.Client, target: Target, qname: str
) -> None:
    params = pika.URLParameters(target.amqp)
    params.client_properties = {"connection_name": f"conn-{qname}"}
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare(qname)
        ch.basic_qos(prefetch_count=7)
        ch.basic_consume(qname, lambda *a: None, consumer_tag=f"tag-{qname}")

        def mine() -> Any:
            found = [c for c in api.get("/api/connections").json() if c.get("user_provided_name") == f"conn-{qname}"]
            return found[0] if found and found[0].get("channels") == 1 else None

        info = eventually(mine)
        assert info is not None
        assert (info["user"], info["vhost"], info["protocol"], info["channels"]) == ("guest", "/", "AMQP 0-9-1", 1)
        assert info["client_properties"]["connection_name"] == f"conn-{qname}"
        name = info["name"]
        assert api.get(f"/api/connections/{Q(name, safe='')}").json()["name"] == name

        def channel() -> Any:
            chans = [c for c in api.get("/api/channels").json() if c["connection_details"]["name"] == name]
            return chans[0] if chans and chans[0].get("consumer_count") == 1 else None

        chan = eventually(channel)
        assert (chan["number"], chan["prefetch_count"], chan["consumer_count"]) == (1, 7, 1)
        consumers = [c for c in api.get("/api/consumers/%2F").json() if c["consumer_tag"] == f"tag-{qname}"]
        assert consumers[0]["queue"] == {"name": qname, "vhost": "/"}
        assert (consumers[0]["ack_required"], consumers[0]["prefetch_count"]) == (True, 7)
        assert consumers[0]["channel_details"]["connection_name"] == name

        r = api.delete(f"/api/connections/{Q(name, safe='')}", headers={"X-Reason": "maintenance"})
        assert r.status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                conn.process_data_events(0.2)
        assert closed.value.reply_code == 320
        assert "maintenance" in closed.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


def test_message_rates_show_publishing_and_delivery(
    api: httpx.Client, amqp: pika.BlockingConnection, qname: str
) -> None:
    ch = amqp.channel()
    ch.queue_declare(qname)

    def rates() -> Any:
        for _ in range(200):
            ch.basic_publish("", qname, b"r")
        ch.basic_get(qname, auto_ack=True)
        stats = api.get(queue_path(qname)).json().get("message_stats", {})
        publish = stats.get("publish_details", {}).get("rate", 0)
        return stats if publish > 0 and stats.get("deliver_get_details", {}).get("rate", 0) > 0 else None

    stats = eventually(rates, timeout=30)
    assert stats, "no publish/deliver_get rate appeared"
    assert stats["publish"] >= 200 and stats["deliver_get"] >= 1
    overview = api.get("/api/overview").json()["message_stats"]
    assert overview["publish"] >= 200 and "publish_details" in overview


def test_health_checks_and_aliveness(api: httpx.Client, target: Target) -> None:
    assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
    assert api.get("/api/health/checks/local-alarms").json() == {"status": "ok"}
    assert api.get("/api/health/checks/virtual-hosts").json() == {"status": "ok"}
    assert api.get("/api/aliveness-test/%2F").json() == {"status": "ok"}
    port = urllib.parse.urlparse(target.amqp).port or 5672
    assert api.get(f"/api/health/checks/port-listener/{port}").json() == {"status": "ok", "port": port}
    missing = api.get("/api/health/checks/port-listener/1")
    assert missing.status_code == 503
    assert (missing.json()["status"], missing.json()["reason"]) == ("failed", "No active listener")
    api.delete("/api/queues/%2F/aliveness-test")


@pytest.mark.amqpd_only
def test_peek_shows_ready_messages_without_taking_or_flagging_them(
    api: httpx.Client, amqp: pika.BlockingConnection, qname: str
) -> None:
    ch = amqp.channel()
    ch.queue_declare(qname)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", qname, b"p%d" % i)
    peeked = api.post(queue_path(qname) + "/peek", json={"count": 2, "from": 1}).json()
    assert [(m["payload"], m["redelivered"]) for m in peeked] == [("p1", False), ("p2", False)]
    assert all(m["message_count"] == 5 for m in peeked)
    bodies = []
    for _ in range(5):
        method, _props, body = ch.basic_get(qname, auto_ack=True)
        bodies.append((body, method.redelivered))
    assert bodies == [(b"p%d" % i, False) for i in range(5)]


@pytest.mark.amqpd_only
def test_prometheus_metrics_use_rabbitmq_prometheus_names(amqp: pika.BlockingConnection, qname: str) -> None:
    with BrokerProcess(management=True) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare(qname)
        ch.confirm_delivery()
        for _ in range(4):
            ch.basic_publish("", qname, b"m")
        text = httpx.get(broker.metrics_url + "/metrics").text
        per_object = httpx.get(broker.metrics_url + "/metrics/per-object").text
        conn.close()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(samples["rabbitmq_queue_messages_ready"]) == 4
    assert float(samples["rabbitmq_connections"]) == 1
    assert float(samples["rabbitmq_channel_messages_published_total"]) == 4
    assert float(samples['rabbitmq_global_messages_received_total{protocol="amqp091"}']) == 4
    assert f'rabbitmq_queue_messages_ready{{queue="{qname}",vhost="/"}} 4.0' in per_object


@pytest.mark.amqpd_only
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/queues/%2F/" + "n" * 256, {}),
        ("PUT", "/api/queues/%2F/mgmt-bad", [1, 2]),
        ("PUT", "/api/queues/%2F/mgmt-bad", {"arguments": [1]}),
        (
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            {"routing_key": "k", "payload": "x", "payload_encoding": "string", "properties": {"timestamp": "noon"}},
        ),
        (
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            {"routing_key": "k", "payload": "x", "payload_encoding": "string", "properties": {"priority": "high"}},
        ),
        (
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            {"routing_key": "k", "payload": 5, "payload_encoding": "string", "properties": {}},
        ),
        ("POST", "/api/queues/%2F/aliveness-test/get", {"count": "all", "ackmode": "ack_requeue_true"}),
        ("POST", "/api/definitions", {"queues": "all"}),
        ("PUT", "/api/policies/%2F/mgmt-bad", {"pattern": 5, "definition": {}}),
        ("PUT", "/api/permissions/%2F/guest", {"configure": "(", "write": "", "read": ""}),
    ],
)
def test_bad_input_is_a_400_and_the_broker_carries_on(api: httpx.Client, method: str, path: str, body: Any) -> None:
    api.put("/api/queues/%2F/aliveness-test", json={"durable": False})
    r = api.request(method, path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request"
    assert api.get("/api/overview").status_code == 200
    api.delete("/api/queues/%2F/aliveness-test")


@pytest.mark.amqpd_only
def test_a_request_body_over_the_limit_is_refused_with_413() -> None:
    with BrokerProcess(management=True, env={"AMQPD_MGMT_MAX_BODY": "1000"}) as broker:
        big = b'{"arguments": {"x": "' + b"a" * 2000 + b'"}}'
        r = httpx.put(
            broker.mgmt_url + "/api/queues/%2F/big",
            content=big,
            auth=("guest", "guest"),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413
        assert httpx.get(broker.mgmt_url + "/api/queues/%2F/big", auth=("guest", "guest")).status_code == 404


@pytest.mark.amqpd_only
def test_a_taken_management_port_is_logged_and_amqp_still_served() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with BrokerProcess(extra_args=["--management-port", str(port), "--prometheus-port", "0"]) as broker:
            pika.BlockingConnection(pika.URLParameters(broker.url)).close()
            assert "management" not in broker.http_ports and "prometheus" in broker.http_ports
            assert any(
                f"http listener not started: cannot listen on 127.0.0.1:{port}" in line for line in broker.stderr_lines
            )
