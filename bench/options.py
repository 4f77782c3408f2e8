"""Knobs shared by every scenario, set from the command line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    duration: float = 10.0  # measured seconds per steady-state scenario
    warmup: float = 2.0  # seconds of load before measuring, so queues and TCP windows reach steady state
    backlog: int = 1_000_000  # S4 message count
    s5_rate: float = 2000.0
    backlog_timeout: float = 900.0  # upper bound for each S4 phase
    # Publishers set their own message_id, correlation_id, timestamp and a header on every message, as
    # applications do (the headline); False for the equal-properties rows (scenario names ending in "EQ").
    app_properties: bool = True
