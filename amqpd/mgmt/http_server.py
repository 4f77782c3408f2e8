"""The management and metrics listeners: uvicorn serving ASGI apps on the broker's own event loop.

The sockets are bound here (so port 0 can be resolved and printed before anything is served, like the AMQP
listener's), and uvicorn is kept away from process signals: the broker's serve() owns SIGTERM/SIGINT and
stops these servers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Generator
from typing import Any

import uvicorn

log = logging.getLogger("amqpd.mgmt")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the broker handles signals and sets should_exit


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket; OSError when the address is taken or not ours."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class HTTPListener:
    """One ASGI app on one socket, over TLS when given a context; start() returns once it accepts connections,
    stop() closes it."""

    def __init__(self, app: Any, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        self.sock = sock
        self.ssl_context = ssl_context
        # ws="none": the API and the UI use no WebSocket (and uvicorn then imports no WebSocket library at start)
        config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="off", ws="none", timeout_graceful_shutdown=2
        )
        if ssl_context is not None:
            # HTTPS with the broker's own context (amqpd.tls), so that SIGHUP's in-place reload reaches
            # this listener too: uvicorn hands config.ssl to create_server once load() has run.
            config.load()
            config.ssl = ssl_context
        self.server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return host, port

    async def start(self) -> None:
        self._task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started and not self._task.done():
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        self.sock.close()
