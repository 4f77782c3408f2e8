"""The browser side of the UI tests: chromium's options and a UI object with what the tests do and look for."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = os.environ.get("AMQPD_UI_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("AMQPD_UI_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(os.environ.get("AMQPD_UI_SCREENSHOTS", "/tmp/amqpd-ui-screens"))
WAIT = 20.0  # seconds a condition may take to show on the page (pages refresh every 5 s)
Q = urllib.parse.quote


def chromium_options(profile: str) -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return options


class UI:
    """The browser on one broker's UI, with what the tests do and look for."""

    def __init__(self, driver: Any, base: str) -> None:
        self.driver = driver
        self.base = base

    def open(self, route: str) -> None:
        self.driver.get(self.base + "/" + route)

    def login(self, username: str, password: str) -> None:
        self.driver.get(self.base + "/")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.get(self.base + "/")
        self.wait_css("form#login")
        self.driver.find_element(By.NAME, "username").send_keys(username)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.driver.find_element(By.CSS_SELECTOR, "form#login button[type=submit]").click()

    def logged_in(self, username: str, password: str) -> None:
        self.login(username, password)
        self.wait_text("#whoami", username)

    def wait(self, condition: Callable[[Any], Any], what: str) -> Any:
        try:
            return WebDriverWait(self.driver, WAIT).until(condition)
        except TimeoutException:
            self.screenshot("timeout-" + uuid.uuid4().hex[:6])
            raise AssertionError(f"not shown within {WAIT} s: {what}") from None

    def wait_css(self, css: str) -> Any:
        return self.wait(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)), css)

    def wait_text(self, css: str, text: str) -> None:
        self.wait(expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, css), text), f"{text!r} in {css}")

    def text(self, css: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def find(self, css: str) -> Any:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def fill(self, form_css: str, values: dict[str, str]) -> None:
        for name, value in values.items():
            field = self.find(f"{form_css} [name='{name}']")
            if field.tag_name == "select":
                Select(field).select_by_value(value)
            else:
                field.clear()
                field.send_keys(value)

    def submit(self, form_css: str) -> None:
        self.find(f"{form_css} button[type=submit]").click()

    def accept_confirm(self) -> None:
        self.wait(expected_conditions.alert_is_present(), "a confirmation dialog").accept()

    def alert_open(self) -> bool:
        try:
            self.driver.switch_to.alert  # noqa: B018 - raises when there is none
        except NoAlertPresentException:
            return False
        return True

    def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def queue_route(name: str, vhost: str = "/") -> str:
    return f"#/queues/{Q(vhost, safe='')}/{Q(name, safe='')}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
