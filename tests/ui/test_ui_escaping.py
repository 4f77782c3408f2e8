"""Names, headers, bodies and connection names are attacker-controlled: markup in them must show as text on
every page and never run. Each payload would set window.__pwned or add an element if the page parsed it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from ui_browser import UI, Q, queue_route

from amqpd.testing import BrokerProcess

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '"><img src=x onerror="window.__pwned=2">'
SVG = "<svg onload=window.__pwned=3>"
EVIL = f"q{SCRIPT}{IMG}{SVG}"  # one name carrying each payload
E = lambda s: Q(s, safe="")  # noqa: E731

# Run in the page after each visit: what would betray a payload that was parsed as markup.
INSPECT = """
const handlers = [...document.querySelectorAll('*')].filter(
  el => [...el.attributes].some(a => a.name.startsWith('on')));
return {
  pwned: window.__pwned === undefined ? null : window.__pwned,
  scripts: document.scripts.length,
  imgs: document.querySelectorAll('img').length,
  svgs: [...document.querySelectorAll('svg')].filter(s => !s.classList.contains('chart')).length,
  handlers: handlers.length,
  text: document.body.innerText,
};
"""


@pytest.fixture(scope="module")
def evil_objects(broker: BrokerProcess, admin: httpx.Client) -> Iterator[None]:
    """A queue, exchange, user, vhost, policy, binding and connection named with the payloads, and a
    message whose headers and body carry them."""
    admin.put(f"/api/vhosts/{E(EVIL)}", json={"description": SCRIPT})
    admin.put(f"/api/users/{E(EVIL)}", json={"password": "x", "tags": "management"})
    admin.put(f"/api/permissions/{E(EVIL)}/{E(EVIL)}", json={"configure": IMG, "write": ".*", "read": ".*"})
    admin.put(f"/api/policies/%2F/{E(EVIL)}", json={"pattern": IMG, "definition": {"max-length": 9}})
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": EVIL, "product": SVG}
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(EVIL)
    ch.exchange_declare(EVIL, "direct")
    ch.queue_bind(EVIL, EVIL, routing_key=SCRIPT)
    props = pika.BasicProperties(headers={IMG: SCRIPT, "x-note": SVG}, content_type=IMG, message_id=SCRIPT)
    ch.basic_publish(EVIL, SCRIPT, f"{SCRIPT}{IMG}".encode(), props)
    ch.basic_publish(EVIL, SCRIPT, b'{"k": "' + IMG.replace('"', '\\"').encode() + b'"}', props)
    ch.queue_declare(EVIL + "-consumed")
    ch.basic_consume(EVIL + "-consumed", lambda *_: None, consumer_tag=SCRIPT + IMG)
    yield
    ch.queue_delete(EVIL + "-consumed")
    ch.queue_delete(EVIL)
    ch.exchange_delete(EVIL)
    conn.close()
    admin.delete(f"/api/policies/%2F/{E(EVIL)}")
    admin.delete(f"/api/users/{E(EVIL)}")
    admin.delete(f"/api/vhosts/{E(EVIL)}")


def assert_inert(ui: UI, page: str) -> dict[str, Any]:
    seen = ui.driver.execute_script(INSPECT)
    assert not ui.alert_open(), page
    assert seen["pwned"] is None, page
    assert seen["scripts"] == 1 and seen["imgs"] == 0 and seen["svgs"] == 0 and seen["handlers"] == 0, (page, seen)
    return dict(seen)


def visit(ui: UI, route: str, ready_css: str, shot: str) -> dict[str, Any]:
    ui.open(route)
    ui.wait_text(ready_css, "<script>")
    ui.screenshot("escaping-" + shot)
    return assert_inert(ui, route)


def test_markup_in_names_headers_bodies_and_connection_names_shows_as_text(ui: UI, evil_objects: None) -> None:
    connection = httpx.get(ui.base + "/api/connections", auth=("guest", "guest")).json()
    name = next(c["name"] for c in connection if c.get("user_provided_name") == EVIL)
    ui.logged_in("guest", "guest")
    visit(ui, "#/connections", "#connections", "connections")
    seen = visit(ui, f"#/connections/{E(name)}", "main", "connection")
    assert SVG in seen["text"]
    visit(ui, "#/exchanges", "#exchanges", "exchanges")
    visit(ui, f"#/exchanges/%2F/{E(EVIL)}", "h1", "exchange")
    visit(ui, "#/queues", "#queue-table", "queues")
    visit(ui, queue_route(EVIL), "#queue-name", "queue")
    assert ui.text("#queue-name") == EVIL
    ui.fill("#peek-messages", {"count": "2"})
    ui.submit("#peek-messages")
    ui.wait_text("#peek-result", IMG)
    seen = assert_inert(ui, "peek")
    assert f"{SCRIPT}{IMG}" in seen["text"]
    for tab in ui.find_all("#peek-result .tabs button"):  # JSON, text, hex and base64 views
        tab.click()
        assert_inert(ui, "peek " + tab.text)
    ui.screenshot("escaping-message")
    seen = visit(ui, queue_route(EVIL + "-consumed"), "#consumers", "queue-consumers")
    assert SCRIPT + IMG in seen["text"]
    visit(ui, "#/users", "#users", "users")
    visit(ui, f"#/users/{E(EVIL)}", "h1", "user")
    visit(ui, "#/vhosts", "#vhosts", "vhosts")
    visit(ui, f"#/vhosts/{E(EVIL)}", "h1", "vhost")
    visit(ui, "#/policies", "#policies", "policies")
    ui.open("#/")
    ui.wait_css("#totals")
    assert_inert(ui, "overview")


def test_markup_in_a_user_name_is_inert_on_the_login_form_and_the_header(ui: UI, evil_objects: None) -> None:
    ui.logged_in(EVIL, "x")
    assert ui.text("#whoami") == EVIL
    assert_inert(ui, "logged in as the payload")
    ui.open(queue_route(EVIL))
    ui.wait_css("main .flash, #queue-name")
    assert_inert(ui, "queue page as the payload user")
