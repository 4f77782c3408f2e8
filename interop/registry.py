"""The scenario registry: every scenario is a plain function `(url) -> observation` registered under an area."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Observation = Any  # anything JSON-able: dicts, lists, str, int, float, bool, None
ScenarioFn = Callable[[str], Observation]


@dataclass(frozen=True)
class Scenario:
    area: str
    name: str
    fn: ScenarioFn
    timeout: float = 20.0
    # When amqpd lacks a feature the scenario needs: "needs <feature>, issue #N". The pytest test then
    # is xfail(strict=True) against amqpd (never against RabbitMQ-vs-RabbitMQ runs).
    needs: str | None = None
    # Observations the two brokers are *documented* to differ on (RabbitMQ bug amqpd improves on):
    # compare(reference, target) returns None when the target shows the documented behaviour, or a message
    # saying what it did instead. Used only when the target is not the reference itself (then: equality).
    compare: Callable[[Observation, Observation], str | None] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def id(self) -> str:
        return f"{self.area}/{self.name}"


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    area: str,
    name: str | None = None,
    *,
    timeout: float = 20.0,
    needs: str | None = None,
    compare: Callable[[Observation, Observation], str | None] | None = None,
) -> Callable[[ScenarioFn], ScenarioFn]:
    """Register `fn` as scenario `area/name` (name defaults to the function's name)."""

    def register(fn: ScenarioFn) -> ScenarioFn:
        sc = Scenario(area, name or fn.__name__, fn, timeout, needs, compare)
        if sc.id in SCENARIOS:
            raise ValueError(f"duplicate scenario {sc.id}")
        SCENARIOS[sc.id] = sc
        return fn

    return register


def add(area: str, name: str, fn: ScenarioFn, **kw: Any) -> None:
    """Register a generated scenario (for tables of cases, e.g. topic patterns)."""
    scenario(area, name, **kw)(fn)


def load_all() -> dict[str, Scenario]:
    import interop.scenarios  # noqa: F401  (importing registers every scenario module)

    return SCENARIOS
