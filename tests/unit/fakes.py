"""Stand-ins for the socket side of the broker, and frame builders/decoders made with pamqp.

The broker layers under test do no I/O: a channel writes through `conn.send()`, a session through its
transport. These fakes record what was written so tests can decode it with pamqp and assert on what a
client would see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pamqp import body, commands, frame, header
from pamqp.base import Frame

from amqpd.broker.broker import Broker
from amqpd.broker.message import Message
from amqpd.config import Settings
from amqpd.protocol.fastpath import shortstr
from amqpd.session.channel import Channel
from amqpd.session.connection import Session

Decoded = tuple[int, Any]  # (channel id, pamqp frame object)
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def decode_frames(data: bytes) -> list[Decoded]:
    """Every frame in data, decoded by pamqp (the reference codec)."""
    out: list[Decoded] = []
    view = bytes(data)
    while view:
        used, channel, obj = frame.unmarshal(view)
        out.append((channel, obj))
        view = view[used:]
    return out


def method_payload(method: Frame) -> bytes:
    """A method frame's payload (class id, method id, arguments), as a session hands it to a channel."""
    return frame.marshal(method, 1)[7:-1]


def header_payload(body_size: int, **properties: Any) -> bytes:
    return frame.marshal(header.ContentHeader(0, body_size, commands.Basic.Properties(**properties)), 1)[7:-1]


def publish_frames(
    channel: int,
    exchange: str,
    routing_key: str,
    payload: bytes,
    *,
    mandatory: bool = False,
    frame_max: int = 131072,
    **properties: Any,
) -> bytes:
    """basic.publish + header + body frames exactly as a client writes them."""
    out = [
        frame.marshal(commands.Basic.Publish(0, exchange, routing_key, mandatory), channel),
        frame.marshal(header.ContentHeader(0, len(payload), commands.Basic.Properties(**properties)), channel),
    ]
    step = frame_max - 8
    for start in range(0, len(payload), step):
        out.append(frame.marshal(body.ContentBody(payload[start : start + step]), channel))
    return b"".join(out)


class FakeConnection:
    """What a Channel needs from its connection (amqpd.session.channel.ConnectionLike)."""

    def __init__(self, *, user: str = "guest", frame_max: int = 131072, consumer_cancel_notify: bool = True) -> None:
        self.frame_max = frame_max
        self.user = user
        self.consumer_cancel_notify = consumer_cancel_notify
        self.writable = True
        self.paused_by: set[str] = set()  # queues whose backlog paused reading from this client
        self.sent: list[bytes] = []
        self.confirm_channels: list[Channel] = []

    def send(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def send_pieces(self, pieces: list[bytes | memoryview]) -> None:
        self.sent.append(b"".join(pieces))

    def throttle(self, queue: Any) -> None:
        """Stop reading from this client (the session pauses its transport); unthrottle resumes."""
        queue.throttled.add(self)
        self.paused_by.add(queue.name)

    def unthrottle(self, queue: Any) -> None:
        self.paused_by.discard(queue.name)

    def unconfirmed_changed(self, delta: int) -> None:
        pass

    def hold_frames(self, reason: object) -> None:
        """A channel awaits the store before answering (a session holds the frames after it)."""

    def release_frames(self, reason: object) -> None:
        pass

    def confirms_pending(self, channel: Channel) -> None:
        if channel not in self.confirm_channels:
            self.confirm_channels.append(channel)

    def can_write(self) -> bool:
        return self.writable

    def flush_confirms(self) -> None:
        """What the server does once per loop turn."""
        channels, self.confirm_channels = self.confirm_channels, []
        for ch in channels:
            ch.emit_confirms()

    def take(self) -> list[Decoded]:
        """Everything sent since the last take(), decoded; pending confirms are emitted first."""
        self.flush_confirms()
        data = b"".join(self.sent)
        self.sent.clear()
        return decode_frames(data)

    def take_frames(self) -> list[Any]:
        return [obj for _ch, obj in self.take()]


class ClientChannel:
    """A channel driven the way a session drives it: methods as pamqp objects, content as payloads."""

    def __init__(
        self, broker: Broker, conn: FakeConnection | None = None, channel_id: int = 1, vhost: str = "/"
    ) -> None:
        self.conn = conn or FakeConnection()
        self.broker = broker
        self.ch = Channel(self.conn, channel_id, broker.vhosts[vhost], broker)
        self.pending: list[Any] = []

    def call(self, method: Frame) -> list[Any]:
        """A method other than publish/ack/nack/reject; returns the frames sent back."""
        self.ch.handle(method)
        return self.conn.take_frames()

    def publish(
        self, exchange: str, routing_key: str, payload: bytes = b"x", *, mandatory: bool = False, **properties: Any
    ) -> None:
        self.ch.on_publish(method_payload(commands.Basic.Publish(0, exchange, routing_key, mandatory)))
        self.ch.on_header(header_payload(len(payload), **properties))
        step = self.conn.frame_max - 8
        for start in range(0, len(payload), step):
            self.ch.on_body(payload[start : start + step])

    def ack(self, tag: int, multiple: bool = False) -> None:
        self.ch.on_ack(method_payload(commands.Basic.Ack(tag, multiple)))

    def nack(self, tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self.ch.on_nack(method_payload(commands.Basic.Nack(tag, multiple, requeue)))

    def reject(self, tag: int, requeue: bool = True) -> None:
        self.ch.on_reject(method_payload(commands.Basic.Reject(tag, requeue)))

    def declare_queue(self, name: str, **kwargs: Any) -> str:
        (ok,) = self.call(commands.Queue.Declare(queue=name, **kwargs))
        return ok.queue

    def consume(self, queue: str, tag: str = "", **kwargs: Any) -> str:
        """basic.consume; deliveries it triggers stay pending for deliveries()."""
        frames = self.call(commands.Basic.Consume(queue=queue, consumer_tag=tag, **kwargs))
        ok = frames[0]
        assert isinstance(ok, commands.Basic.ConsumeOk)
        self.pending += frames[1:]
        return ok.consumer_tag

    def deliveries(self) -> list[tuple[Any, bytes]]:
        """(basic.deliver or basic.get-ok or basic.return, body) pairs sent since the last call."""
        frames, self.pending = [*self.pending, *self.conn.take_frames()], []
        return messages(frames)


def messages(frames: list[Any]) -> list[tuple[Any, bytes]]:
    """Group deliver/get-ok/return method frames with their bodies."""
    out: list[tuple[Any, bytes]] = []
    for obj in frames:
        if isinstance(obj, (commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.Return)):
            out.append((obj, b""))
        elif isinstance(obj, body.ContentBody):
            method, data = out[-1]
            out[-1] = (method, data + obj.value)
    return out


def new_broker(now_ms: Callable[[], int] | None = None, **settings: Any) -> Broker:
    if now_ms is None:
        return Broker(Settings(**settings))
    return Broker(Settings(**settings), now_ms=now_ms)


class FakeTransport:
    """What a Session asks of the socket layer."""

    def __init__(self) -> None:
        self.closed = False
        self.flush_requests = 0
        self.holds: set[object] = set()  # why reading is paused
        self.writable = True

    def request_flush(self) -> None:
        self.flush_requests += 1

    def close(self) -> None:
        self.closed = True

    def hold_reading(self, reason: object) -> None:
        self.holds.add(reason)

    def release_reading(self, reason: object) -> None:
        self.holds.discard(reason)

    def can_write(self) -> bool:
        return self.writable


class Conn:
    """One client connection: bytes in, what the broker wrote back out."""

    def __init__(self, broker: Broker, frame_max: int = 131072) -> None:
        self.session = Session(broker, FakeTransport(), "test")
        self.session.feed(PROTOCOL_HEADER)
        for method in (
            commands.Connection.StartOk({"capabilities": {}}, "PLAIN", "\0guest\0guest", "en_US"),
            commands.Connection.TuneOk(2047, frame_max, 0),
            commands.Connection.Open("/"),
        ):
            self.session.feed(frame.marshal(method, 0))
        self.session.feed(frame.marshal(commands.Channel.Open(), 1))
        self.session.take_output()

    def send(self, data: bytes) -> None:
        self.session.feed(data)


def make_message(exchange: str, routing_key: str, payload: bytes = b"x", **properties: Any) -> Message:
    """A message as the channel builds it from a client's publish."""
    hdr = header_payload(len(payload), **properties)
    route = shortstr(exchange) + shortstr(routing_key)
    return Message(exchange, routing_key, route, hdr, payload, int.from_bytes(hdr[12:14], "big"))
