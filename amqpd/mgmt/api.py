"""RabbitMQ 3.10's management HTTP API, served with Starlette: paths, status codes, JSON field names and error
bodies as rabbitmqadmin and other tools expect them.

Routing is done here on the raw path, segment by segment: RabbitMQ puts the vhost in the path URL-encoded
(`/api/queues/%2F/q`), and a router that matched the decoded path would see `/api/queues///q`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from amqpd import errors
from amqpd.broker.access.control import AccessError, User
from amqpd.broker.routing.policy import PolicyError
from amqpd.broker.streams.stream import StreamQueue
from amqpd.mgmt import authz, definitions, listing, objects, operations
from amqpd.mgmt.access_endpoints import ACCESS_ROUTES, AccessEndpoints, NotFound
from amqpd.mgmt.parameter_endpoints import PARAMETER_ROUTES, ParameterEndpoints
from amqpd.mgmt.stats import Rates
from amqpd.session.channel import Channel

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.queues.queue import Queue
    from amqpd.broker.routing.vhost import VirtualHost

Handler = Callable[..., Awaitable[Any]]
log = logging.getLogger("amqpd.mgmt")


class HTTPError(Exception):
    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.error, self.reason = status, error, reason


class LoginFailed(HTTPError):
    """Wrong credentials (not missing ones): answered after the configured delay, logged and counted."""

    def __init__(self, user: str) -> None:
        super().__init__(401, "not_authorized", "Login failed")
        self.user = user


def not_found() -> HTTPError:
    return HTTPError(404, "Object Not Found", "Not Found")


def bad_request(reason: str) -> HTTPError:
    return HTTPError(400, "bad_request", reason)


def from_amqp(exc: errors.AMQPError) -> HTTPError:
    """A broker refusal as RabbitMQ's API reports it."""
    if exc.code == errors.NOT_FOUND:
        return HTTPError(404, "not_found", exc.text)
    if exc.code == errors.ACCESS_REFUSED:
        return HTTPError(401, "not_authorised", "Access refused.")
    return bad_request(exc.text)


def error_response(exc: HTTPError, from_script: bool = False) -> JSONResponse:
    """from_script: the web UI asked (X-Requested-With), which handles 401 itself; without the challenge
    header the browser does not open its own login dialog over the page."""
    challenge = exc.status == 401 and not from_script
    headers = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'} if challenge else None
    return JSONResponse({"error": exc.error, "reason": exc.reason}, status_code=exc.status, headers=headers)


class NoContent(Response):
    def __init__(self, status: int = 204, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, headers=headers)


class ManagementAPI(AccessEndpoints, ParameterEndpoints):
    """The ASGI application. `listeners` describes the broker's listeners for /api/overview and health checks."""

    def __init__(self, broker: Broker, rates: Rates, listeners: list[dict[str, Any]]) -> None:
        self.broker = broker
        self.rates = rates
        self.listeners = listeners
        # Refused logins from one address wait their turn (address -> its lock, and how many hold or wait)
        self._refusals: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self.routes: list[tuple[str, tuple[str, ...], Handler, str]] = []
        for method, path, handler, *level in ROUTES + ACCESS_ROUTES + PARAMETER_ROUTES:
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

    @staticmethod
    def _user(request: Request) -> User:
        user: User = request.state.user
        return user

    def _check(self, request: Request, vhost: str, kind: str, name: str, perm: str) -> None:
        """configure/write/read permission on a resource, as a client's channel would be checked."""
        self.broker.access.check_resource(self._user(request).name, vhost, kind, name, perm)

    # -- helpers ------------------------------------------------------------------------------------------------

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

    # -- overview, nodes, whoami ----------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Any:
        info = objects.overview(self.broker, self.rates, self.listeners)
        for section, age_key, incr_key in (
            ("message_stats", "msg_rates_age", "msg_rates_incr"),
            ("queue_totals", "lengths_age", "lengths_incr"),
        ):
            if age_key in request.query_params:
                self._add_samples(info[section], request, age_key, incr_key)
        return info

    def _add_samples(self, section: dict[str, Any], request: Request, age_key: str, incr_key: str) -> None:
        """RabbitMQ's ?msg_rates_age=&msg_rates_incr= (and lengths_*): each counter's `samples` in its
        `_details`, from the history kept at every sampling."""
        try:
            age, incr = float(request.query_params[age_key]), float(request.query_params.get(incr_key, "5"))
        except ValueError:
            raise bad_request(f"{age_key} and {incr_key} must be numbers of seconds") from None
        if age <= 0 or incr <= 0:
            raise bad_request(f"{age_key} and {incr_key} must be positive")
        now = self.rates.clock()
        for key in [k for k in section if not k.endswith("_details")]:
            details = section.setdefault(f"{key}_details", {"rate": 0.0})
            details["samples"] = self.rates.history.samples(key, age, incr, now)

    async def whoami(self, request: Request) -> Any:
        user = self._user(request)
        return {"name": user.name, "tags": list(user.tags)}

    async def nodes(self, request: Request) -> Any:
        return self._listing(request, [objects.node_info(self.broker)])

    async def node(self, request: Request, node: str) -> Any:
        if node != objects.NODE:
            raise not_found()
        return objects.node_info(self.broker)

    async def vhosts(self, request: Request) -> Any:
        items = [objects.vhost_info(self.broker, v, self.rates) for v in self._vhosts(request, None)]
        return self._listing(request, items)

    async def vhost(self, request: Request, vhost: str) -> Any:
        return objects.vhost_info(self.broker, self._vhost(vhost), self.rates)

    # -- exchanges -------------------------------------------------------------------------------------------------

    async def exchanges(self, request: Request, vhost: str | None = None) -> Any:
        vhosts = self._vhosts(request, vhost)
        items = [objects.exchange_info(v.name, ex, self.rates) for v in vhosts for ex in v.exchanges.values()]
        return self._listing(request, items)

    async def exchange(self, request: Request, vhost: str, exchange: str) -> Any:
        v = self._vhost(vhost)
        ex = v.exchanges.get(_exchange_name(exchange))
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
            durable=_bool(body, "durable", True),
            auto_delete=_bool(body, "auto_delete", False),
            internal=_bool(body, "internal", False),
            arguments=_arguments(body),
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
        self._check(request, v.name, "exchange", _exchange_name(exchange), "write")
        try:
            payload = operations.payload_bytes(body["payload"], body["payload_encoding"])
            properties = body["properties"] if isinstance(body["properties"], dict) else {}
            routed = await operations.publish(
                self.broker, v, _exchange_name(exchange), str(body["routing_key"]), properties, payload
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        except errors.AMQPError as exc:
            raise bad_request(f"{exc.code} {exc.reply_text}") from None
        return {"routed": routed}

    async def exchange_bindings(self, request: Request, vhost: str, exchange: str, direction: str) -> Any:
        v = self._vhost(vhost)
        name = _exchange_name(exchange)
        ex = v.exchanges.get(name)
        if ex is None or direction not in ("source", "destination"):
            raise not_found()
        if direction == "source":
            items = [b for b in objects.bindings(v) if b["source"] == name]
        else:
            items = [b for b in objects.bindings(v) if b["destination"] == name and b["destination_type"] == "exchange"]
        return self._listing(request, items)

    # -- queues ------------------------------------------------------------------------------------------------------

    async def queues(self, request: Request, vhost: str | None = None) -> Any:
        queues = [q for v in self._vhosts(request, vhost) for q in v.queues.values()]
        held = objects.unacked_bytes(self.broker)

        def build(q: Queue) -> dict[str, Any]:
            return objects.queue_info(q, self.rates, held_bytes=held.get(q, 0))

        return listing.apply_lazily(queues, request.query_params, build, objects.queue_fields(self.rates))

    async def queue(self, request: Request, vhost: str, queue: str) -> Any:
        q = self._vhost(vhost).queues.get(queue)
        if q is None:
            raise not_found()
        return objects.queue_info(q, self.rates, details=True, held_bytes=objects.unacked_bytes(self.broker).get(q, 0))

    async def stream_offset(self, request: Request, vhost: str, queue: str) -> Any:
        """Time -> offset for a stream: the first offset appended at or after ?timestamp= (ms since the epoch),
        through the stream's time index; the stream's end offset when nothing is that recent."""
        v = self._vhost(vhost)
        q = v.queues.get(queue)
        if q is None:
            raise not_found()
        self._check(request, v.name, "queue", queue, "read")
        if not isinstance(q, StreamQueue):
            raise bad_request(f"queue '{queue}' in vhost '{v.name}' is not a stream")
        raw = request.query_params.get("timestamp", "")
        if not raw.lstrip("-").isdigit():
            raise bad_request("timestamp: an integer number of milliseconds since the epoch is required")
        return {"timestamp": int(raw), "offset": q.log.offset_at_time(int(raw))}

    async def put_queue(self, request: Request, vhost: str, queue: str) -> Any:
        v = self._vhost(vhost)
        body = await self._json(request)
        existed = queue in v.queues
        self._check_name(queue)
        self._check(request, v.name, "queue", queue, "configure")
        if not existed:
            self.broker.check_queue_limit(v, queue)
        v.declare_queue(
            queue,
            passive=False,
            durable=_bool(body, "durable", True),
            exclusive=False,
            auto_delete=_bool(body, "auto_delete", False),
            arguments=_arguments(body),
            owner=None,
        )
        return NoContent(204 if existed else 201)

    async def delete_queue(self, request: Request, vhost: str, queue: str) -> Any:
        v = self._vhost(vhost)
        if queue not in v.queues:
            raise not_found()
        self._check(request, v.name, "queue", queue, "configure")
        operations.delete_queue(v, queue, self._flag(request, "if-empty"), self._flag(request, "if-unused"))
        return NoContent()

    async def purge(self, request: Request, vhost: str, queue: str) -> Any:
        v = self._vhost(vhost)
        if queue not in v.queues:
            raise not_found()
        self._check(request, v.name, "queue", queue, "read")
        operations.purge_queue(v, queue)
        return NoContent()

    async def get(self, request: Request, vhost: str, queue: str) -> Any:
        v = self._vhost(vhost)
        body = await self._json(request)
        if queue not in v.queues:
            raise not_found()
        self._check(request, v.name, "queue", queue, "read")
        count, truncate = _int(body, "count", 1), body.get("truncate")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("Unsupported encoding. Please use auto or base64.")
        try:
            fetched = operations.get(v, queue, count, str(body.get("ackmode", "")))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        limit = int(truncate) if isinstance(truncate, int) and not isinstance(truncate, bool) else None
        return [
            operations.message_json(self.broker, f.entry, f.message_count, encoding, limit, f.redelivered)
            for f in fetched
        ]

    async def peek(self, request: Request, vhost: str, queue: str) -> Any:
        """Beyond RabbitMQ: ready messages from position `from`, left untouched."""
        v = self._vhost(vhost)
        body = await self._json(request)
        if queue not in v.queues:
            raise not_found()
        self._check(request, v.name, "queue", queue, "read")
        count, start = _int(body, "count", 1), _int(body, "from", 0)
        encoding = body.get("encoding", "auto")
        q = v.queues[queue]
        if isinstance(q, StreamQueue):  # a stream keeps what it delivered: `from` is an offset in its log
            records = await q.log.read_async(start, min(count, listing.MAX_PAGE_SIZE))
            return [operations.record_json(offset, record, encoding) for offset, record in records]
        entries = operations.peek(v, queue, count, start)
        total = len(v.queues[queue].ready)
        return [operations.message_json(self.broker, e, total, encoding, None) for e in entries]

    async def move(self, request: Request, vhost: str, queue: str) -> Any:
        """Beyond RabbitMQ: {"destination": Q} or {"exchange": X, "routing_key": K}, or neither with
        {"dead_letters": true} (each message back to where its x-death says it came from); "count" limits."""
        v = self._vhost(vhost)
        body = await self._json(request)
        if queue not in v.queues:
            raise not_found()
        self._check(request, v.name, "queue", queue, "read")
        count = _int(body, "count", 0) or None
        target: tuple[str, str] | None
        if body.get("dead_letters") is True:
            target = None
        elif isinstance(body.get("destination"), str):
            target = ("", body["destination"])
        elif isinstance(body.get("exchange"), str):
            target = (_exchange_name(body["exchange"]), str(body.get("routing_key", "")))
        else:
            raise bad_request("say where to: destination, exchange (+ routing_key) or dead_letters")
        if target is not None:
            self._check(request, v.name, "exchange", target[0], "write")
        moved, error = await operations.move(self.broker, v, queue, count, target)
        if error is not None:
            return JSONResponse({"error": "bad_request", "reason": error.text, "moved": moved}, status_code=400)
        return {"moved": moved}

    async def queue_bindings(self, request: Request, vhost: str, queue: str) -> Any:
        v = self._vhost(vhost)
        if queue not in v.queues:
            raise not_found()
        items = [b for b in objects.bindings(v) if b["destination"] == queue and b["destination_type"] == "queue"]
        return self._listing(request, items)

    # -- bindings ----------------------------------------------------------------------------------------------------

    async def all_bindings(self, request: Request, vhost: str | None = None) -> Any:
        return self._listing(request, [b for v in self._vhosts(request, vhost) for b in objects.bindings(v)])

    def _pair(self, vhost: str, source: str, kind: str, dest: str) -> tuple[VirtualHost, list[dict[str, Any]]]:
        v = self._vhost(vhost)
        if kind not in ("q", "e"):
            raise not_found()
        v.exchange(_exchange_name(source))
        operations.destination(v, kind, dest)
        dtype = "queue" if kind == "q" else "exchange"
        found = [
            b
            for b in objects.bindings(v)
            if b["source"] == _exchange_name(source) and b["destination"] == dest and b["destination_type"] == dtype
        ]
        return v, found

    async def pair_bindings(self, request: Request, vhost: str, source: str, kind: str, dest: str) -> Any:
        return self._listing(request, self._pair(vhost, source, kind, dest)[1])

    def _check_binding(self, request: Request, v: VirtualHost, source: str, kind: str, dest: str) -> None:
        """rabbit_channel's binding checks: write on the destination, read on the source."""
        self._check(request, v.name, "queue" if kind == "q" else "exchange", dest, "write")
        self._check(request, v.name, "exchange", _exchange_name(source), "read")

    async def bind(self, request: Request, vhost: str, source: str, kind: str, dest: str) -> Any:
        v, _ = self._pair(vhost, source, kind, dest)
        self._check_binding(request, v, source, kind, dest)
        body = await self._json(request)
        key, args = str(body.get("routing_key", "")), _arguments(body)
        v.bind(_exchange_name(source), operations.destination(v, kind, dest), key, args)
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
        ex = v.exchange(_exchange_name(source))
        target = operations.destination(v, kind, dest)
        for bound, key, args in ex.bindings():
            if bound is target and objects.properties_key(key, args) == b["properties_key"]:
                v.unbind(ex.name, target, key, args)
        return NoContent()

    # -- connections, channels, consumers -----------------------------------------------------------------------------

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

    # -- definitions ----------------------------------------------------------------------------------------------

    async def definitions(self, request: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._vhost(vhost)
        doc = definitions.export(self.broker, vhost)
        if request.query_params.get("download"):
            name = request.query_params["download"].replace('"', "")
            return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{name}"'})
        return doc

    async def import_definitions(self, request: Request, vhost: str | None = None) -> Any:
        doc = await self._json(request)
        if isinstance(doc.get("file"), str):  # the management UI's form upload wraps the document
            try:
                doc = json.loads(doc["file"])
            except ValueError:
                raise bad_request("not_json") from None
        try:
            definitions.import_definitions(self.broker, doc, vhost)
        except definitions.DefinitionsError as exc:
            raise bad_request(str(exc)) from None
        return NoContent()

    # -- policies -------------------------------------------------------------------------------------------------

    async def policies(self, request: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._vhost(vhost)
        vhosts = [v.name for v in self._vhosts(request, vhost)]
        items = [p.as_json() for name in vhosts for p in self.broker.policies.entries(name)]
        return self._listing(request, items)

    async def policy(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        p = self.broker.policies.get(vhost, name)
        if p is None:
            raise not_found()
        return p.as_json()

    async def put_policy(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        body = await self._json(request)
        existed = self.broker.policies.put(
            vhost,
            name,
            body.get("pattern"),
            body.get("definition"),
            body.get("priority", 0),
            body.get("apply-to", "all"),
        )
        return self._created(existed)

    async def delete_policy(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        if not self.broker.policies.delete(vhost, name):
            raise not_found()
        return NoContent()

    # -- health -----------------------------------------------------------------------------------------------------

    async def aliveness(self, request: Request, vhost: str) -> Any:
        """RabbitMQ declares aliveness-test, publishes to it and gets the message back."""
        v = self._vhost(vhost)
        v.declare_queue(
            "aliveness-test", passive=False, durable=False, exclusive=False, auto_delete=False, arguments={}, owner=None
        )
        await operations.publish(self.broker, v, "", "aliveness-test", {}, b"test_message")
        fetched = operations.get(v, "aliveness-test", 1, "ack_requeue_false")
        if not fetched:
            return JSONResponse({"status": "failed", "reason": "aliveness test message lost"}, status_code=503)
        return {"status": "ok"}

    async def health_alarms(self, request: Request) -> Any:
        if self.broker.alarms:
            alarms = [{"resource": name, "node": objects.NODE} for name in sorted(self.broker.alarms)]
            return JSONResponse(
                {"status": "failed", "reason": "resource alarm(s) in effect in the cluster", "alarms": alarms},
                status_code=503,
            )
        return {"status": "ok"}

    async def health_vhosts(self, request: Request) -> Any:
        return {"status": "ok"}

    async def health_port(self, request: Request, port: str) -> Any:
        ports = sorted(int(entry["port"]) for entry in self.listeners)
        if not port.isdigit() or int(port) not in ports:
            return JSONResponse(
                {
                    "status": "failed",
                    "reason": "No active listener",
                    "missing": port if not port.isdigit() else int(port),
                    "ports": ports,
                },
                status_code=503,
            )
        return {"status": "ok", "port": int(port)}


def _exchange_name(name: str) -> str:
    """The default exchange is `amq.default` in API paths."""
    return "" if name == "amq.default" else name


def _bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


def _int(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise bad_request(f"{key} must be an integer") from None
    if number < 0:
        raise bad_request(f"{key} must not be negative")
    return number


def _arguments(body: dict[str, Any]) -> dict[str, Any]:
    args = body.get("arguments") or {}
    if not isinstance(args, dict):
        raise bad_request("arguments must be an object")
    return args


ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
    ("GET", "api/overview", "overview"),
    ("GET", "api/whoami", "whoami"),
    ("GET", "api/nodes", "nodes", "monitoring"),
    ("GET", "api/nodes/{node}", "node", "monitoring"),
    ("GET", "api/vhosts", "vhosts"),
    ("GET", "api/vhosts/{vhost}", "vhost"),
    ("GET", "api/exchanges", "exchanges"),
    ("GET", "api/exchanges/{vhost}", "exchanges"),
    ("GET", "api/exchanges/{vhost}/{exchange}", "exchange"),
    ("PUT", "api/exchanges/{vhost}/{exchange}", "put_exchange"),
    ("DELETE", "api/exchanges/{vhost}/{exchange}", "delete_exchange"),
    ("POST", "api/exchanges/{vhost}/{exchange}/publish", "publish"),
    ("GET", "api/exchanges/{vhost}/{exchange}/bindings/{direction}", "exchange_bindings"),
    ("GET", "api/queues", "queues"),
    ("GET", "api/queues/{vhost}", "queues"),
    ("GET", "api/queues/{vhost}/{queue}", "queue"),
    ("GET", "api/queues/{vhost}/{queue}/offset", "stream_offset"),
    ("PUT", "api/queues/{vhost}/{queue}", "put_queue"),
    ("DELETE", "api/queues/{vhost}/{queue}", "delete_queue"),
    ("DELETE", "api/queues/{vhost}/{queue}/contents", "purge"),
    ("POST", "api/queues/{vhost}/{queue}/get", "get"),
    ("POST", "api/queues/{vhost}/{queue}/peek", "peek"),
    ("POST", "api/queues/{vhost}/{queue}/move", "move"),
    ("GET", "api/queues/{vhost}/{queue}/bindings", "queue_bindings"),
    ("GET", "api/bindings", "all_bindings"),
    ("GET", "api/bindings/{vhost}", "all_bindings"),
    ("GET", "api/bindings/{vhost}/e/{source}/{kind}/{dest}", "pair_bindings"),
    ("POST", "api/bindings/{vhost}/e/{source}/{kind}/{dest}", "bind"),
    ("GET", "api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}", "binding"),
    ("DELETE", "api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}", "unbind"),
    ("GET", "api/connections", "connections"),
    ("GET", "api/connections/{name}", "connection"),
    ("DELETE", "api/connections/{name}", "close_connection"),
    ("GET", "api/connections/{name}/channels", "connection_channels"),
    ("GET", "api/channels", "channels"),
    ("GET", "api/channels/{name}", "channel"),
    ("GET", "api/consumers", "consumers"),
    ("GET", "api/consumers/{vhost}", "consumers"),
    ("GET", "api/definitions", "definitions", "administrator"),
    ("POST", "api/definitions", "import_definitions", "administrator"),
    ("GET", "api/definitions/{vhost}", "definitions", "administrator"),
    ("POST", "api/definitions/{vhost}", "import_definitions", "administrator"),
    ("GET", "api/policies", "policies"),
    ("GET", "api/policies/{vhost}", "policies"),
    ("GET", "api/policies/{vhost}/{name}", "policy"),
    ("PUT", "api/policies/{vhost}/{name}", "put_policy", "policymaker"),
    ("DELETE", "api/policies/{vhost}/{name}", "delete_policy", "policymaker"),
    ("GET", "api/aliveness-test/{vhost}", "aliveness"),
    ("GET", "api/health/checks/alarms", "health_alarms"),
    ("GET", "api/health/checks/local-alarms", "health_alarms"),
    ("GET", "api/health/checks/virtual-hosts", "health_vhosts"),
    ("GET", "api/health/checks/port-listener/{port}", "health_port"),
]
