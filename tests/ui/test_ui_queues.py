"""The queue pages in a real browser: the list, publish and get, peek, move, replay of dead letters, the stream
browser and deletion, each checked by what the page shows and what the broker then holds."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pika
from conftest import UI, Q, queue_route, unique
from selenium.webdriver.common.by import By


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
