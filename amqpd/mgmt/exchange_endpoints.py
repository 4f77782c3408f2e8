"""/api/exchanges: listing, declaring and deleting exchanges, their bindings, and publishing through one."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from amqpd import errors
from amqpd.mgmt import objects, operations
from amqpd.mgmt.endpoints import Endpoints
from amqpd.mgmt.http_errors import NoContent, bad_request, not_found
from amqpd.mgmt.request_fields import arguments_field, bool_field, exchange_name


class ExchangeEndpoints(Endpoints):
    async def exchanges(self, request: Request, vhost: str | None = None) -> Any:
        vhosts = self._vhosts(request, vhost)
        items = [objects.exchange_info(v.name, ex, self.rates) for v in vhosts for ex in v.exchanges.values()]
        return self._listing(request, items)

    async def exchange(self, request: Request, vhost: str, exchange: str) -> Any:
        v = self._vhost(vhost)
        ex = v.exchanges.get(exchange_name(exchange))
        if ex is None:
            raise not_found()
        return objects.exchange_info(v.name, ex, self.rates)

    async def put_exchange(self, request: Request, vhost: str, exchange: str) -> Any:
        v = self._vhost(vhost)
        body = await self._json(request)
        existed = exchange in v.exchanges
        self._check_name(exchange)
        self._check(request, v.name, "exchange", exchange, "configure")
        v.declare_exchange(
            exchange,
            str(body.get("type", "")),
            passive=False,
            durable=bool_field(body, "durable", True),
            auto_delete=bool_field(body, "auto_delete", False),
            internal=bool_field(body, "internal", False),
            arguments=arguments_field(body),
        )
        return NoContent(204 if existed else 201)

    async def delete_exchange(self, request: Request, vhost: str, exchange: str) -> Any:
        v = self._vhost(vhost)
        if exchange not in v.exchanges:
            raise not_found()
        self._check(request, v.name, "exchange", exchange, "configure")
        v.delete_exchange(exchange, if_unused=self._flag(request, "if-unused"))
        return NoContent()

    async def publish(self, request: Request, vhost: str, exchange: str) -> Any:
        v = self._vhost(vhost)
        body = await self._json(request)
        for key in ("routing_key", "payload", "payload_encoding", "properties"):
            if key not in body:
                raise bad_request(f"{key} missing")
        self._check(request, v.name, "exchange", exchange_name(exchange), "write")
        try:
            payload = operations.payload_bytes(body["payload"], body["payload_encoding"])
            properties = body["properties"] if isinstance(body["properties"], dict) else {}
            routed = await operations.publish(
                self.broker, v, exchange_name(exchange), str(body["routing_key"]), properties, payload
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        except errors.AMQPError as exc:
            raise bad_request(f"{exc.code} {exc.reply_text}") from None
        return {"routed": routed}

    async def exchange_bindings(self, request: Request, vhost: str, exchange: str, direction: str) -> Any:
        v = self._vhost(vhost)
        name = exchange_name(exchange)
        ex = v.exchanges.get(name)
        if ex is None or direction not in ("source", "destination"):
            raise not_found()
        if direction == "source":
            items = [b for b in objects.bindings(v) if b["source"] == name]
        else:
            items = [b for b in objects.bindings(v) if b["destination"] == name and b["destination_type"] == "exchange"]
        return self._listing(request, items)


EXCHANGE_ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
    ("GET", "api/exchanges", "exchanges"),
    ("GET", "api/exchanges/{vhost}", "exchanges"),
    ("GET", "api/exchanges/{vhost}/{exchange}", "exchange"),
    ("PUT", "api/exchanges/{vhost}/{exchange}", "put_exchange"),
    ("DELETE", "api/exchanges/{vhost}/{exchange}", "delete_exchange"),
    ("POST", "api/exchanges/{vhost}/{exchange}/publish", "publish"),
    ("GET", "api/exchanges/{vhost}/{exchange}/bindings/{direction}", "exchange_bindings"),
]
