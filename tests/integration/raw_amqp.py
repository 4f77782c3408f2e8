"""A raw AMQP 0-9-1 client on a plain socket, for sending what no real client would: frames are built with
pamqp (or by hand) and read back one at a time, so a test can assert exactly what the broker answered."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any
from urllib.parse import unquote, urlparse

import pamqp.frame
import pamqp.heartbeat
from pamqp import commands
from pamqp.base import Frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8


def frame(frame_type: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    """A frame built by hand, so its parts can be wrong on purpose."""
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end


def method_payload(class_id: int, method_id: int, args: bytes = b"") -> bytes:
    return struct.pack(">HH", class_id, method_id) + args


def shortstr(value: bytes) -> bytes:
    return bytes((len(value),)) + value


class Closed(Exception):
    """The broker closed the socket."""


class RawConnection:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parsed = urlparse(url)
        self.user = unquote(parsed.username or "guest")
        self.password = unquote(parsed.password or "guest")
        self.vhost = unquote(parsed.path[1:]) if parsed.path and parsed.path != "/" else "/"
        self.timeout = timeout
        self.sock = socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5672), timeout=timeout)
        self.buf = b""
        self.tune: commands.Connection.Tune | None = None

    # --- sending ---------------------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, value: Any, channel: int = 0) -> None:
        self.send(pamqp.frame.marshal(value, channel))

    # --- receiving -------------------------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no complete frame from the broker in time")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed(f"socket closed by the broker; unread bytes: {self.buf[:64]!r}")
        self.buf += chunk

    def read_raw(self, n: int, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_frame(self, timeout: float | None = None) -> tuple[int, Any]:
        """(channel, pamqp frame object) of the next frame."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < 7:
            self._fill(deadline)
        (size,) = struct.unpack_from(">I", self.buf, 3)
        while len(self.buf) < size + 8:
            self._fill(deadline)
        consumed, channel, value = pamqp.frame.unmarshal(self.buf[: size + 8])
        self.buf = self.buf[consumed:]
        return channel, value

    def expect(self, kind: type, channel: int | None = None, timeout: float | None = None) -> Any:
        """The next frame, which must be of `kind` (heartbeats are skipped)."""
        while True:
            ch, value = self.read_frame(timeout)
            if isinstance(value, pamqp.heartbeat.Heartbeat):
                continue
            assert isinstance(value, kind), f"expected {kind.__name__}, got {value!r} on channel {ch}"
            if channel is not None:
                assert ch == channel, f"{kind.__name__} on channel {ch}, expected {channel}"
            return value

    def read_until_eof(self, timeout: float | None = None) -> bytes:
        """Everything the broker sends until it closes the socket."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                self._fill(deadline)
            except Closed:
                data, self.buf = self.buf, b""
                return data

    def expect_connection_close(self, timeout: float | None = None) -> commands.Connection.Close:
        """Skips frames until connection.close, answers close-ok, and checks that the socket then closes."""
        while True:
            ch, value = self.read_frame(timeout)
            if isinstance(value, commands.Connection.Close):
                assert ch == 0
                self.send_frame(commands.Connection.CloseOk())
                self.read_until_eof(timeout)
                return value

    def expect_channel_close(self, channel: int, timeout: float | None = None) -> commands.Channel.Close:
        """Skips frames until channel.close on `channel`, and answers close-ok."""
        while True:
            ch, value = self.read_frame(timeout)
            if isinstance(value, commands.Connection.Close):
                raise AssertionError(f"expected channel.close, got connection.close {value!r}")
            if isinstance(value, commands.Channel.Close) and ch == channel:
                self.send_frame(commands.Channel.CloseOk(), channel)
                return value

    # --- handshake -------------------------------------------------------------------------------------------

    def handshake(self, channel_max: int | None = None, frame_max: int | None = None, heartbeat: int = 0) -> None:
        self.send(PROTOCOL_HEADER)
        self.expect(commands.Connection.Start, 0)
        self.send_frame(
            commands.Connection.StartOk(
                client_properties={
                    "product": "amqpd raw test client",
                    "capabilities": {"authentication_failure_close": True},
                },
                mechanism="PLAIN",
                response=f"\0{self.user}\0{self.password}",
                locale="en_US",
            )
        )
        self.tune = self.expect(commands.Connection.Tune, 0)
        self.send_frame(
            commands.Connection.TuneOk(
                channel_max=self.tune.channel_max if channel_max is None else channel_max,
                frame_max=self.tune.frame_max if frame_max is None else frame_max,
                heartbeat=heartbeat,
            )
        )
        self.send_frame(commands.Connection.Open(virtual_host=self.vhost))
        self.expect(commands.Connection.OpenOk, 0)

    def open_channel(self, channel: int = 1) -> None:
        self.send_frame(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk, channel)

    def call(self, method: Frame, reply: type, channel: int = 1) -> Any:
        self.send_frame(method, channel)
        return self.expect(reply, channel)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
