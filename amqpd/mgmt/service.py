"""Starts what management needs next to the AMQP listener: the HTTP API, the Prometheus listener and the
timer that samples message counters into rates."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from amqpd.logs import announce
from amqpd.mgmt.objects import NODE, channels
from amqpd.mgmt.stats import Rates
from amqpd.tls import TLSConfigError, reload_context, server_context, tls_enabled

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.config import Settings
    from amqpd.mgmt.http_server import HTTPListener
    from amqpd.mgmt.metrics import MetricsApp
    from amqpd.mgmt.webui import WebUI

# The HTTP server (uvicorn), the API and the Prometheus exporter are imported when their listener is started, not
# with this module: a broker with management off never loads them, and one with it on starts no slower.

log = logging.getLogger("amqpd.mgmt")


class Management:
    def __init__(self, broker: Broker, settings: Settings, amqp: list[tuple[str, str, int]]) -> None:
        self.broker = broker
        self.settings = settings
        self.rates = Rates()
        self.listeners: list[tuple[str, HTTPListener]] = []
        self.described: list[dict[str, Any]] = [_describe(*listener) for listener in amqp]

    async def start(self, quiet: bool = False) -> None:
        """Bind and serve each configured listener; a port that cannot be bound, or TLS settings that cannot
        be used, are logged and that listener left out (the broker's job is AMQP; its port is the one whose
        failure stops it)."""
        s = self.settings
        for protocol, port, make_app, tls in (
            ("http", s.mgmt_port, self._api, None),
            ("https", s.mgmt_tls_port if tls_enabled(s, "mgmt_tls") else None, self._api, "mgmt_tls"),
            ("http/prometheus", s.prometheus_port, self._metrics, None),
            (
                "https/prometheus",
                s.prometheus_tls_port if tls_enabled(s, "prometheus_tls") else None,
                self._metrics,
                "prometheus_tls",
            ),
        ):
            if port is None:
                continue
            from amqpd.mgmt.http_server import HTTPListener, bind

            try:
                ctx = server_context(s, tls) if tls is not None else None
                sock = bind(s.mgmt_host, port)
            except TLSConfigError as exc:
                log.error("%s listener not started: %s", protocol, exc)
                continue
            except OSError as exc:
                log.error(
                    "%s listener not started: cannot listen on %s:%s: %s",
                    protocol,
                    s.mgmt_host,
                    port,
                    exc.strerror or exc,
                )
                continue
            listener = HTTPListener(make_app(), sock, ctx)
            self.listeners.append((protocol, listener))
            self.described.append(_describe(protocol, *listener.address))
        for protocol, listener in self.listeners:
            await listener.start()
            host, port = listener.address
            kind = "prometheus" if protocol.endswith("prometheus") else "management"
            over = " TLS" if listener.ssl_context is not None else ""
            if not quiet:  # an embedded broker (amqpd.testing.EmbeddedBroker) hands its addresses over instead
                announce(f"amqpd {kind}{over} listening on {host}:{port}")

    def reload_tls(self) -> None:
        """SIGHUP: the HTTPS listeners re-read their certificate, key and CA files (open connections carry on)."""
        for protocol, listener in self.listeners:
            if listener.ssl_context is not None:
                prefix = "prometheus_tls" if protocol.endswith("prometheus") else "mgmt_tls"
                reload_context(listener.ssl_context, self.settings, prefix)

    def _api(self) -> WebUI:
        from amqpd.mgmt.api import ManagementAPI
        from amqpd.mgmt.webui import WebUI

        return WebUI(ManagementAPI(self.broker, self.rates, self.described))

    def _metrics(self) -> MetricsApp:
        from amqpd.mgmt.metrics import MetricsApp

        return MetricsApp(self.broker)

    async def sample_rates(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.settings.stats_interval)

    def sample(self) -> None:
        from amqpd.mgmt.objects import totals

        vhosts = self.broker.vhosts.values()
        queues = [q for v in vhosts for q in v.queues.values()]
        exchanges = [x for v in vhosts for x in v.exchanges.values()]
        ready = sum(len(q.ready) for q in queues)
        unacked = sum(q.unacked for q in queues)
        levels = {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked}
        self.rates.sample(
            queues, channels(self.broker), totals(self.broker), levels, exchanges, self.broker.connections
        )

    async def stop(self) -> None:
        for _protocol, listener in self.listeners:
            await listener.stop()


def load_definitions(broker: Broker, path: str) -> bool:
    """--definitions FILE at start (amqpd/mgmt/definitions.py, imported only by a broker given one)."""
    from amqpd.mgmt.definitions import load_definitions_file

    return load_definitions_file(broker, path)


def _describe(protocol: str, host: str, port: int) -> dict[str, Any]:
    return {"node": NODE, "protocol": protocol, "ip_address": host, "port": port, "socket_opts": {}}


class Announces(Protocol):
    """A broker embedded in another program (server/listener.py's Embedding): told each listener's address."""

    def announce(self, kind: str, sockname: tuple[Any, ...]) -> None: ...


async def start_management(
    broker: Broker, settings: Settings, amqp: list[tuple[str, str, int]], embedding: Announces | None = None
) -> Management | None:
    """The management API, Prometheus listener and rate sampler (amqpd/mgmt), unless every HTTP and HTTPS
    listener is off. `amqp`: the AMQP and AMQPS listeners, as (protocol, host, port)."""
    https = tls_enabled(settings, "mgmt_tls") or tls_enabled(settings, "prometheus_tls")
    if settings.mgmt_port is None and settings.prometheus_port is None and not https:
        return None
    management = Management(broker, settings, amqp)
    await management.start(quiet=embedding is not None)
    if embedding is not None:
        for protocol, listener in management.listeners:
            kind = "prometheus" if protocol.endswith("prometheus") else "management"
            embedding.announce(kind + ("-tls" if protocol.startswith("https") else ""), listener.address)
    return management
