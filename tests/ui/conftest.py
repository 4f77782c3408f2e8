"""The web UI in a real browser: Debian's chromium driven by Selenium (headless), against an amqpd started for
the module with its management listener on an ephemeral port.

Each test saves screenshots of the pages it opens into $AMQPD_UI_SCREENSHOTS (default
/tmp/amqpd-ui-screens), outside the repository, for a reviewer to look at.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from selenium import webdriver
from ui_browser import CHROMEDRIVER, CHROMIUM, UI, chromium_options

from amqpd.testing import BrokerProcess


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the browser the tests cannot run; CI installs it (.ci/run), so there they must not be skipped."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(
            f"the UI tests need {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        )
    skip = pytest.mark.skip(reason="chromium and chromium-driver are not installed")
    for item in items:
        if "tests/ui/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    env = {"AMQPD_STATS_INTERVAL": "0.5", "AMQPD_MGMT_LOGIN_FAILURE_DELAY": "0.2"}
    with BrokerProcess(management=True, env=env) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"), timeout=20) as client:
        yield client


@pytest.fixture(scope="module")
def amqp(broker: BrokerProcess) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield conn.channel()
    if conn.is_open:
        conn.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="amqpd-ui-chromium-")
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=chromium_options(profile), service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def ui(browser: Any, broker: BrokerProcess) -> UI:
    return UI(browser, broker.mgmt_url)
