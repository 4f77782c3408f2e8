"""The queue pages in a real browser: the list, publish and get, peek, move, replay of dead letters, the stream
browser and deletion, each checked by what the page shows and what the broker then holds."""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import httpx
import pika
from ui_browser import UI, Q, queue_route, unique


def test_login_shows_the_overview_and_a_queue_made_over_amqp_appears_in_the_list(ui: UI, amqp: Any) -> None:
    ui.logged_in("guest", "guest")
    ui.wait_css("#totals")
    ui.wait_css("svg.chart")
    ui.screenshot("overview")
    name = unique("ui-made-over-amqp")
    amqp.queue_declare(name)
    ui.open("#/queues")
    ui.wait_css("#queue-filter")
    ui.fill(".filter", {"filter": name})
    ui.wait_text("#queue-table", name)
    ui.screenshot("queues")
    amqp.queue_delete(name)


def test_wrong_password_is_refused_on_the_login_form(ui: UI) -> None:
    ui.login("guest", "not-the-password")
    ui.wait_text("#login-status", "Login failed")
    assert not ui.find_all("#whoami")
    ui.screenshot("login-failed")


def queue_page(ui: UI, name: str) -> None:
    ui.open(queue_route(name))
    ui.wait_text("#queue-name", name)


def test_publish_then_get_shows_the_message_and_takes_it_off_the_queue(ui: UI, amqp: Any, admin: httpx.Client) -> None:
    ui.logged_in("guest", "guest")
    name = unique("ui-publish-get")
    amqp.queue_declare(name)
    queue_page(ui, name)
    ui.fill("form.publish", {"payload": '{"order": 42}', "headers": "source=ui-test"})
    ui.submit("form.publish")
    ui.wait_text("form.publish .status", "Message published.")
    ui.wait_text("#count-ready", "1")
    ui.fill("#get-messages", {"ackmode": "ack_requeue_false"})
    ui.submit("#get-messages")
    ui.wait_text("#get-result", "source")
    assert json.loads(ui.text("#get-result pre.payload")) == {"order": 42}  # the JSON view first
    ui.screenshot("queue-get")
    assert admin.get(f"/api/queues/%2F/{Q(name, safe='')}").json()["messages"] == 0
    amqp.queue_delete(name)


def test_peek_shows_messages_and_leaves_them_unredelivered_in_place(ui: UI, amqp: Any, admin: httpx.Client) -> None:
    ui.logged_in("guest", "guest")
    name = unique("ui-peek")
    amqp.queue_declare(name)
    for i in range(3):
        amqp.basic_publish("", name, f"body-{i}".encode())
    queue_page(ui, name)
    ui.fill("#peek-messages", {"from": "1", "count": "5"})
    ui.submit("#peek-messages")
    ui.wait_text("#peek-result", "body-2")
    shown = [e.text for e in ui.find_all("#peek-result pre.payload")]
    assert shown == ["body-1", "body-2"]
    ui.screenshot("queue-peek")
    method, _props, body = amqp.basic_get(name, auto_ack=True)
    assert body == b"body-0" and method.redelivered is False
    assert admin.get(f"/api/queues/%2F/{Q(name, safe='')}").json()["messages"] == 2
    amqp.queue_delete(name)


def test_move_sends_messages_to_another_queue(ui: UI, amqp: Any, admin: httpx.Client) -> None:
    ui.logged_in("guest", "guest")
    source, target = unique("ui-move-from"), unique("ui-move-to")
    amqp.queue_declare(source)
    amqp.queue_declare(target)
    for i in range(5):
        amqp.basic_publish("", source, f"m{i}".encode())
    queue_page(ui, source)
    ui.fill("#move-messages", {"count": "3", "destination": target})
    ui.submit("#move-messages")
    ui.wait_text("#move-status", "3 message(s) moved.")
    assert amqp.queue_declare(target, passive=True).method.message_count == 3
    assert amqp.queue_declare(source, passive=True).method.message_count == 2
    ui.screenshot("queue-move")
    amqp.queue_delete(source)
    amqp.queue_delete(target)


def test_replay_puts_dead_letters_back_on_the_queue_they_died_in(ui: UI, amqp: Any) -> None:
    ui.logged_in("guest", "guest")
    work, dead = unique("ui-work"), unique("ui-dead")
    amqp.queue_declare(dead)
    amqp.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead})
    amqp.basic_publish("", work, b"failed job")
    method, _props, _body = amqp.basic_get(work)
    amqp.basic_reject(method.delivery_tag, requeue=False)
    queue_page(ui, dead)
    ui.wait_text("#count-ready", "1")
    ui.submit("#peek-messages")
    ui.wait_css("#peek-result .x-death table")
    assert work in ui.text("#peek-result .x-death table") and "rejected" in ui.text("#peek-result .x-death table")
    ui.screenshot("queue-dead-letters")
    ui.find("#replay-dead-letters").click()
    ui.wait_text("#move-status", "1 message(s) moved.")
    _m, _p, body = amqp.basic_get(work, auto_ack=True)
    assert body == b"failed job"
    amqp.queue_delete(work)
    amqp.queue_delete(dead)


def test_stream_browser_reads_pages_from_an_offset(ui: UI, amqp: Any) -> None:
    ui.logged_in("guest", "guest")
    name = unique("ui-stream")
    amqp.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    amqp.confirm_delivery()
    for i in range(30):
        amqp.basic_publish("", name, f"s{i}".encode(), pika.BasicProperties(headers={"n": i}))
    queue_page(ui, name)
    ui.fill("#stream-browser", {"offset": "10", "count": "5"})
    ui.submit("#stream-browser")
    ui.wait_text("#stream-result", "s14")
    assert [e.text for e in ui.find_all("#stream-result pre.payload")] == [f"s{i}" for i in range(10, 15)]
    assert "Offset" in ui.text("#stream-result") and "Appended" in ui.text("#stream-result")
    ui.screenshot("stream-browser")
    ui.find("#stream-next").click()
    ui.wait_text("#stream-result", "s19")
    assert [e.text for e in ui.find_all("#stream-result pre.payload")] == [f"s{i}" for i in range(15, 20)]
    amqp.queue_delete(name)


def test_delete_from_the_queue_page_removes_the_queue(ui: UI, amqp: Any, admin: httpx.Client) -> None:
    ui.logged_in("guest", "guest")
    name = unique("ui-delete")
    amqp.queue_declare(name)
    queue_page(ui, name)
    ui.find("#delete-queue").click()
    ui.accept_confirm()
    ui.wait_css("#queue-filter")  # back on the list
    assert admin.get(f"/api/queues/%2F/{Q(name, safe='')}").status_code == 404


def test_the_list_sorts_filters_by_regex_and_pages_on_the_server(ui: UI, amqp: Any, admin: httpx.Client) -> None:
    prefix = unique("ui-page")
    names = [f"{prefix}-{i:02d}" for i in range(25)]
    for n in names:
        amqp.queue_declare(n)
    amqp.basic_publish("", names[7], b"x")
    ui.logged_in("guest", "guest")
    ui.open("#/queues")
    ui.wait_css("#queue-filter")
    ui.fill(".filter", {"page_size": "20"})
    ui.fill(".filter", {"filter": f"^{prefix}-(0|1)"})
    ui.find("#queue-regex").click()
    ui.wait_text("#page-info", "20 matching")
    assert len(ui.find_all("#queue-table tbody tr")) == 20
    assert "Page 1 of 1" in ui.text("#page-info")
    ui.fill(".filter", {"filter": f"^{prefix}-"})
    ui.wait_text("#page-info", "25 matching")
    ui.find("#page-next").click()
    ui.wait_text("#page-info", "Page 2 of 2")
    assert [e.text for e in ui.find_all("#queue-table a.q-name")] == names[20:]
    ui.find("button[data-sort='messages']").click()
    ui.wait_text("button[data-sort='messages']", "▲")
    ui.find("button[data-sort='messages']").click()  # descending: the one with a message first
    ui.wait_text("button[data-sort='messages']", "▼")
    ui.wait_text("#page-info", "Page 1 of 2")
    ui.wait_text("#queue-table tbody tr:first-child", names[7])
    ui.screenshot("queues-filtered")
    for n in names:
        amqp.queue_delete(n)


def test_stream_browser_reads_from_a_time(ui: UI, amqp: Any) -> None:
    """Messages appended in an earlier second are skipped when reading from the start of a later second."""
    ui.logged_in("guest", "guest")
    name = unique("ui-stream-time")
    amqp.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    amqp.confirm_delivery()
    for i in range(3):
        amqp.basic_publish("", name, f"early-{i}".encode())
    second = int(time.time()) + 1
    while time.time() < second:  # the form takes whole seconds: the next messages go in a later one
        time.sleep(0.05)
    for i in range(3):
        amqp.basic_publish("", name, f"late-{i}".encode())
    queue_page(ui, name)
    stamp = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    ui.driver.execute_script("arguments[0].value = arguments[1]", ui.find("#stream-browser [name='time']"), stamp)
    ui.find("#stream-by-time").click()
    ui.wait_text("#stream-result", "late-0")
    assert [e.text for e in ui.find_all("#stream-result pre.payload")] == ["late-0", "late-1", "late-2"]
    assert ui.find("#stream-browser [name='offset']").get_attribute("value") == "3"
    ui.screenshot("stream-browser-time")
    amqp.queue_delete(name)
