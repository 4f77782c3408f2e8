"""amqpd in a background thread of the test process: in memory (no data dir, nothing written to disk), on free
ports, started and stopped from the calling thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker


class BrokerStartError(RuntimeError):
    """The broker could not start; the message is the reason in one line."""


class _FirstError(logging.Handler):
    """Keeps the first error the broker logs while it starts: the reason it gives up (a port in use...)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.message: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.message is None:
            self.message = record.getMessage().splitlines()[0]


class EmbeddedBroker:
    """One broker on its own event loop in a daemon thread. `settings`: amqpd settings (amqpd.config.Settings
    field names) over the defaults, which are: in memory, 127.0.0.1, free ports for AMQP, management and
    metrics. A second event loop in another thread is independent of the test's own (pytest-asyncio, anyio).

    The management and metrics listeners start when `management_url` or `metrics_url` is first read (or
    `start_management()` is called), not with the broker: importing the HTTP server is most of their cost and
    many sessions never use them (lazy_management=False starts them with the broker). `add_isolated_vhost` and
    `remove_isolated_vhost` make and remove a test's vhost and user by calling the broker, without HTTP."""

    def __init__(
        self, host: str = "127.0.0.1", settings: dict[str, Any] | None = None, lazy_management: bool = True
    ) -> None:
        self.host = host
        self.settings = settings or {}
        self.lazy_management = lazy_management
        self.port = 0
        self.addresses: dict[str, tuple[str, int]] = {}
        self.admin_user = "guest"
        self.admin_password = "guest"
        self._thread: threading.Thread | None = None
        self._embedding: Any = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def management_url(self) -> str:
        return f"http://{self.host}:{self._http_port('management')}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self._http_port('prometheus')}"

    def _http_port(self, kind: str) -> int:
        if kind not in self.addresses:
            self.start_management()
        if kind not in self.addresses:
            raise RuntimeError(f"this embedded broker has no {kind} listener (turned off, or its port was taken)")
        return self.addresses[kind][1]

    def start_management(self) -> None:
        """Start the management and metrics listeners now, if they are not listening yet."""
        if self._embedding is None:
            raise RuntimeError("the embedded broker is not started")
        self._embedding.start_management()
        self.addresses = dict(self._embedding.addresses)

    def listening_ports(self) -> list[int]:
        """The ports this broker listens on: AMQP, and management and metrics if they were started."""
        return [port for _host, port in self.addresses.values()]

    def add_isolated_vhost(self, vhost: str, user: str, password: str) -> None:
        """A vhost and a user with every permission on it and none elsewhere, made on the broker's loop."""

        def add(broker: Broker) -> None:
            broker.access.add_vhost(vhost)
            broker.access.add_user(user, password)
            broker.access.set_permissions(user, vhost)

        self._call(add)

    def remove_isolated_vhost(self, vhost: str, user: str) -> None:
        """The vhost first (its connections are closed, 320, its queues and messages deleted), then the user;
        either may already be gone."""

        def remove(broker: Broker) -> None:
            if vhost in broker.access.vhosts:
                broker.access.delete_vhost(vhost)
            if broker.access.get_user(user) is not None:
                broker.access.delete_user(user)

        self._call(remove)

    def _call(self, fn: Callable[[Broker], None]) -> None:
        if self._embedding is None:
            raise RuntimeError("the embedded broker is not started")
        self._embedding.call(fn)

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        """Returns once the broker accepts connections; BrokerStartError (the reason in one line) otherwise."""
        from amqpd import config
        from amqpd.server.listener import Embedding

        options: dict[str, Any] = dict(host=[self.host], port=0, data_dir="", mgmt_port=0, prometheus_port=0)
        options["mgmt_host"] = self.host
        try:
            settings = config.load(None, **{**options, **self.settings})
        except (TypeError, ValueError) as exc:
            raise BrokerStartError(f"amqpd did not start: bad settings: {exc}") from None
        self._embedding = Embedding(defer_management=self.lazy_management)
        errors = _FirstError()
        logger = logging.getLogger("amqpd")
        logger.addHandler(errors)
        try:
            self._thread = threading.Thread(target=self._run, args=(settings,), name="amqpd-broker", daemon=True)
            self._thread.start()
            self._embedding.started.wait(timeout)
        finally:
            logger.removeHandler(errors)
        if self._error is not None or not self._thread.is_alive() or not self._embedding.started.is_set():
            reason = errors.message or (_one_line(self._error) if self._error else f"not ready after {timeout}s")
            self.stop()
            raise BrokerStartError(f"amqpd did not start: {reason}")
        self.addresses = dict(self._embedding.addresses)
        self.port = self.addresses["amqp"][1]
        return self

    def _run(self, settings: Any) -> None:
        from amqpd.server.listener import Services, run_loop, serve

        services = Services(_start_management, _load_definitions)  # server and mgmt meet here, as in cli.py
        try:
            run_loop(serve(settings, services, self._embedding))
        except BaseException as exc:  # SystemExit included: serve() exits 1 on a port in use
            self._error = exc
        finally:
            self._embedding.started.set()  # wakes start() when serve() failed before listening

    def stop(self, timeout: float = 15.0) -> None:
        """Closes every connection (320 CONNECTION_FORCED, as a broker shutting down) and joins the thread."""
        if self._embedding is not None:
            self._embedding.stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"amqpd's thread did not stop within {timeout}s")
            self._thread = None

    close = stop

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# The management side is imported when it is started (lazily, by default), not with the broker.
async def _start_management(broker: Broker, settings: Any, amqp: list[tuple[str, str, int]], embedding: Any) -> Any:
    from amqpd.mgmt.service import start_management

    return await start_management(broker, settings, amqp, embedding)


def _load_definitions(broker: Broker, path: str) -> bool:
    from amqpd.mgmt.service import load_definitions

    return load_definitions(broker, path)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
