"""The `amqpd` pytest plugin (entry point `pytest11`; `-p no:amqpd` turns it off).

- `amqpd_broker` (session): one broker for the session (per pytest-xdist worker), in memory, on free ports; in a
  thread of the test process by default (bench/pytest_plugin.py: it starts with less than half the CPU time of a
  subprocess, which pays for a second Python, and each test's vhost is made by calling it, without HTTP, so a
  suite ran faster too); `--amqpd-mode=process` runs it in a subprocess, for tests that patch time or sockets.
- `amqp_url` (function): an AMQP URL for a vhost and a user made for this test alone and removed after it.
- `amqpd_factory` (function): more brokers with their own settings, stopped after the test.

`--amqpd-url URL` runs the same fixtures against another broker (a RabbitMQ with its management plugin);
`--amqpd-keep` leaves the broker and the tests' vhosts in place and says how to reach them.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from amqpd.testing.embedded import BrokerStartError, EmbeddedBroker
from amqpd.testing.factory import BrokerFactory
from amqpd.testing.process import BrokerProcess
from amqpd.testing.vhosts import DirectAdmin, IsolatedVhost, ManagementClient, ManagementError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("amqpd", "amqpd test broker")
    group.addoption(
        "--amqpd-url",
        metavar="URL",
        help="use this broker instead of starting amqpd (e.g. a RabbitMQ: amqp://guest:guest@localhost:5672/%%2F); "
        "each test gets a vhost made through its management API",
    )
    group.addoption(
        "--amqpd-management-url",
        metavar="URL",
        help="the management API of --amqpd-url (default: http://HOST:15672, with the same user)",
    )
    group.addoption(
        "--amqpd-keep",
        action="store_true",
        help="leave the session's broker running (as a process) and keep each test's vhost, for debugging",
    )
    group.addoption(
        "--amqpd-mode",
        choices=("thread", "process"),
        default="thread",
        help="run the session's broker in a thread of the test process (default: the fastest to start) or in a "
        "subprocess (for tests that patch time or sockets, or fork the test process)",
    )


@dataclass
class ExternalBroker:
    """A broker the session did not start (--amqpd-url): its addresses, as amqpd_broker gives them."""

    url: str
    management_url: str
    metrics_url: str
    host: str
    port: int
    admin_user: str
    admin_password: str


@dataclass
class _Session:
    broker: Any = None
    admin: ManagementClient | None = None
    kept_vhosts: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    launched: BrokerProcess | None = None  # started during collection, not yet handed to amqpd_broker
    workers_kept: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (xdist worker, its broker)


_SESSION_KEY = pytest.StashKey[_Session]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION_KEY] = _Session()


def pytest_itemcollected(item: pytest.Item) -> None:
    """The first collected test that needs the session broker launches its subprocess, so that the broker boots
    (mostly imports) while pytest collects the rest; a session with no such test starts no broker."""
    config = item.config
    state = config.stash[_SESSION_KEY]
    if state.launched is not None or state.broker is not None or not _early_launch(config):
        return
    if "amqpd_broker" in getattr(item, "fixturenames", ()):
        state.launched = _new_process_broker()
        state.launched.launch()


def _early_launch(config: pytest.Config) -> bool:
    if config.getoption("amqpd_url") or config.option.collectonly:
        return False
    return config.getoption("amqpd_mode") == "process" or bool(config.getoption("amqpd_keep"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(_SESSION_KEY, None)
    if state is None:
        return
    if state.launched is not None:  # launched, but no test asked for it (deselected, failed)
        state.launched.close()
        state.launched = None
    kept = _kept(config, state)
    if kept is not None and hasattr(config, "workeroutput"):  # a pytest-xdist worker: its controller prints it
        config.workeroutput["amqpd_kept"] = kept


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller hears that a worker has finished
def pytest_testnodedown(node: Any, error: Any) -> None:
    kept = getattr(node, "workeroutput", {}).get("amqpd_kept")
    if kept is not None:
        node.config.stash[_SESSION_KEY].workers_kept.append((node.gateway.id, kept))


@pytest.fixture(scope="session")
def amqpd_broker(pytestconfig: pytest.Config) -> Iterator[Any]:
    """The session's broker: `.url` (guest, vhost "/"), `.management_url`, `.metrics_url`, `.host`, `.port`."""
    state = pytestconfig.stash[_SESSION_KEY]
    external = pytestconfig.getoption("amqpd_url")
    keep = pytestconfig.getoption("amqpd_keep")
    try:
        broker = _start(pytestconfig)
    except BrokerStartError as exc:
        reason = str(exc)
    else:
        reason = ""
    if reason:  # outside the except block: the one line alone, with no chained exception under it
        pytest.fail(reason, pytrace=False)
    state.broker = broker
    try:
        yield broker
    finally:
        if state.admin is not None:
            state.admin.close()
        if not external and not keep:
            state.ports = _listening_ports(broker)
            broker.close()
            _check_released(broker, state.ports)


def _start(config: pytest.Config) -> Any:
    external = config.getoption("amqpd_url")
    if external:
        return _external(external, config.getoption("amqpd_management_url"))
    if config.getoption("amqpd_mode") == "thread" and not config.getoption("amqpd_keep"):
        return EmbeddedBroker().start()
    state = config.stash[_SESSION_KEY]
    launched, state.launched = state.launched, None
    return _process_broker(launched)  # --amqpd-keep too: a thread would end with the test process


def _external(url: str, management_url: str | None) -> ExternalBroker:
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise BrokerStartError(f"--amqpd-url {url!r} is not an AMQP URL (amqp://user:password@host:port/vhost)")
    host, port = parts.hostname, parts.port or (5671 if parts.scheme == "amqps" else 5672)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise BrokerStartError(f"no broker at --amqpd-url {host}:{port}: {exc.strerror or exc}") from None
    return ExternalBroker(
        url=url,
        management_url=(management_url or f"http://{host}:15672").rstrip("/"),
        metrics_url=f"http://{host}:15692",
        host=host,
        port=port,
        admin_user=unquote(parts.username or "guest"),
        admin_password=unquote(parts.password or "guest"),
    )


def _new_process_broker() -> BrokerProcess:
    broker = BrokerProcess(extra_args=["--in-memory"], management=True)
    broker.admin_user = broker.admin_password = "guest"  # type: ignore[attr-defined]
    return broker


def _process_broker(launched: BrokerProcess | None) -> BrokerProcess:
    broker = launched or _new_process_broker()
    try:
        if launched is None:
            broker.launch()
        return broker.wait_started()
    except RuntimeError as exc:  # the reason in one line, without the traceback under it
        raise BrokerStartError(str(exc)) from None


def _listening_ports(broker: Any) -> list[int]:
    """The ports the session's broker listens on (a thread's management and metrics only if they started)."""
    if isinstance(broker, EmbeddedBroker):
        return broker.listening_ports()
    return [broker.port, *(int(urlsplit(u).port or 0) for u in (broker.management_url, broker.metrics_url))]


def _check_released(broker: Any, ports: list[int]) -> None:
    """The broker's process or thread has ended and its ports are closed: nothing is left for the next session."""
    alive = [t.name for t in threading.enumerate() if t.name == "amqpd-broker"]
    if isinstance(broker, BrokerProcess) and broker.proc is not None and broker.proc.poll() is None:
        alive.append(f"process {broker.proc.pid}")
    listening = []
    for port in ports:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            listening.append(port)
        except OSError:
            pass
    if alive or listening:
        raise RuntimeError(f"amqpd left behind: {alive}, listening ports {listening}")


@pytest.fixture(scope="session")
def _amqpd_admin(amqpd_broker: Any, pytestconfig: pytest.Config) -> ManagementClient | DirectAdmin:
    """Who makes the tests' vhosts: a broker in this process makes them itself (no HTTP, and its management
    listener need not start); any other through its management API."""
    if isinstance(amqpd_broker, EmbeddedBroker):
        return amqpd_broker
    state = pytestconfig.stash[_SESSION_KEY]
    state.admin = ManagementClient(amqpd_broker.management_url, amqpd_broker.admin_user, amqpd_broker.admin_password)
    return state.admin


@pytest.fixture
def amqp_url(
    amqpd_broker: Any, _amqpd_admin: ManagementClient | DirectAdmin, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A vhost and a user for this test alone (every permission on that vhost, nothing else), removed after it
    with whatever the test left there: queues, messages, consumers, connections."""
    external = bool(request.config.getoption("amqpd_url"))  # amqpd takes the vhost in one request
    vhost = IsolatedVhost(_amqpd_admin, amqpd_broker.url, request.node.name, one_request=not external)
    try:
        vhost.create()
    except (ManagementError, OSError, RuntimeError, ValueError) as exc:
        pytest.fail(f"cannot make a vhost for this test: {exc}", pytrace=False)
    yield vhost.url
    if request.config.getoption("amqpd_keep"):
        request.config.stash[_SESSION_KEY].kept_vhosts.append(vhost.url)
    else:
        vhost.remove()


@pytest.fixture
def amqpd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    """amqpd_factory(tls=True, users={"alice": "secret"}, durable=True, settings={...}) -> a broker subprocess
    (`.url`, `.tls_url`, `.management_url`, `.restart(kill=True)`), stopped after the test."""
    factory = BrokerFactory(Path(tmp_path_factory.mktemp("amqpd-factory")))
    try:
        yield factory
    finally:
        factory.close()


def _kept(config: pytest.Config, state: _Session) -> dict[str, Any] | None:
    """How to reach the broker --amqpd-keep left running, as plain data (a worker sends it to its controller)."""
    broker = state.broker
    if broker is None or not config.getoption("amqpd_keep") or config.getoption("amqpd_url"):
        return None
    process = isinstance(broker, BrokerProcess) and broker.proc is not None
    return {
        "url": broker.url,
        "management_url": broker.management_url,
        "metrics_url": broker.metrics_url,
        "vhosts": list(state.kept_vhosts),
        "pid": broker.proc.pid if process else None,
    }


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION_KEY, None)
    if state is None:
        return
    own = _kept(config, state)
    kept = ([("", own)] if own is not None else []) + sorted(state.workers_kept, key=lambda kept: kept[0])
    if not kept:
        return
    terminalreporter.section("amqpd left running (--amqpd-keep)")
    for worker, broker in kept:
        if worker:
            terminalreporter.write_line(f"pytest-xdist worker {worker}:")
        terminalreporter.write_line(f"AMQP:       {broker['url']}")
        terminalreporter.write_line(f"management: {broker['management_url']} (guest/guest)")
        terminalreporter.write_line(f"metrics:    {broker['metrics_url']}/metrics")
        for url in broker["vhosts"]:
            terminalreporter.write_line(f"test vhost: {url}")
        if broker["pid"] is not None:
            terminalreporter.write_line(f"stop it with: kill {broker['pid']}")
