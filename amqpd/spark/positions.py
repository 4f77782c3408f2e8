"""Where a stream starts and ends, and which offset a time maps to, asked of the broker on the driver, so
that a replayed micro-batch reads exactly the offsets it was planned with.

By default over AMQP, at the `uri` the executors read from (AmqpPositions: a consumer with
x-amqpd-stream-info, amqpd/broker/streams/info.py, answered with one delivery of the stream's facts). With
the `managementUri` option, from that HTTP API instead (HttpPositions: `GET /api/queues/{vhost}/{stream}`'s
`stream` object, `GET …/offset?timestamp=`); its address is never guessed."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

from pamqp import commands

from amqpd.spark.wire import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, BrokerError, Endpoint, Link

INFO_ARG = "x-amqpd-stream-info"
AT_ARG = "x-amqpd-offset-at"
INFO_TYPE = "application/vnd.amqpd.stream-info+json"
INFO_TIMEOUT_S = 30.0  # an answer is one delivery right after consume-ok: this long without one is an error


class NotAmqpd(BrokerError):
    """The broker at the URI is another one (RabbitMQ, say): it cannot answer x-amqpd-stream-info."""


@dataclass(frozen=True)
class Bounds:
    """A stream's offsets: `first` is the oldest kept, `end` the next one to come (readable: [first, end))."""

    first: int
    end: int


class Positions(Protocol):
    def bounds(self, stream: str) -> Bounds: ...

    def offset_at(self, stream: str, timestamp_ms: int) -> int:
        """The first offset appended at or after the time (the stream's end when none is that recent)."""
        ...


class HttpPositions:
    def __init__(self, management_uri: str, endpoint: Endpoint) -> None:
        self.base = management_uri.rstrip("/")
        token = base64.b64encode(f"{endpoint.user}:{endpoint.password}".encode()).decode()
        self.auth = f"Basic {token}"
        self.vhost = urllib.parse.quote(endpoint.vhost, safe="")
        # an https management URI is checked with the amqps URI's CA and client certificate (one set of files)
        self.context = endpoint.ssl_context() if self.base.startswith("https:") else None

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path, headers={"Authorization": self.auth})
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            if exc.code == 404:
                raise ValueError(f"amqpd: no such stream ({path}): {detail}") from exc
            raise RuntimeError(f"amqpd management API {exc.code} for {path}: {detail}") from exc

    def bounds(self, stream: str) -> Bounds:
        q = self._get(f"/api/queues/{self.vhost}/{urllib.parse.quote(stream, safe='')}")
        info = q.get("stream")
        if q.get("type") != "stream" or info is None:
            raise ValueError(f"amqpd: queue '{stream}' is not a stream (x-queue-type: stream)")
        first = int(info["first_offset"])
        committed = info["committed_offset"]
        return Bounds(first, first if committed is None else int(committed) + 1)

    def offset_at(self, stream: str, timestamp_ms: int) -> int:
        """The first offset appended at or after the time (the stream's end when none is that recent)."""
        path = f"/api/queues/{self.vhost}/{urllib.parse.quote(stream, safe='')}/offset?timestamp={timestamp_ms}"
        return int(self._get(path)["offset"])


def _refused(exc: Exception) -> bool:
    """The broker closed the channel on the question: no such queue (404) or not a stream (406)."""
    return str(exc).startswith(("404 ", "406 "))


class AmqpPositions:
    """Positions over AMQP: one connection (opened when first asked, not pickled with the reader), one
    consume/cancel round trip per question."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._link: Link | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "_link": None}

    def bounds(self, stream: str) -> Bounds:
        facts = self.facts(stream)
        return Bounds(int(facts["first_offset"]), int(facts["end_offset"]))

    def offset_at(self, stream: str, timestamp_ms: int) -> int:
        return int(self.facts(stream, timestamp_ms)["offset_at"])

    def facts(self, stream: str, at_ms: int | None = None) -> dict[str, Any]:
        """The stream's facts (amqpd/broker/streams/info.py's JSON); ValueError naming the stream when the
        broker refuses (no such queue, not a stream), BrokerError when it is not amqpd or goes away."""
        kept = self._link is not None  # a connection kept from an earlier question may have gone since
        try:
            return self._ask(stream, at_ms)
        except (BrokerError, OSError) as exc:
            self._drop()
            if _refused(exc) or not kept:
                raise self._named(stream, exc) from None
        try:  # once more, on a new connection
            return self._ask(stream, at_ms)
        except (BrokerError, OSError) as exc:
            self._drop()
            raise self._named(stream, exc) from None

    def _named(self, stream: str, exc: Exception) -> Exception:
        """The broker's refusal as a ValueError naming the stream; anything else as it was."""
        if _refused(exc):
            return ValueError(f"amqpd: stream '{stream}' in vhost '{self.endpoint.vhost}': {exc}")
        return exc

    def _drop(self) -> None:
        if self._link is not None:
            self._link.sock.close()
            self._link = None

    def _connect(self) -> Link:
        if self._link is None:
            link = Link(self.endpoint, INFO_TIMEOUT_S)
            product = link.server_properties.get("product")
            product = product.decode() if isinstance(product, bytes) else product
            if product != "amqpd":
                version = link.server_properties.get("version")
                version = version.decode() if isinstance(version, bytes) else version
                link.close()
                ep = self.endpoint
                raise NotAmqpd(
                    f"the broker at {ep.host}:{ep.port} is {product or 'unknown'} {version or ''}, not amqpd: "
                    "the amqpd source reads streams from amqpd only"
                )
            self._link = link
        return self._link

    def _ask(self, stream: str, at_ms: int | None) -> dict[str, Any]:
        link = self._connect()
        arguments: dict[str, Any] = {INFO_ARG: True}
        if at_ms is not None:
            arguments[AT_ARG] = at_ms
        link.send_method(commands.Basic.Consume(queue=stream, consumer_tag="amqpd.spark.info", arguments=arguments))
        link.expect(commands.Basic.ConsumeOk)
        deliver = link.expect(commands.Basic.Deliver)
        body = bytearray()
        size = -1
        while size < 0 or len(body) < size:
            kind, start, end = link.next_frame()
            if kind == FRAME_HEADER:
                size = int.from_bytes(link.buf[start + 4 : start + 12], "big")
            elif kind == FRAME_BODY:
                body += link.buf[start:end]
            elif kind == FRAME_METHOD:
                raise BrokerError("a method where the stream's facts were expected")
        link.send_method(commands.Basic.Ack(delivery_tag=deliver.delivery_tag))
        link.send_method(commands.Basic.Cancel(consumer_tag="amqpd.spark.info"))
        link.expect(commands.Basic.CancelOk)
        return dict(json.loads(body))

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
