"""amqpd in a background thread of the test process: in memory (no data dir, nothing written to disk), on free
ports, started and stopped from the calling thread."""

from __future__ import annotations

import logging
import threading
from typing import Any


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
    metrics. A second event loop in another thread is independent of the test's own (pytest-asyncio, anyio)."""

    def __init__(self, host: str = "127.0.0.1", settings: dict[str, Any] | None = None) -> None:
        self.host = host
        self.settings = settings or {}
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
        return f"http://{self.host}:{self.addresses['management'][1]}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.addresses['prometheus'][1]}"

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
        self._embedding = Embedding()
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
        import anyio

        from amqpd.mgmt.service import load_definitions, start_management
        from amqpd.server.listener import Services, serve

        services = Services(start_management, load_definitions)  # server and mgmt meet here, as in cli.py

        options = {}
        try:
            import uvloop  # noqa: F401

            options["use_uvloop"] = True
        except ImportError:
            pass
        try:
            anyio.run(serve, settings, services, self._embedding, backend="asyncio", backend_options=options)
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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
