"""/api/queues: listing, declaring, deleting and purging queues,
a stream's offset by time, and getting, peeking at and moving their messages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from amqpd.broker.streams.stream import StreamQueue
from amqpd.mgmt import listing, objects, operations
from amqpd.mgmt.endpoints import Endpoints
from amqpd.mgmt.http_errors import NoContent, bad_request, not_found
from amqpd.mgmt.request_fields import arguments_field, bool_field, exchange_name, int_field

if TYPE_CHECKING:
    from amqpd.broker.queues.queue import Queue


class QueueEndpoints(Endpoints):
    async def queues(self, request: Request, vhost: str | None = None) -> Any:
        vhosts = self._vhosts(request, vhost)

        def build(q: Queue) -> dict[str, Any]:
            return objects.queue_info(q, self.rates)

        query = request.query_params
        if listing.in_kept_order(query):  # the UI's and most tools' paging: no pass over every queue
            return listing.page_in_kept_order(objects.queues_in_order(vhosts), query, build)
        queues = [q for v in vhosts for q in v.queues.values()]
        return listing.apply_lazily(queues, query, build, objects.queue_fields(self.rates))

    async def queue(self, request: Request, vhost: str, queue: str) -> Any:
        q = self._vhost(vhost).queues.get(queue)
        if q is None:
            raise not_found()
        return objects.queue_info(q, self.rates, details=True)

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
            durable=bool_field(body, "durable", True),
            exclusive=False,
            auto_delete=bool_field(body, "auto_delete", False),
            arguments=arguments_field(body),
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
        count, truncate = int_field(body, "count", 1), body.get("truncate")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("Unsupported encoding. Please use auto or base64.")
        try:
            fetched = await operations.get(self.broker, v, queue, count, str(body.get("ackmode", "")))
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
        count, start = int_field(body, "count", 1), int_field(body, "from", 0)
        encoding = body.get("encoding", "auto")
        q = v.queues[queue]
        if isinstance(q, StreamQueue):  # a stream keeps what it delivered: `from` is an offset in its log
            records = await q.log.read_async(start, min(count, listing.MAX_PAGE_SIZE))
            return [operations.record_json(offset, record, encoding) for offset, record in records]
        entries = await operations.peek(self.broker, v, queue, count, start)
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
        count = int_field(body, "count", 0) or None
        target: tuple[str, str] | None
        if body.get("dead_letters") is True:
            target = None
        elif isinstance(body.get("destination"), str):
            target = ("", body["destination"])
        elif isinstance(body.get("exchange"), str):
            target = (exchange_name(body["exchange"]), str(body.get("routing_key", "")))
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


QUEUE_ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
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
]
