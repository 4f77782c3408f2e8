"""What a user sees and may do in the UI follows its tags and permissions exactly as the API decides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ui_browser import UI, Q, queue_route, unique

E = lambda s: Q(s, safe="")  # noqa: E731


@pytest.fixture
def user(admin: httpx.Client) -> Iterator[Any]:
    made: list[str] = []

    def make(tags: str, vhost: str = "/", configure: str = ".*") -> str:
        name = unique("ui-user")
        admin.put(f"/api/users/{name}", json={"password": "pw", "tags": tags}).raise_for_status()
        admin.put(
            f"/api/permissions/{E(vhost)}/{name}", json={"configure": configure, "write": ".*", "read": ".*"}
        ).raise_for_status()
        made.append(name)
        return name

    yield make
    for name in made:
        admin.delete(f"/api/users/{name}")


def test_a_user_without_configure_permission_cannot_delete_a_queue(
    ui: UI, user: Any, amqp: Any, admin: httpx.Client
) -> None:
    name = unique("ui-kept")
    amqp.queue_declare(name)
    ui.logged_in(user("management", configure="^$"), "pw")
    ui.open(queue_route(name))
    ui.wait_text("#queue-name", name)
    ui.find("#delete-queue").click()
    ui.accept_confirm()
    ui.wait_text("#danger-status", "Access refused")
    ui.screenshot("permissions-delete-refused")
    assert admin.get(f"/api/queues/%2F/{E(name)}").status_code == 200
    amqp.queue_delete(name)


def test_only_administrators_see_and_manage_users(ui: UI, user: Any) -> None:
    for tags in ("management", "monitoring", "policymaker"):
        ui.logged_in(user(tags), "pw")
        menu = ui.text("#menu")
        assert "Users" not in menu and "Virtual hosts" not in menu
        assert ("Policies" in menu) == (tags == "policymaker")
        ui.open("#/users")
        ui.wait_text("main .flash", "Not administrator user")
    ui.screenshot("permissions-users-refused")
    ui.logged_in(user("administrator"), "pw")
    assert "Users" in ui.text("#menu")
    ui.open("#/users")
    ui.wait_text("#users", "guest")
    new = unique("ui-added")
    ui.fill("#add-user", {"username": new, "password": "pw2", "tags": "management"})
    ui.submit("#add-user")
    ui.wait_text("#users", new)
    ui.screenshot("users")
    assert httpx.get(ui.base + "/api/whoami", auth=(new, "pw2")).json()["name"] == new
    httpx.delete(ui.base + f"/api/users/{new}", auth=("guest", "guest"))


def test_a_management_user_sees_only_the_queues_of_its_vhosts(
    ui: UI, user: Any, admin: httpx.Client, amqp: Any
) -> None:
    vhost = unique("ui-vhost")
    admin.put(f"/api/vhosts/{vhost}").raise_for_status()
    mine, theirs = unique("ui-mine"), unique("ui-theirs")
    admin.put(f"/api/queues/{vhost}/{mine}", json={}).raise_for_status()
    amqp.queue_declare(theirs)
    ui.logged_in(user("management", vhost=vhost), "pw")
    ui.open("#/queues")
    ui.wait_css("#queue-filter")
    ui.fill(".filter", {"filter": "ui-"})
    ui.wait_text("#queue-table", mine)
    assert theirs not in ui.text("#queues")
    ui.screenshot("permissions-own-vhost")
    ui.open(queue_route(theirs))
    ui.wait_text("main .flash", "not authorised")
    amqp.queue_delete(theirs)
    admin.delete(f"/api/vhosts/{vhost}")
