"""/api/connections, /api/channels and /api/consumers: who is connected and what they consume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from amqpd.mgmt import objects
from amqpd.mgmt.endpoints import Endpoints
from amqpd.mgmt.http_errors import NoContent, not_found

if TYPE_CHECKING:
    from amqpd.session.channel import Channel


class ConnectionEndpoints(Endpoints):
    async def connections(self, request: Request) -> Any:
        sessions = self._own(request, objects.sessions(self.broker))
        return self._listing(request, [objects.connection_info(s, self.rates) for s in sessions])

    def _session(self, request: Request, name: str) -> Any:
        for s in self._own(request, list(self.broker.connections)):
            if objects.connection_name(s) == name:
                return s
        raise not_found()

    async def connection(self, request: Request, name: str) -> Any:
        return objects.connection_info(self._session(request, name), self.rates)

    async def close_connection(self, request: Request, name: str) -> Any:
        session = self._session(request, name)
        reason = request.headers.get("x-reason", "Closed via management plugin")
        session.close_forced(reason)
        return NoContent()

    async def connection_channels(self, request: Request, name: str) -> Any:
        session = self._session(request, name)
        return self._listing(request, [objects.channel_info(ch, self.rates) for ch in session.channels.values()])

    async def channels(self, request: Request) -> Any:
        return self._listing(request, [objects.channel_info(ch, self.rates) for ch in self._channels_of(request)])

    def _channels_of(self, request: Request) -> list[Channel]:
        return [ch for s in self._own(request, objects.sessions(self.broker)) for ch in s.channels.values()]

    async def channel(self, request: Request, name: str) -> Any:
        for ch in self._channels_of(request):
            if objects.channel_name(ch) == name:
                return objects.channel_info(ch, self.rates)
        raise not_found()

    async def consumers(self, request: Request, vhost: str | None = None) -> Any:
        queues = [q for v in self._vhosts(request, vhost) for q in v.queues.values()]
        items = [objects.consumer_info(c) for q in queues for c in q.consumers]
        return self._listing(request, items)


CONNECTION_ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
    ("GET", "api/connections", "connections"),
    ("GET", "api/connections/{name}", "connection"),
    ("DELETE", "api/connections/{name}", "close_connection"),
    ("GET", "api/connections/{name}/channels", "connection_channels"),
    ("GET", "api/channels", "channels"),
    ("GET", "api/channels/{name}", "channel"),
    ("GET", "api/consumers", "consumers"),
    ("GET", "api/consumers/{vhost}", "consumers"),
]
