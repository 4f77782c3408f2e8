"""Exchanges, connections, policies and definitions through the UI, checked by what the broker then holds."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pika
from selenium.webdriver.support.ui import Select
from ui_browser import UI, Q, unique

from amqpd.testing import BrokerProcess

E = lambda s: Q(s, safe="")  # noqa: E731


def test_an_exchange_added_bound_published_to_and_unbound_from_the_ui(ui: UI, amqp: Any, admin: httpx.Client) -> None:
    exchange, queue = unique("ui-ex"), unique("ui-bound")
    amqp.queue_declare(queue)
    ui.logged_in("guest", "guest")
    ui.open("#/exchanges")
    ui.wait_css("#add-exchange")
    ui.fill("#add-exchange", {"name": exchange, "type": "topic"})
    ui.submit("#add-exchange")
    ui.wait_text("#exchanges", exchange)
    assert admin.get(f"/api/exchanges/%2F/{exchange}").json()["type"] == "topic"
    ui.open(f"#/exchanges/%2F/{exchange}")
    ui.wait_css("form.bind")
    ui.fill("form.bind", {"other": queue, "routing_key": "orders.*"})
    ui.submit("form.bind")
    ui.wait_text("#bindings-source", "orders.*")
    ui.fill("form.publish", {"routing_key": "orders.new", "payload": "hello"})
    ui.submit("form.publish")
    ui.wait_text("form.publish .status", "Message published.")
    _m, _p, body = amqp.basic_get(queue, auto_ack=True)
    assert body == b"hello"
    ui.screenshot("exchange")
    ui.find("#bindings-source button.unbind").click()
    ui.wait_text("#bindings-source", "No bindings.")
    assert admin.get(f"/api/exchanges/%2F/{exchange}/bindings/source").json() == []
    ui.find("#delete-exchange").click()
    ui.accept_confirm()
    ui.wait_css("#add-exchange")
    assert admin.get(f"/api/exchanges/%2F/{exchange}").status_code == 404
    amqp.queue_delete(queue)


def test_delayed_exchanges_show_how_many_wait_and_when_the_next_is_due(ui: UI, amqp: Any) -> None:
    exchange = unique("ui-delayed")
    amqp.exchange_declare(exchange, "x-delayed-message", arguments={"x-delayed-type": "direct"})
    for delay in (3_600_000, 7_200_000):
        amqp.basic_publish(exchange, "k", b"later", pika.BasicProperties(headers={"x-delay": delay}))
    ui.logged_in("guest", "guest")
    ui.open(f"#/exchanges/%2F/{exchange}")
    ui.wait_text("main", "Delayed messages")
    ui.wait_text("main", "Next due")
    text = ui.text("main")
    assert re.search(r"Delayed messages\s+2\b", text), text
    assert re.search(r"Next due\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text
    ui.screenshot("exchange-delayed")
    amqp.exchange_delete(exchange)


def test_a_connection_is_closed_from_its_page_with_the_reason_given(ui: UI, broker: BrokerProcess) -> None:
    params = pika.URLParameters(broker.url)
    name = unique("ui-client")
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    ui.logged_in("guest", "guest")
    ui.open("#/connections")
    ui.wait_text("#connections", name)
    ui.screenshot("connections")
    ui.find_all("#connections a.conn-name")[
        [e.text for e in ui.find_all("#connections .user-provided")].index(name)
    ].click()
    ui.wait_css("#close-connection")
    ui.open("#/channels")
    ui.wait_css("#channels")
    ui.screenshot("channels")
    ui.driver.back()
    ui.wait_css("#close-connection")
    ui.fill("#close-connection", {"reason": "maintenance window"})
    ui.submit("#close-connection")
    ui.wait_text("#close-connection", "Connection closed.")
    closed = []
    try:
        conn.process_data_events(time_limit=5)
        conn.sleep(1)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        closed.append(exc.reply_text)
    assert closed and "maintenance window" in closed[0]


def test_a_policy_is_added_and_deleted(ui: UI, admin: httpx.Client) -> None:
    name = unique("ui-policy")
    ui.logged_in("guest", "guest")
    ui.open("#/policies")
    ui.wait_css("#add-policy")
    ui.fill("#add-policy", {"name": name, "pattern": "^ui-limited", "definition": '{"max-length": 5}'})
    Select(ui.find("#add-policy [name='apply-to']")).select_by_value("queues")
    ui.submit("#add-policy")
    ui.wait_text("#policies", name)
    policy = admin.get(f"/api/policies/%2F/{name}").json()
    assert policy["definition"] == {"max-length": 5} and policy["apply-to"] == "queues"
    ui.screenshot("policies")
    ui.fill("#add-policy", {"definition": "{not json"})
    ui.submit("#add-policy")
    ui.wait_text("#add-policy .status", "not JSON")
    row = next(r for r in ui.find_all("#policies tbody tr") if name in r.text)
    row.find_element("css selector", "button").click()
    ui.wait(lambda d: name not in ui.text("#policies"), "the policy gone from the list")
    assert admin.get(f"/api/policies/%2F/{name}").status_code == 404


def test_definitions_upload_creates_what_the_file_describes(ui: UI, admin: httpx.Client, tmp_path: Any) -> None:
    queue = unique("ui-from-definitions")
    doc = {"queues": [{"name": queue, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}]}
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(doc))
    ui.logged_in("guest", "guest")
    ui.wait_css("#definitions-file")
    ui.find("#definitions-file").send_keys(str(path))
    ui.find("#definitions-upload").click()
    ui.wait_text("main", "Definitions imported.")
    assert admin.get(f"/api/queues/%2F/{E(queue)}").status_code == 200
    admin.delete(f"/api/queues/%2F/{E(queue)}")


def test_a_vhost_limit_is_set_and_cleared_from_its_page(ui: UI, admin: httpx.Client) -> None:
    vhost = unique("ui-limited")
    admin.put(f"/api/vhosts/{vhost}").raise_for_status()
    ui.logged_in("guest", "guest")
    ui.open(f"#/vhosts/{vhost}")
    ui.wait_css("#set-vhost-limit")
    ui.fill("#set-vhost-limit", {"limit": "max-queues", "value": "3"})
    ui.submit("#set-vhost-limit")
    ui.wait_text("#vhost-limits", "max-queues")
    assert admin.get(f"/api/vhost-limits/{vhost}").json() == [{"vhost": vhost, "value": {"max-queues": 3}}]
    ui.screenshot("vhost")
    ui.find("#vhost-limits button").click()
    ui.wait_text("#vhost-limits", "No limits.")
    assert admin.get(f"/api/vhost-limits/{vhost}").json() == []
    admin.delete(f"/api/vhosts/{vhost}")
