"""The web UI as served: its files at / and /ui/ with a Content-Security-Policy that forbids inline script,
nothing else reachable through them; failed API logins slowed (without holding up anyone else), logged and
counted; the overview's ten minutes of history for the charts."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pika
import pytest
from management_target import eventually

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # amqpd's own UI and its login delay

DELAY = 3.0  # long enough that a refused login is certainly still waiting while a good one is answered


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    env = {"AMQPD_STATS_INTERVAL": "0.2", "AMQPD_MGMT_LOGIN_FAILURE_DELAY": str(DELAY)}
    with BrokerProcess(management=True, env=env) as b:
        yield b


def test_the_page_and_its_modules_are_served_with_a_policy_against_inline_script(broker: BrokerProcess) -> None:
    page = httpx.get(broker.mgmt_url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert 'src="/ui/app.js"' in page.text
    for path in ("/ui/app.js", "/ui/pages/queues.js"):
        module = httpx.get(broker.mgmt_url + path)
        assert module.status_code == 200 and module.headers["content-type"].startswith("text/javascript")
        assert "unsafe-inline" not in module.headers["content-security-policy"]
    cached = httpx.get(broker.mgmt_url + path, headers={"If-None-Match": module.headers["etag"]})
    assert cached.status_code == 304 and not cached.content


def test_only_the_packaged_files_are_reachable_under_ui(broker: BrokerProcess) -> None:
    for path in ("/ui/nope.js", "/ui/../webui.py", "/ui/%2e%2e/webui.py", "/ui/", "/ui/pages"):
        r = httpx.get(broker.mgmt_url + path)
        assert r.status_code == 404, path
    assert httpx.post(broker.mgmt_url + "/").status_code == 405


def test_a_refused_login_is_slowed_logged_and_does_not_hold_up_other_users(broker: BrokerProcess) -> None:
    refused: list[httpx.Response] = []
    bad = threading.Thread(
        target=lambda: refused.append(httpx.get(broker.mgmt_url + "/api/overview", auth=("guest", "wrong"), timeout=30))
    )
    bad.start()
    good = httpx.get(broker.mgmt_url + "/api/whoami", auth=("guest", "guest"), timeout=30)
    assert good.status_code == 200
    assert bad.is_alive(), "the refused login was answered before the delay"
    bad.join(timeout=30)
    assert refused[0].status_code == 401 and refused[0].json() == {"error": "not_authorized", "reason": "Login failed"}
    assert "www-authenticate" in refused[0].headers
    assert eventually(lambda: any("HTTP login refused for user 'guest'" in line for line in broker.stderr_lines))
    from_ui = httpx.get(
        broker.mgmt_url + "/api/whoami", auth=("guest", "wrong"), headers={"X-Requested-With": "XMLHttpRequest"}
    )
    assert from_ui.status_code == 401 and "www-authenticate" not in from_ui.headers  # no browser login dialog


def test_the_overview_carries_ten_minutes_of_samples_for_the_charts(broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for _ in range(5):
        ch.basic_publish("", q, b"x")
    url = broker.mgmt_url + "/api/overview?msg_rates_age=600&msg_rates_incr=5&lengths_age=600&lengths_incr=5"

    def samples() -> dict | None:
        o = httpx.get(url, auth=("guest", "guest")).json()
        latest = o["queue_totals"]["messages_ready_details"]["samples"]
        return o if latest and latest[0]["sample"] == 5 else None

    overview = eventually(samples)
    assert overview, "the queued messages never showed in the samples"
    published = overview["message_stats"]["publish_details"]["samples"]
    assert published[0]["sample"] == 5
    stamps = [s["timestamp"] for s in published]
    assert stamps == sorted(stamps, reverse=True)
    assert all(a - b >= 4900 for a, b in zip(stamps, stamps[1:], strict=False))  # one per msg_rates_incr
    assert httpx.get(broker.mgmt_url + "/api/overview?msg_rates_age=x", auth=("guest", "guest")).status_code == 400
    conn.close()


def test_refused_logins_from_one_address_are_answered_one_after_another(broker: BrokerProcess) -> None:
    """Guessing in parallel gains nothing: the second refusal waits for the first one's pause to end."""
    done: list[str] = []

    def guess(label: str) -> None:
        httpx.get(broker.mgmt_url + "/api/whoami", auth=("guest", f"wrong-{label}"), timeout=30)
        done.append(label)

    def refusals() -> int:
        return sum("HTTP login refused" in line for line in broker.stderr_lines)

    before = refusals()
    first = threading.Thread(target=guess, args=("first",))
    first.start()
    assert eventually(lambda: refusals() > before)  # the first is in its pause
    second = threading.Thread(target=guess, args=("second",))
    second.start()
    first.join(timeout=30)
    second.join(timeout=DELAY / 2)  # had they waited side by side, the second would be answered by now
    assert done == ["first"]
    second.join(timeout=30)
    assert done == ["first", "second"]
