"""Every registered scenario, run against the reference RabbitMQ and the broker under test."""

from __future__ import annotations

import pytest

from interop.conftest import OUTCOMES, target_is_reference
from interop.registry import Scenario, load_all
from interop.runner import dump, run_pair

SCENARIOS = load_all()


# Each side already stops at the scenario's own deadline; pytest-timeout is the backstop for the pair.
PARAMS = [pytest.param(sc, id=sid, marks=pytest.mark.timeout(2 * sc.timeout + 30)) for sid, sc in SCENARIOS.items()]


@pytest.mark.parametrize("sc", PARAMS)
def test_scenario_agrees_with_rabbitmq(sc: Scenario, rabbitmq_url: str, amqpd_url: str) -> None:
    outcome = run_pair(sc, rabbitmq_url, amqpd_url, same_broker=target_is_reference())
    OUTCOMES.append(outcome)
    assert outcome.agree, (
        f"{sc.id}: the client saw something else on the target than on RabbitMQ\n{outcome.message}\n"
        f"--- RabbitMQ saw:\n{dump(outcome.reference)}"
    )
