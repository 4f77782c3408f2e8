"""A raw-socket AMQP connection for the load generator: handshake and setup RPCs through pamqp (once per
connection, so its cost does not matter), then the caller owns the socket and writes pre-encoded bytes."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from pamqp import commands, frame, header
from pamqp.base import Frame

_FRAME_HEADER = struct.Struct(">BHI")
SETUP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Target:
    """One broker to measure: where it listens and, when known, the OS process to read CPU/RSS from."""

    name: str
    url: str
    pid: int | None = None

    @property
    def address(self) -> tuple[str, int]:
        parsed = urlparse(self.url)
        return parsed.hostname or "127.0.0.1", parsed.port or 5672


class RawConnection:
    """Blocking AMQP connection on a plain socket; channel 1 is opened by connect()."""

    def __init__(self, url: str, frame_max: int = 131072) -> None:
        self.url = url
        self.frame_max = frame_max
        self.sock: socket.socket | None = None
        self.server_properties: dict[str, Any] = {}
        self._buf = b""

    def connect(self, channels: int = 1) -> RawConnection:
        parsed = urlparse(self.url)
        self.sock = socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5672), SETUP_TIMEOUT)
        # Batches are written whole; Nagle would only add latency to S5's small writes.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._handshake(
            unquote(parsed.username or "guest"),
            unquote(parsed.password or "guest"),
            unquote(parsed.path[1:]) if len(parsed.path) > 1 else "/",
        )
        for ch in range(1, channels + 1):
            self.rpc(ch, commands.Channel.Open(), commands.Channel.OpenOk)
        return self

    def _handshake(self, user: str, password: str, vhost: str) -> None:
        assert self.sock is not None
        self.sock.sendall(frame.marshal(header.ProtocolHeader(), 0))
        start = self.expect(commands.Connection.Start)
        self.server_properties = dict(start.server_properties or {})
        props: dict[str, Any] = {"product": "amqpd-bench", "capabilities": {"authentication_failure_close": True}}
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties=props, mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"
            ),
        )
        tune = self.expect(commands.Connection.Tune)
        self.frame_max = min(self.frame_max, tune.frame_max or self.frame_max)
        # heartbeat 0: the generator never stalls long enough to need one, and it keeps the scanner simple
        self.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max, frame_max=self.frame_max, heartbeat=0))
        self.rpc(0, commands.Connection.Open(virtual_host=vhost), commands.Connection.OpenOk)

    def send(self, channel: int, method: Frame) -> None:
        assert self.sock is not None
        self.sock.sendall(frame.marshal(method, channel))

    def rpc(self, channel: int, method: Frame, reply: type[Frame]) -> Any:
        self.send(channel, method)
        return self.expect(reply)

    def expect(self, reply: type[Frame]) -> Any:
        got = self.read_frame()
        if not isinstance(got, reply):
            detail = f"{getattr(got, 'reply_code', '')} {getattr(got, 'reply_text', '')}".strip()
            raise ConnectionError(f"expected {reply.__name__}, got {type(got).__name__} {detail}")
        return got

    def read_frame(self) -> Any:
        """One whole frame (used only during setup; the hot path uses codec.FrameScanner)."""
        assert self.sock is not None
        while True:
            if len(self._buf) >= 7:
                size = _FRAME_HEADER.unpack_from(self._buf)[2]
                if len(self._buf) >= size + 8:
                    raw, self._buf = self._buf[: size + 8], self._buf[size + 8 :]
                    return frame.unmarshal(raw)[2]
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection during setup")
            self._buf += chunk

    def _drain_until_close_ok(self) -> None:
        # Deliveries still in flight may come before close-ok; skip them. The 2 s socket timeout bounds this.
        while not isinstance(self.read_frame(), commands.Connection.CloseOk):
            pass

    def take_buffered(self) -> bytes:
        """Bytes already read past the last setup reply (e.g. the first deliveries after consume-ok)."""
        data, self._buf = self._buf, b""
        return data

    def close(self, wait: bool = True) -> None:
        """wait=False after the hot path: the scanner may hold half a frame, so the stream is unreadable."""
        if self.sock is None:
            return
        try:
            self.sock.settimeout(2.0)
            self.send(0, commands.Connection.Close(reply_code=200, reply_text="bench done", class_id=0, method_id=0))
            if wait:
                self._drain_until_close_ok()
        except (OSError, ConnectionError):
            pass  # broker already gone or slow to answer; closing the socket below is enough
        self.sock.close()
        self.sock = None


def declare_queue(
    conn: RawConnection, name: str, durable: bool, channel: int = 1, arguments: dict | None = None
) -> None:
    conn.rpc(
        channel, commands.Queue.Declare(queue=name, durable=durable, arguments=arguments), commands.Queue.DeclareOk
    )


def delete_queue(conn: RawConnection, name: str, channel: int = 1) -> int:
    ok = conn.rpc(channel, commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)
    return int(ok.message_count)


def declare_topic(conn: RawConnection, name: str, channel: int = 1) -> None:
    conn.rpc(
        channel,
        commands.Exchange.Declare(exchange=name, exchange_type="topic", auto_delete=False),
        commands.Exchange.DeclareOk,
    )


def delete_exchange(conn: RawConnection, name: str, channel: int = 1) -> None:
    conn.rpc(channel, commands.Exchange.Delete(exchange=name), commands.Exchange.DeleteOk)


def bind(conn: RawConnection, queue: str, exchange: str, pattern: str, channel: int = 1) -> None:
    conn.rpc(
        channel,
        commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=pattern),
        commands.Queue.BindOk,
    )


def queue_depth(conn: RawConnection, name: str, channel: int = 1) -> int:
    ok = conn.rpc(channel, commands.Queue.Declare(queue=name, passive=True), commands.Queue.DeclareOk)
    return int(ok.message_count)
