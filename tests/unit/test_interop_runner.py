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


def test_a_node_crash_on_both_brokers_is_not_an_agreement() -> None:
    crashed = {"node_raised": "TypeError", "text": "Cannot read properties of undefined"}
    outcome = run_pair(Scenario("t", "node", lambda url: crashed, timeout=5), "amqp://ref", "amqp://target")
    assert not outcome.agree
    assert "the scenario itself failed on RabbitMQ" in outcome.message and "node_raised" in outcome.message


def test_node_exiting_without_a_result_on_both_brokers_is_not_an_agreement() -> None:
    exited = {"node_failed": 1, "stderr": "SyntaxError"}
    outcome = run_pair(Scenario("t", "node", lambda url: exited, timeout=5), "amqp://ref", "amqp://target")
    assert not outcome.agree and "node_failed" in outcome.message


def test_a_celery_result_that_never_came_on_both_brokers_is_not_an_agreement() -> None:
    # Celery scenarios nest each result in the observation: a failure anywhere in it counts.
    timed_out = {"add": {"celery_failed": "TimeoutError"}, "echo": 5, "state": "PENDING"}
    outcome = run_pair(Scenario("t", "celery", lambda url: timed_out, timeout=5), "amqp://ref", "amqp://target")
    assert not outcome.agree and "celery_failed" in outcome.message


def test_a_crash_only_on_the_target_is_a_disagreement_not_a_broken_scenario() -> None:
    def crashes_on_target(url: str) -> dict:
        return {"node_raised": "Error"} if "target" in url else {"ok": True}

    outcome = run_pair(Scenario("t", "node", crashes_on_target, timeout=5), "amqp://ref", "amqp://target")
    assert not outcome.agree and "the scenario itself failed" not in outcome.message
