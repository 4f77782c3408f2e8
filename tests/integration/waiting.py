"""Waiting on a condition in the tests that watch brokers work in the background (shovels, federation links,
migrations): a bounded poll that names what it waited for when it gives up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0, interval: float = 0.1) -> Any:
    """The first truthy result of check(), polled every `interval` seconds for at most `timeout`."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
    return result
