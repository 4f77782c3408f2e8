"""RabbitMQ 3.10's management HTTP API, served with Starlette: paths, status codes, JSON field names and error
bodies as rabbitmqadmin and other tools expect them.

This module is the application: routing, authentication and the answer to each error. The endpoints live in
one module per resource (node, exchange, queue, binding, connection, definition, access and parameter
endpoints), each with its routes, on the helpers of endpoints.py.

Routing is done here on the raw path, segment by segment: RabbitMQ puts the vhost in the path URL-encoded
(`/api/queues/%2F/q`), and a router that matched the decoded path would see `/api/queues///q`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from amqpd import errors
from amqpd.broker.access.control import AccessError, User
from amqpd.broker.routing.policy import PolicyError
from amqpd.mgmt import authz, listing
from amqpd.mgmt.access_endpoints import ACCESS_ROUTES, AccessEndpoints, NotFound
from amqpd.mgmt.binding_endpoints import BINDING_ROUTES, BindingEndpoints
from amqpd.mgmt.connection_endpoints import CONNECTION_ROUTES, ConnectionEndpoints
from amqpd.mgmt.definition_endpoints import DEFINITION_ROUTES, DefinitionEndpoints
from amqpd.mgmt.exchange_endpoints import EXCHANGE_ROUTES, ExchangeEndpoints
from amqpd.mgmt.http_errors import HTTPError, LoginFailed, bad_request, error_response, from_amqp, not_found
from amqpd.mgmt.node_endpoints import NODE_ROUTES, NodeEndpoints
from amqpd.mgmt.parameter_endpoints import PARAMETER_ROUTES, ParameterEndpoints
from amqpd.mgmt.queue_endpoints import QUEUE_ROUTES, QueueEndpoints
from amqpd.mgmt.stats import Rates

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker

Handler = Callable[..., Awaitable[Any]]
log = logging.getLogger("amqpd.mgmt")

ROUTES = (
    NODE_ROUTES
    + EXCHANGE_ROUTES
    + QUEUE_ROUTES
    + BINDING_ROUTES
    + CONNECTION_ROUTES
    + DEFINITION_ROUTES
    + ACCESS_ROUTES
    + PARAMETER_ROUTES
)


class ManagementAPI(
    NodeEndpoints,
    ExchangeEndpoints,
    QueueEndpoints,
    BindingEndpoints,
    ConnectionEndpoints,
    DefinitionEndpoints,
    AccessEndpoints,
    ParameterEndpoints,
):
    """The ASGI application. `listeners` describes the broker's listeners for /api/overview and health checks."""

    def __init__(self, broker: Broker, rates: Rates, listeners: list[dict[str, Any]]) -> None:
        super().__init__(broker, rates, listeners)
        # Refused logins from one address wait their turn (address -> its lock, and how many hold or wait)
        self._refusals: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self.routes: list[tuple[str, tuple[str, ...], Handler, str]] = []
        for method, path, handler, *level in ROUTES:
            pattern = tuple(path.strip("/").split("/"))
            self.routes.append((method, pattern, getattr(self, handler), level[0] if level else "management"))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response = await self.respond(request)
        await response(scope, receive, send)

    async def respond(self, request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()
        segments = [urllib.parse.unquote(s.decode("latin-1")) for s in raw.split(b"?")[0].strip(b"/").split(b"/")]
        from_script = "x-requested-with" in request.headers
        try:
            handler, params, level, allowed = self._match(request.method, segments)
            if handler is None:
                if allowed:
                    return Response(status_code=405, headers={"Allow": ", ".join(sorted(allowed))})
                raise not_found()
            self._authorise(request, level, params.get("vhost"))
            result = await handler(request, **params)
        except LoginFailed as exc:
            await self._login_failed(request, exc.user)
            return error_response(exc, from_script)
        except authz.NotAuthorised as exc:
            return error_response(HTTPError(401, "not_authorised", str(exc)), from_script)
        except NotFound:
            return error_response(not_found())
        except (AccessError, PolicyError, ValueError) as exc:
            return error_response(bad_request(str(exc)))
        except HTTPError as exc:
            return error_response(exc, from_script)
        except errors.AMQPError as exc:
            return error_response(from_amqp(exc))
        except listing.BadQuery as exc:
            return error_response(HTTPError(400, exc.error, exc.reason))
        except Exception:  # a bug of ours costs this request a 500, never the broker
            log.exception("management API: %s %s failed", request.method, request.url.path)
            return error_response(HTTPError(500, "internal_error", "internal error, see the broker's log"))
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    def _match(self, method: str, segments: list[str]) -> tuple[Handler | None, dict[str, str], str, set[str]]:
        allowed: set[str] = set()
        for route_method, pattern, handler, level in self.routes:
            if len(pattern) != len(segments):
                continue
            params: dict[str, str] = {}
            for want, got in zip(pattern, segments, strict=True):
                if want.startswith("{"):
                    params[want[1:-1]] = got
                elif want != got:
                    break
            else:
                if route_method == method or (method == "HEAD" and route_method == "GET"):
                    return handler, params, level, allowed
                allowed.add(route_method)
        return None, {}, "", allowed

    def _authenticate(self, request: Request) -> User:
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() == "basic":
            try:
                name, _, password = base64.b64decode(encoded).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                name = password = ""
            user = self.broker.login(name, password) if name else None
            if user is not None:
                return user
            raise LoginFailed(name)
        raise HTTPError(401, "not_authorized", "Login failed")

    async def _login_failed(self, request: Request, user: str) -> None:
        """As a refused AMQP login: counted and logged with where it came from (never the password), then
        answered only after a pause. Refusals from one address are answered one after another, so sending
        guesses in parallel gains nothing; requests that log in, and other addresses, never wait."""
        self.broker.access.failed_logins += 1
        host = request.client.host if request.client else "unknown"
        port = request.client.port if request.client else 0
        log.warning("HTTP login refused for user %r from %s:%s: invalid credentials", user, host, port)
        delay = self.broker.settings.mgmt_login_failure_delay
        if delay <= 0:
            return
        lock, users = self._refusals.setdefault(host, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                await asyncio.sleep(delay)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._refusals[host]

    def _authorise(self, request: Request, level: str, vhost: str | None) -> None:
        """The user's tags must reach the route's level, and its permissions cover the vhost in the path."""
        user = self._authenticate(request)
        authz.check_level(user, level)
        if vhost is not None and vhost in self.broker.vhosts and level != "administrator":
            authz.check_vhost(self.broker.access, user, vhost, write=request.method not in ("GET", "HEAD"))
        request.state.user = user
