"""Interop suite plumbing: xfail marks for features amqpd lacks, and the end-of-session summary."""

from __future__ import annotations

import os
import shutil
import subprocess
from urllib.parse import urlparse

import pytest

from interop import access_users, scope
from interop.runner import Outcome

OUTCOMES: list[Outcome] = []


def pytest_configure(config: pytest.Config) -> None:
    """The access scenarios' users and vhosts, on both brokers: amqpd imports them at boot (the session's
    amqpd starts after collection), RabbitMQ now."""
    path = access_users.write_definitions()
    os.environ["AMQPD_LOAD_DEFINITIONS"] = path
    access_users.install_on_reference(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    access_users.remove_from_reference()
    path = os.environ.pop("AMQPD_LOAD_DEFINITIONS", "")
    if path and os.path.exists(path):
        os.unlink(path)


def target_is_reference() -> bool:
    """True when AMQPD_TEST_TARGET_URL points at the reference RabbitMQ (RabbitMQ-vs-RabbitMQ run)."""
    override = os.environ.get("AMQPD_TEST_TARGET_URL")
    if not override:
        return False
    ref = urlparse(os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F"))
    tgt = urlparse(override)
    return (tgt.hostname, tgt.port or 5672, tgt.path) == (ref.hostname, ref.port or 5672, ref.path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if target_is_reference():
        return
    for item in items:
        needs = getattr(getattr(item, "callspec", None), "params", {}).get("sc")
        needs = getattr(needs, "needs", None)
        if needs:
            item.add_marker(pytest.mark.xfail(strict=True, reason=needs))


def _leftovers_on_reference() -> list[str] | None:
    """Names with a run token still on the reference broker (rabbitmqctl, when this machine has it)."""
    ctl = shutil.which("rabbitmqctl")
    if not ctl or os.environ.get("AMQPD_REFERENCE_URL"):
        return None
    found: list[str] = []
    for what in ("list_queues", "list_exchanges"):
        try:
            out = subprocess.run([ctl, "-q", what, "name"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found += [f"{what[5:-1]} {line.strip()}" for line in out.stdout.splitlines() if scope.TOKEN_RE.search(line)]
    return found


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not OUTCOMES:
        return
    tr = terminalreporter
    agree = sum(o.agree for o in OUTCOMES)
    secs = sum(o.seconds for o in OUTCOMES)
    tr.section("interop")
    by_area: dict[str, list[Outcome]] = {}
    for o in OUTCOMES:
        by_area.setdefault(o.scenario.area, []).append(o)
    for area, outs in sorted(by_area.items()):
        tr.write_line(f"  {area:<12} {len(outs):4d} scenarios, {sum(o.agree for o in outs):4d} agree")
    for o in OUTCOMES:
        if not o.agree:
            tr.write_line(f"  DISAGREE {o.scenario.id}" + (f"  [{o.scenario.needs}]" if o.scenario.needs else ""))
    if os.environ.get("INTEROP_CHECK_LEFTOVERS", "1") == "1":
        left = _leftovers_on_reference()
        if left:
            tr.write_line(f"  LEFT ON RABBITMQ by scenarios ({len(left)}): {', '.join(left[:20])}")
    tr.write_line(f"interop: {len(OUTCOMES)} scenarios, {agree} agree  ({secs:.1f}s in scenarios)")
