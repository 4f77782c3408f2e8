"""The `shovel` component of runtime parameters: one `Shovel` per parameter, started, replaced and stopped
as the parameter is set and cleared, and their status as RabbitMQ's /api/shovels lists it."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from amqpd.broker.access.control import INTERNAL_USER
from amqpd.shovel.schema import ShovelSpec, parse

if TYPE_CHECKING:
    from amqpd.broker.access.control import AccessControl
    from amqpd.broker.parameters import Parameters
    from amqpd.shovel.worker import Shovel

COMPONENT = "shovel"


class Shovels:
    """Registered on `parameters` at once (so that recovery and imported definitions hand it their shovels);
    nothing runs before `start` tells it where this broker listens."""

    def __init__(self, parameters: Parameters) -> None:
        self.parameters = parameters
        self.specs: dict[tuple[str, str], ShovelSpec] = {}
        self.running: dict[tuple[str, str], Shovel] = {}
        self.local: str | None = None
        self.static: set[tuple[str, str]] = set()  # from the config file: no parameter behind them
        self._stopping: set[asyncio.Task[None]] = set()
        parameters.register(COMPONENT, self)

    def validate(self, vhost: str, name: str, value: Any) -> None:
        parse(name, value)

    def changed(self, vhost: str, name: str, value: Any | None) -> None:
        key = (vhost, name)
        self._stop(key)
        if value is None:
            self.specs.pop(key, None)
            return
        self.specs[key] = parse(name, value)
        if self.local is not None:
            self._start(key)

    def add_static(self, name: str, value: Any) -> None:
        """A shovel of the config file (RabbitMQ's static shovels): ParameterError if its value is wrong."""
        key = ("/", name)
        self.specs[key] = parse(name, value)
        self.static.add(key)

    def start(self, local: str, access: AccessControl) -> None:
        """`local`: this broker's AMQP URL, what `amqp://` without a host stands for; without a user it logs in
        as the broker's internal user, as RabbitMQ's direct connection does."""
        scheme, address = local.split("://", 1)
        self.local = f"{scheme}://{INTERNAL_USER}:{access.internal_password}@{address}"
        for key in sorted(self.specs):
            self._start(key)

    async def stop(self) -> None:
        for key in list(self.running):
            self._stop(key)
        await asyncio.gather(*self._stopping, return_exceptions=True)

    def restart(self, vhost: str, name: str) -> bool:
        key = (vhost, name)
        if key not in self.specs:
            return False
        self._stop(key)
        if self.local is not None:
            self._start(key)
        return True

    def _start(self, key: tuple[str, str]) -> None:
        assert self.local is not None
        vhost, name = key
        from amqpd.shovel.worker import Shovel  # here: its AMQP client is imported once a shovel runs, not at boot

        shovel = Shovel(vhost, name, self.specs[key], self.local, lambda: self._finished(key))
        self.running[key] = shovel
        shovel.start()

    def _stop(self, key: tuple[str, str]) -> None:
        shovel = self.running.pop(key, None)
        if shovel is not None:
            task = asyncio.get_running_loop().create_task(shovel.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def _finished(self, key: tuple[str, str]) -> None:
        """src-delete-after reached: RabbitMQ deletes the parameter (the shovel is gone from the status)."""
        self.running.pop(key, None)
        if key not in self.static:
            self.parameters.delete(COMPONENT, *key)

    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [
            _status(s, "static" if key in self.static else "dynamic")
            for key, s in sorted(self.running.items())
            if vhost in (None, key[0])
        ]


def _status(s: Shovel, kind: str) -> dict[str, Any]:
    spec = s.spec
    info: dict[str, Any] = {
        "node": f"amqpd@{socket.gethostname().split('.')[0]}",
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started_at)),
        "name": s.name,
        "vhost": s.vhost,
        "type": kind,
        "state": s.state,
        "src_uri": _without_credentials(s.src_uri),
        "src_protocol": "amqp091",
        "dest_protocol": "amqp091",
        "dest_uri": _without_credentials(s.dest_uri),
        "messages_moved": s.moved,
        "messages_redelivered": s.redelivered,
    }
    for key, value in (
        ("src_queue", spec.src_queue),
        ("src_exchange", spec.src_exchange),
        ("src_exchange_key", spec.src_exchange_key if spec.src_exchange is not None else None),
        ("dest_queue", spec.dest_queue),
        ("dest_exchange", spec.dest_exchange),
        ("dest_exchange_key", spec.dest_exchange_key),
    ):
        if value is not None:
            info[key] = value
    if s.last_error is not None and s.last_error_at is not None:
        info["reason"] = s.last_error
        info["last_error_at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.last_error_at))
    return info


def _without_credentials(uri: str) -> str:
    """As RabbitMQ lists a shovel's URIs: no user, no password."""
    parts = urllib.parse.urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
