"""The interop runner: an agreement needs a real observation on RabbitMQ."""

from __future__ import annotations

import threading

from interop.registry import Scenario
from interop.runner import run_pair


def test_a_scenario_that_raises_on_both_brokers_is_not_an_agreement() -> None:
    def broken(url: str) -> dict:
        raise KeyError("the scenario's own bug")

    outcome = run_pair(Scenario("t", "broken", broken, timeout=5), "amqp://ref", "amqp://target")
    assert not outcome.agree
    assert "the scenario itself failed on RabbitMQ" in outcome.message and "KeyError" in outcome.message


def test_a_scenario_that_hangs_on_both_brokers_is_not_an_agreement() -> None:
    release = threading.Event()

    def hangs(url: str) -> dict:
        release.wait(5)
        return {}

    try:
        outcome = run_pair(Scenario("t", "hangs", hangs, timeout=0.05), "amqp://ref", "amqp://target")
    finally:
        release.set()
    assert not outcome.agree and "scenario_hung" in outcome.message


def test_the_same_observation_on_both_brokers_agrees() -> None:
    outcome = run_pair(Scenario("t", "fine", lambda url: {"ok": True}, timeout=5), "amqp://ref", "amqp://target")
    assert outcome.agree
