"""A minimal AMQP client on a bare socket (pamqp codecs), for what real clients can't express: bad
headers, malformed frames, exact field-table bytes, and the raw Start/Tune the server sends."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, cast
from urllib.parse import unquote, urlparse

from pamqp import commands as C
from pamqp import frame as F
from pamqp import header as H
from pamqp.exceptions import UnmarshalingException

EOF_ = "EOF"
FRAME_END = b"\xce"


class RawConnection:
    def __init__(self, url: str, timeout: float = 5.0) -> None:
        u = urlparse(url)
        self.user = unquote(u.username or "guest")
        self.password = unquote(u.password or "guest")
        self.vhost = unquote(u.path[1:]) if u.path and u.path != "/" else "/"
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 5672), timeout=timeout)
        self.timeout = timeout
        self.buf = b""
        self.start: Any = None
        self.tune: Any = None

    # --- I/O -------------------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, channel: int, frame: Any) -> None:
        self.sock.sendall(F.marshal(frame, channel))

    def recv_bytes(self, timeout: float | None = None) -> bytes:
        """Whatever arrives before EOF or the timeout (for replies that are not frames)."""
        end = time.monotonic() + (timeout or self.timeout)
        data = self.buf
        self.buf = b""
        while time.monotonic() < end:
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        return data

    def recv(self, timeout: float | None = None) -> tuple[int, Any] | str:
        """The next frame as (channel, pamqp object), or "EOF"/"TIMEOUT"."""
        end = time.monotonic() + (timeout or self.timeout)
        while True:
            if len(self.buf) >= 7:
                (size,) = struct.unpack(">I", self.buf[3:7])
                if len(self.buf) >= size + 8:
                    try:
                        n, ch, obj = F.unmarshal(self.buf)
                    except UnmarshalingException as e:
                        raise ValueError(f"undecodable frame from server: {e}") from e
                    self.buf = self.buf[n:]
                    return ch, obj
            left = end - time.monotonic()
            if left <= 0:
                return "TIMEOUT"
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return "TIMEOUT"
            except OSError:
                return EOF_
            if not chunk:
                return EOF_
            self.buf += chunk

    def recv_method(self, timeout: float | None = None) -> tuple[int, Any] | str:
        """Skip heartbeats."""
        while True:
            r = self.recv(timeout)
            if isinstance(r, str) or r[1].name != "Heartbeat":
                return r

    # --- handshake ---------------------------------------------------------------------------------
    def handshake(
        self,
        capabilities: dict[str, bool] | None = None,
        channel_max: int = 0,
        frame_max: int | None = None,
        heartbeat: int = 0,
        password: str | None = None,
        vhost: str | None = None,
        open_: bool = True,
    ) -> Any:
        """Up to connection.open-ok; returns the last thing seen (an object, or EOF/TIMEOUT)."""
        caps = {
            "authentication_failure_close": True,
            "basic.nack": True,
            "publisher_confirms": True,
            "consumer_cancel_notify": True,
            "connection.blocked": True,
        }
        if capabilities is not None:
            caps = capabilities
        self.send_raw(H.ProtocolHeader().marshal())
        r = self.recv_method()
        if isinstance(r, str):
            return r
        self.start = r[1]
        pw = self.password if password is None else password
        self.send(
            0,
            C.Connection.StartOk(
                client_properties=cast(Any, {"product": "interop-raw", "capabilities": caps}),
                mechanism="PLAIN",
                response=f"\0{self.user}\0{pw}",
                locale="en_US",
            ),
        )
        r = self.recv_method()
        if isinstance(r, str) or r[1].name != "Connection.Tune":
            return r if isinstance(r, str) else r[1]
        self.tune = r[1]
        self.send(
            0,
            C.Connection.TuneOk(
                channel_max=channel_max or self.tune.channel_max,
                frame_max=frame_max or self.tune.frame_max,
                heartbeat=heartbeat,
            ),
        )
        if not open_:
            return self.tune
        self.send(0, C.Connection.Open(virtual_host=self.vhost if vhost is None else vhost))
        r = self.recv_method()
        return r if isinstance(r, str) else r[1]

    def open_channel(self, ch: int = 1) -> Any:
        self.send(ch, C.Channel.Open())
        return self.recv_method()

    def rpc(self, ch: int, method: Any) -> Any:
        self.send(ch, method)
        r = self.recv_method()
        return r if isinstance(r, str) else r[1]

    def publish(
        self,
        ch: int,
        exchange: str,
        routing_key: str,
        body: bytes,
        props_raw: bytes = b"\0\0",
        frame_max: int | None = None,
        **kw: Any,
    ) -> None:
        """basic.publish with properties given as raw encoded bytes (flags + property list)."""
        fm = frame_max or (self.tune.frame_max if self.tune else 131072)
        out = F.marshal(C.Basic.Publish(exchange=exchange, routing_key=routing_key, **kw), ch)
        hdr = struct.pack(">HHQ", 60, 0, len(body)) + props_raw
        out += struct.pack(">BHI", 2, ch, len(hdr)) + hdr + FRAME_END
        step = fm - 8
        for i in range(0, len(body), step):
            part = body[i : i + step]
            out += struct.pack(">BHI", 3, ch, len(part)) + part + FRAME_END
        self.send_raw(out)

    def recv_raw_frame(self, timeout: float | None = None) -> tuple[int, int, bytes] | str:
        """The next frame undecoded: (type, channel, payload)."""
        end = time.monotonic() + (timeout or self.timeout)
        while True:
            if len(self.buf) >= 7:
                t, ch, size = struct.unpack(">BHI", self.buf[:7])
                if len(self.buf) >= size + 8:
                    payload = self.buf[7 : 7 + size]
                    self.buf = self.buf[size + 8 :]
                    return t, ch, payload
            left = end - time.monotonic()
            if left <= 0:
                return "TIMEOUT"
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return "TIMEOUT"
            except OSError:
                return EOF_
            if not chunk:
                return EOF_
            self.buf += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def close_of(r: Any) -> Any:
    """A connection/channel close (or EOF) as an observation."""
    if isinstance(r, tuple):
        r = r[1]
    if isinstance(r, str):
        return r
    if r.name in ("Connection.Close", "Channel.Close"):
        return {
            "method": r.name,
            "code": r.reply_code,
            "text": r.reply_text.split(" - ", 1)[0],
            "class_id": r.class_id,
            "method_id": r.method_id,
        }
    return {"method": r.name}


def until_close(c: RawConnection, timeout: float = 5.0) -> Any:
    """Read until a Connection.Close/Channel.Close or EOF; returns that close's observation."""
    end = time.monotonic() + timeout
    while True:
        r = c.recv_method(max(0.05, end - time.monotonic()))
        if isinstance(r, str):
            return r
        if r[1].name in ("Connection.Close", "Channel.Close"):
            if r[1].name == "Connection.Close":
                c.send(0, C.Connection.CloseOk())
            return close_of(r)
