"""What every group of management API endpoints (the *_endpoints modules) works with: the broker, its rates and
listeners, the user the request authenticated as, and the request's body and query."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from amqpd.broker.access.control import User
from amqpd.mgmt import authz, listing
from amqpd.mgmt.http_errors import HTTPError, NoContent, bad_request, not_found
from amqpd.mgmt.stats import Rates

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.routing.vhost import VirtualHost


class Endpoints:
    """The base of ManagementAPI and of each group of endpoints mixed into it."""

    def __init__(self, broker: Broker, rates: Rates, listeners: list[dict[str, Any]]) -> None:
        self.broker = broker
        self.rates = rates
        self.listeners = listeners  # the broker's listeners, for /api/overview and health checks

    @staticmethod
    def _user(request: Request) -> User:
        user: User = request.state.user
        return user

    def _check(self, request: Request, vhost: str, kind: str, name: str, perm: str) -> None:
        """configure/write/read permission on a resource, as a client's channel would be checked."""
        self.broker.access.check_resource(self._user(request).name, vhost, kind, name, perm)

    def _vhost(self, name: str) -> VirtualHost:
        v = self.broker.vhosts.get(name)
        if v is None:
            raise not_found()
        return v

    def _vhosts(self, request: Request, name: str | None) -> list[VirtualHost]:
        """The named vhost, or every vhost the user may see."""
        if name is not None:
            return [self._vhost(name)]
        user = self._user(request)
        return [v for v in self.broker.vhosts.values() if authz.may_read_vhost(self.broker.access, user, v.name)]

    def _own(self, request: Request, sessions: list[Any]) -> list[Any]:
        """Connections a user may see: all for monitoring users, else its own."""
        user = self._user(request)
        return sessions if authz.sees_everything(user) else [s for s in sessions if s.user == user.name]

    async def _json(self, request: Request) -> dict[str, Any]:
        raw = await self._body(request)
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise bad_request("not_json") from None
        if not isinstance(body, dict):
            raise bad_request("not_json")
        return body

    async def _body(self, request: Request) -> bytes:
        """The request body, refused with 413 past the configured size (before reading all of it)."""
        limit = self.broker.settings.mgmt_max_body
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise HTTPError(413, "payload_too_large", f"request body over {limit} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, "payload_too_large", f"request body over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _listing(self, request: Request, items: list[dict[str, Any]]) -> Any:
        return listing.apply(items, request.query_params)

    def _check_name(self, name: str) -> None:
        """The AMQP limit on queue and exchange names (a client's declare would be refused the same way)."""
        limit = self.broker.settings.max_queue_name_length
        if len(name.encode()) > limit:
            raise bad_request(f"name is longer than {limit} bytes")

    def _created(self, existed: bool) -> Response:
        return NoContent(204 if existed else 201)

    @staticmethod
    def _flag(request: Request, name: str) -> bool:
        return request.query_params.get(name, "false").lower() == "true"
