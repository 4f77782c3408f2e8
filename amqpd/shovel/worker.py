"""One running shovel: a client of its source and its destination, moving messages until it is stopped (or
has moved what `src-delete-after` allows), reconnecting every `reconnect-delay` after a failure.

With ack-mode on-confirm a message is acknowledged to the source only once the destination confirmed it, so a
crash of either side or of this broker loses nothing: what was in flight (at most `src-prefetch-count`
messages) is delivered again by the source, and may arrive twice."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import aiormq
from pamqp.commands import Basic

from amqpd.shovel.schema import ShovelSpec

log = logging.getLogger("amqpd.shovel")

# What a failed connection attempt or a broken session raises: aiormq's errors and the socket's.
FAILURES = (
    aiormq.exceptions.AMQPError,
    aiormq.exceptions.ChannelInvalidStateError,
    OSError,
    asyncio.TimeoutError,
    ConnectionError,
)


NODE = f"amqpd@{socket.gethostname().split('.')[0]}"  # as /api/nodes names this broker


class VerbatimProperties(Basic.Properties):
    """A message's properties exactly as the source delivered them. aiormq's basic_publish stamps a random
    message_id on a message with none (or an empty one), to match basic.return frames to publishes; a shovel
    must not (RabbitMQ's does not), and it publishes without `mandatory`, so no return needs matching. And
    pamqp leaves out a property set to an empty string, which the source did send (but for cluster_id, whose
    absence pamqp decodes as an empty string)."""

    def __init__(self, source: Basic.Properties) -> None:  # not super(): its validate() refuses any cluster_id
        for name in source.attributes():
            setattr(self, name, getattr(source, name))
        self._sealed = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "message_id" and getattr(self, "_sealed", False):
            return  # aiormq's stamp
        super().__setattr__(name, value)

    def marshal(self) -> bytes:
        flags, parts = 0, []
        for name in self.attributes():
            value = getattr(self, name)
            if value is not None and not (name == "cluster_id" and value == ""):
                flags |= self.flags[name]
                parts.append(self.encode_property(name, value))
        return struct.pack(">H", flags) + b"".join(parts)  # the 14 flags fit the first flag word


class Finished(Exception):
    """src-delete-after reached: the shovel stops for good."""


def resolve(uri: str, local: str) -> str:
    """`amqp://` with no host is this broker: its own listener (RabbitMQ connects directly to its node)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.hostname:
        return uri
    local_parts = urllib.parse.urlsplit(local)
    netloc = local_parts.netloc
    if parts.username is not None:
        netloc = parts.netloc.split("@")[0] + "@" + local_parts.netloc.split("@")[-1]
    return urllib.parse.urlunsplit((parts.scheme or "amqp", netloc, parts.path, parts.query, ""))


def _redacted(uri: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


class Shovel:
    def __init__(self, vhost: str, name: str, spec: ShovelSpec, local: str, finished: Callable[[], None]) -> None:
        self.vhost, self.name, self.spec, self.local = vhost, name, spec, local
        self.finished = finished
        self.state = "starting"
        self.src_uri = spec.src_uris[0]
        self.dest_uri = spec.dest_uris[0]
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.moved = 0  # messages acknowledged to the source (or sent, without acks) since it started
        # of them, those the source marked redelivered: the only ones that may have reached the destination
        # before (an interruption after the destination took them, before the source heard of it)
        self.redelivered = 0
        self.attempt = 0
        self.started_at = time.time()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run(), name=f"shovel {self.vhost}/{self.name}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass

    async def run(self) -> None:
        while True:
            try:
                await self._session()
            except Finished:
                self.state = "terminated"
                log.info("shovel %s/%s finished after %d messages", self.vhost, self.name, self.moved)
                self.finished()
                return
            except FAILURES as exc:
                self._failed(exc)
            except Exception as exc:  # a bug of ours must not end the retries, nor reach the broker's loop
                log.exception("shovel %s/%s failed", self.vhost, self.name)
                self._failed(exc)
            await asyncio.sleep(self.spec.reconnect_delay)

    def _failed(self, exc: BaseException) -> None:
        self.state = "starting"
        self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.last_error_at = time.time()
        log.warning(
            "shovel %s/%s: %s; retrying in %s s", self.vhost, self.name, self.last_error, self.spec.reconnect_delay
        )

    async def _session(self) -> None:
        spec = self.spec
        self.src_uri = spec.src_uris[self.attempt % len(spec.src_uris)]
        self.dest_uri = spec.dest_uris[self.attempt % len(spec.dest_uris)]
        self.attempt += 1
        src = await aiormq.connect(resolve(self.src_uri, self.local))
        try:
            dest = await aiormq.connect(resolve(self.dest_uri, self.local))
            try:
                await self._move(src, dest)
            finally:
                await _close(dest)
        finally:
            await _close(src)

    async def _move(self, src: aiormq.abc.AbstractConnection, dest: aiormq.abc.AbstractConnection) -> None:
        spec = self.spec
        confirms = spec.ack_mode == "on-confirm"
        dest_ch = await dest.channel(publisher_confirms=confirms)
        if spec.dest_queue is not None:
            await _ensure_queue(dest, spec.dest_queue)
        src_ch = await src.channel(publisher_confirms=False)
        queue, length = await self._source_queue(src_ch)
        limit = length if spec.delete_after == "queue-length" else spec.delete_after
        if limit == 0:
            raise Finished()
        if spec.ack_mode != "no-ack":
            await src_ch.basic_qos(prefetch_count=spec.prefetch)
        mover = _Mover(self, src_ch, dest_ch, None if limit == "never" else int(limit))
        await src_ch.basic_consume(queue, mover.deliver, no_ack=spec.ack_mode == "no-ack")
        self.state = "running"
        await mover.wait(src, dest)

    async def _source_queue(self, ch: aiormq.abc.AbstractChannel) -> tuple[str, int]:
        spec = self.spec
        if spec.src_queue is not None:
            ok = await ch.queue_declare(spec.src_queue, durable=True)
            return spec.src_queue, ok.message_count or 0
        ok = await ch.queue_declare("", exclusive=True, auto_delete=True)
        assert ok.queue is not None and spec.src_exchange is not None
        await ch.queue_bind(ok.queue, spec.src_exchange, routing_key=spec.src_exchange_key)
        return ok.queue, 0

    def _forward_header(self) -> dict[str, Any]:
        """RabbitMQ's x-shovelled entry, key for key."""
        spec = self.spec
        header: dict[str, Any] = {
            "shovelled-by": NODE,
            "shovel-type": "dynamic",
            "shovel-name": self.name,
            "shovel-vhost": self.vhost,
            "src-uri": _redacted(self.src_uri),
            "dest-uri": _redacted(self.dest_uri),
        }
        if spec.src_queue is not None:
            header["src-queue"] = spec.src_queue
        else:
            header["src-exchange"], header["src-exchange-key"] = spec.src_exchange, spec.src_exchange_key
        if spec.dest_queue is not None:
            header["dest-queue"] = spec.dest_queue
        if spec.dest_exchange is not None:
            header["dest-exchange"] = spec.dest_exchange
        if spec.dest_exchange_key is not None:
            header["dest-exchange-key"] = spec.dest_exchange_key
        return header

    def properties(self, message: aiormq.abc.DeliveredMessage) -> Basic.Properties:
        spec, props = self.spec, message.header.properties
        if spec.publish_properties:
            for key, value in spec.publish_properties.items():
                setattr(props, key.replace("-", "_"), value)
        if spec.add_forward_headers or spec.add_timestamp_header:
            headers = dict(props.headers or {})
            if spec.add_forward_headers:
                headers["x-shovelled"] = [self._forward_header()]
            if spec.add_timestamp_header:
                headers["x-shovelled-timestamp"] = int(time.time())
            props.headers = headers
        return VerbatimProperties(props)


class _Mover:
    """One session's consumer: each delivery published to the destination, then acknowledged to the source."""

    def __init__(
        self, shovel: Shovel, src_ch: aiormq.abc.AbstractChannel, dest_ch: aiormq.abc.AbstractChannel, limit: int | None
    ) -> None:
        self.shovel, self.src_ch, self.dest_ch, self.limit = shovel, src_ch, dest_ch, limit
        self.taken = 0  # deliveries this session handles (past `limit` they are left to the source)
        self.pending: set[asyncio.Task[None]] = set()
        self.failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self.done = asyncio.Event()

    async def deliver(self, message: aiormq.abc.DeliveredMessage) -> None:
        if self.limit is not None and self.taken >= self.limit:
            return  # not acked: the source gets it back when the channel closes
        self.taken += 1
        try:
            await self._forward(message)
        except Exception as exc:  # the session is over: wait() raises it and the shovel reconnects
            if not self.failed.done():
                self.failed.set_result(exc)
            return
        if self.limit is not None and self.shovel.moved >= self.limit:
            self.done.set()

    async def _forward(self, message: aiormq.abc.DeliveredMessage) -> None:
        shovel, spec = self.shovel, self.shovel.spec
        exchange = spec.dest_exchange if spec.dest_exchange is not None else ""
        if spec.dest_queue is not None:
            routing_key = spec.dest_queue
        else:
            routing_key = spec.dest_exchange_key if spec.dest_exchange_key is not None else message.routing_key or ""
        confirm = await self.dest_ch.basic_publish(
            message.body, exchange=exchange, routing_key=routing_key, properties=shovel.properties(message)
        )
        tag = message.delivery_tag
        if spec.ack_mode == "no-ack" or tag is None:
            shovel.moved += 1
            return
        if spec.ack_mode == "on-confirm" and not isinstance(confirm, Basic.Ack):
            await self.src_ch.basic_nack(tag, requeue=True)
            return
        await self.src_ch.basic_ack(tag)
        shovel.moved += 1
        if message.redelivered:
            shovel.redelivered += 1

    async def wait(self, src: aiormq.abc.AbstractConnection, dest: aiormq.abc.AbstractConnection) -> None:
        """Until a side or a channel closes, a message fails or the limit is reached (then Finished)."""
        watched = [src.closing, dest.closing, self.src_ch.closing, self.dest_ch.closing]
        waits: list[asyncio.Future[Any]] = [*map(asyncio.ensure_future, watched), self.failed]
        waits.append(asyncio.ensure_future(self.done.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                if w is not self.failed:
                    w.cancel()
        if self.done.is_set():
            raise Finished()
        reason = self._close_reason()
        if reason is not None:
            raise reason
        if self.failed.done():
            raise self.failed.result()
        raise ConnectionError("connection closed")

    def _close_reason(self) -> BaseException | None:
        """Why a channel or connection closed, as the broker said it (the publishes that were waiting then fail
        with a mere "closed", and the first to fail is not always the one refused)."""
        for resource in (self.dest_ch, self.src_ch, self.dest_ch.connection, self.src_ch.connection):
            if not resource.is_closed:
                continue
            closing = resource.closing
            if not closing.cancelled() and closing.exception() is not None:
                return closing.exception()
        return None


async def _ensure_queue(connection: aiormq.abc.AbstractConnection, queue: str) -> None:
    """As RabbitMQ's shovel: a queue that exists is used as it is (whatever its arguments); a missing one is
    declared durable. Each on a channel of its own, since a 404 closes the channel."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        await channel.queue_declare(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        channel = await connection.channel(publisher_confirms=False)
        await channel.queue_declare(queue, durable=True)
    await channel.close()


async def _close(connection: aiormq.abc.AbstractConnection) -> None:
    try:
        await asyncio.wait_for(connection.close(), timeout=5)
    except (*FAILURES, RuntimeError):
        pass
