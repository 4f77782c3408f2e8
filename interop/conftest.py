"""Interop suite plumbing: xfail marks for features amqpd lacks, and the end-of-session summary."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from amqpd.testing import BrokerProcess
from interop import access_users, scope
from interop.runner import Outcome

OUTCOMES: list[Outcome] = []
_definitions = ""  # the access scenarios' users and vhosts, as a definitions file


def pytest_configure(config: pytest.Config) -> None:
    """The access scenarios' users and vhosts, on both brokers: the interop amqpd imports them at boot,
    RabbitMQ now."""
    global _definitions
    _definitions = access_users.write_definitions()
    access_users.install_on_reference(_definitions)


def pytest_unconfigure(config: pytest.Config) -> None:
    access_users.remove_from_reference()
    if _definitions and os.path.exists(_definitions):
        os.unlink(_definitions)


@pytest.fixture(scope="session")
def project_broker() -> Iterator[BrokerProcess]:
    """The interop suite's own amqpd (default addresses, as a user's would be), with the access scenarios'
    users imported at boot. Its own: the brokers of tests/ must not see those users and vhosts (a test
    listing vhosts would find them)."""
    with BrokerProcess(hosts=(), env={"AMQPD_LOAD_DEFINITIONS": _definitions}) as broker:
        yield broker


@pytest.fixture(scope="session")
def amqpd_url(request: pytest.FixtureRequest) -> str:
    """As the root conftest's, but for this suite's own broker: the root's session fixture may already hold
    the URL of the broker tests/ used (pytest caches it once per session)."""
    override = os.environ.get("AMQPD_TEST_TARGET_URL")
    if override:
        return override
    broker: BrokerProcess = request.getfixturevalue("project_broker")
    return broker.url


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
    for what in ("list_queues", "list_exchanges", "list_users", "list_vhosts"):
        columns = [] if what == "list_users" else ["name"]
        try:
            out = subprocess.run([ctl, "-q", what, *columns], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found += [
            f"{what[5:-1]} {line.split()[0]}"
            for line in out.stdout.splitlines()
            if scope.TOKEN_RE.search(line) and access_users.TOKEN not in line  # this session's go at unconfigure
        ]
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
