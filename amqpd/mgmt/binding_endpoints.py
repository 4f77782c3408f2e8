"""/api/bindings: listing, creating and deleting bindings between an exchange and a queue or exchange."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from amqpd.mgmt import objects, operations
from amqpd.mgmt.endpoints import Endpoints
from amqpd.mgmt.http_errors import NoContent, not_found
from amqpd.mgmt.request_fields import arguments_field, exchange_name

if TYPE_CHECKING:
    from amqpd.broker.routing.vhost import VirtualHost


class BindingEndpoints(Endpoints):
    async def all_bindings(self, request: Request, vhost: str | None = None) -> Any:
        return self._listing(request, [b for v in self._vhosts(request, vhost) for b in objects.bindings(v)])

    def _pair(self, vhost: str, source: str, kind: str, dest: str) -> tuple[VirtualHost, list[dict[str, Any]]]:
        v = self._vhost(vhost)
        if kind not in ("q", "e"):
            raise not_found()
        v.exchange(exchange_name(source))
        operations.destination(v, kind, dest)
        dtype = "queue" if kind == "q" else "exchange"
        found = [
            b
            for b in objects.bindings(v)
            if b["source"] == exchange_name(source) and b["destination"] == dest and b["destination_type"] == dtype
        ]
        return v, found

    async def pair_bindings(self, request: Request, vhost: str, source: str, kind: str, dest: str) -> Any:
        return self._listing(request, self._pair(vhost, source, kind, dest)[1])

    def _check_binding(self, request: Request, v: VirtualHost, source: str, kind: str, dest: str) -> None:
        """rabbit_channel's binding checks: write on the destination, read on the source."""
        self._check(request, v.name, "queue" if kind == "q" else "exchange", dest, "write")
        self._check(request, v.name, "exchange", exchange_name(source), "read")

    async def bind(self, request: Request, vhost: str, source: str, kind: str, dest: str) -> Any:
        v, _ = self._pair(vhost, source, kind, dest)
        self._check_binding(request, v, source, kind, dest)
        body = await self._json(request)
        key, args = str(body.get("routing_key", "")), arguments_field(body)
        v.bind(exchange_name(source), operations.destination(v, kind, dest), key, args)
        props = objects.properties_key(key, args)
        return NoContent(201, {"Location": f"{urllib.parse.quote(dest, safe='')}/{urllib.parse.quote(props, safe='')}"})

    def _one_binding(self, vhost: str, source: str, kind: str, dest: str, props: str) -> tuple[Any, dict[str, Any]]:
        v, found = self._pair(vhost, source, kind, dest)
        for b in found:
            if b["properties_key"] == props:
                return v, b
        raise not_found()

    async def binding(self, request: Request, vhost: str, source: str, kind: str, dest: str, props: str) -> Any:
        return self._one_binding(vhost, source, kind, dest, props)[1]

    async def unbind(self, request: Request, vhost: str, source: str, kind: str, dest: str, props: str) -> Any:
        v, b = self._one_binding(vhost, source, kind, dest, props)
        self._check_binding(request, v, source, kind, dest)
        ex = v.exchange(exchange_name(source))
        target = operations.destination(v, kind, dest)
        for bound, key, args in ex.bindings():
            if bound is target and objects.properties_key(key, args) == b["properties_key"]:
                v.unbind(ex.name, target, key, args)
        return NoContent()


BINDING_ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
    ("GET", "api/bindings", "all_bindings"),
    ("GET", "api/bindings/{vhost}", "all_bindings"),
    ("GET", "api/bindings/{vhost}/e/{source}/{kind}/{dest}", "pair_bindings"),
    ("POST", "api/bindings/{vhost}/e/{source}/{kind}/{dest}", "bind"),
    ("GET", "api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}", "binding"),
    ("DELETE", "api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}", "unbind"),
]
