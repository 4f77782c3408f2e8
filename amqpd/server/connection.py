"""A thin asyncio Protocol around a Session: bytes in, one coalesced write per loop turn out,
reads paused while the client's output is backed up, heartbeats, the handshake timeout and the lingering
close."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from amqpd.protocol.frames import HEARTBEAT_FRAME
from amqpd.server.fd_budget import FdBudget
from amqpd.server.heartbeats import HeartbeatSweep
from amqpd.server.load import LOOP
from amqpd.session.connection import OPEN, Session
from amqpd.tls import cert_login_name

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker

log = logging.getLogger("amqpd.connection")

CLOSE_GRACE_S = 3.0  # how long to wait for close-ok before dropping the socket


class AMQPServerProtocol(asyncio.Protocol):
    def __init__(
        self,
        broker: Broker,
        registry: set[AMQPServerProtocol],
        fd_budget: FdBudget | None = None,
        heartbeats: HeartbeatSweep | None = None,
    ) -> None:
        """`heartbeats`: the listener's one sweep for every connection's timers (a private one if None)."""
        self.broker = broker
        self.registry = registry
        self.fd_budget = fd_budget
        self.loop = asyncio.get_running_loop()
        self.heartbeats = heartbeats or HeartbeatSweep(time.monotonic, self.loop.call_later)
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self._flush_scheduled = False
        # writelines hands pieces to the socket unjoined; over TLS each piece would be a record of its own
        self._vectored = True
        self._read_holds: set[object] = set()  # why reading is paused: our output backed up, a full queue
        self._closed = False
        self._lingering = False  # closing: our side written and shut, the client's bytes read and dropped
        self.last_recv = time.monotonic()  # read by the heartbeat sweep
        self.last_send = time.monotonic()
        self._timers: list[asyncio.TimerHandle] = []  # the lingering close's

    # -- asyncio callbacks ------------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if self.fd_budget is not None and sock is not None and not self.fd_budget.admit(sock.fileno()):
            self._closed = True
            transport.abort()  # the client sees the connection reset before any AMQP is spoken
            return
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        s = self.broker.settings
        transport.set_write_buffer_limits(high=s.write_buffer_high, low=s.write_buffer_low)
        peer = transport.get_extra_info("peername")
        self.session = Session(self.broker, self, f"{peer[0]}:{peer[1]}" if peer else "?")
        local = transport.get_extra_info("sockname")
        self.session.local = f"{local[0]}:{local[1]}" if local else ""
        if transport.get_extra_info("ssl_object") is not None:
            self.session.tls = True
            self._vectored = False
            # Only a certificate that verified against our CA is here (getpeercert() is empty otherwise).
            self.session.cert_user = cert_login_name(transport.get_extra_info("peercert"), s.tls_cert_login_from)
        self.session.on_open = self._start_heartbeats
        self.registry.add(self)
        log.info("accepting AMQP connection %s", self.session.name, extra={"peer": self.session.peer})
        self.heartbeats.watch_handshake(self, s.handshake_timeout)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        start = time.perf_counter()
        self.last_recv = time.monotonic()
        session = self.session
        assert session is not None
        session.recv_oct += len(data)
        session.recv_cnt += 1
        self.broker.turns.start(self.loop.call_soon)  # this turn read something (flow.py: consumer pace)
        session.feed(data)
        LOOP.busy += time.perf_counter() - start

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.registry.discard(self)
        self.heartbeats.forget(self)
        for t in self._timers:
            t.cancel()
        if self.session is not None:
            self.session.connection_lost()
            self._log_closed(self.session)

    def _log_closed(self, session: Session) -> None:
        """RabbitMQ's "closing AMQP connection" line: who, and why. Closed by the client, an operator or a
        shutdown: info; anything else (an error, a timeout, a client that vanished) a warning."""
        reason = session.close_reason or "client unexpectedly closed TCP connection"
        vhost = session.vhost.name if session.vhost is not None else ""
        duration = time.time() - session.connected_at
        log.log(
            logging.INFO if session.closed_normally else logging.WARNING,
            "closing AMQP connection %s (vhost '%s', user '%s') after %.1f s: %s",
            session.name,
            vhost,
            session.user,
            duration,
            reason,
            extra={
                "peer": session.peer,
                "user": session.user,
                "vhost": vhost,
                "client_name": session.client_name,
                "reason": reason,
                "duration_s": round(duration, 3),
            },
        )

    def pause_writing(self) -> None:
        # The client reads slower than we write: stop delivering to it, and stop reading what it sends
        # (a publisher that does not read its confirms or returns is held back the same way).
        if self.session is not None:
            self.session.writable = False
        self.hold_reading(self)

    def resume_writing(self) -> None:
        self.release_reading(self)
        if self.session is not None:
            self.session.writable_again()

    def hold_reading(self, reason: object) -> None:
        if not self._read_holds and self.transport is not None and not self._closed and not self._lingering:
            self.transport.pause_reading()
        self._read_holds.add(reason)

    def release_reading(self, reason: object) -> None:
        self._read_holds.discard(reason)
        if not self._read_holds and self.transport is not None and not self._closed and not self._lingering:
            self.transport.resume_reading()

    # -- the Session's transport interface ---------------------------------------------------------------

    def request_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self.session is None or self.transport is None or self.transport.is_closing() or self._lingering:
            return
        start = time.perf_counter()
        session = self.session
        if session.in_pieces and self._vectored:  # a large delivery's frames as pieces: one writev
            self.last_send = time.monotonic()
            pieces = session.take_pieces()
            session.send_oct += sum(map(len, pieces))
            session.send_cnt += 1
            self.transport.writelines(pieces)
        else:
            data = session.take_output()
            if data:
                self.last_send = time.monotonic()
                session.send_oct += len(data)
                session.send_cnt += 1
                self.transport.write(data)
        LOOP.busy += time.perf_counter() - start

    def close(self) -> None:
        """Write what is pending, shut our side, and hang up once the client has hung up too, or after
        close_linger seconds. Meanwhile what it still sends (publishes it had queued behind its close) is read
        and dropped: a socket closed with bytes unread answers the client with a reset, and a client writing
        after that gets EPIPE or loses our last frames (the close-ok) before it read them."""
        if self.transport is None or self._closed or self._lingering:
            return
        self.flush()
        self._lingering = True
        self.heartbeats.forget(self)
        for t in self._timers:
            t.cancel()
        self._timers = [self.loop.call_later(self.broker.settings.close_linger, self._abort)]
        if self.transport.can_write_eof():  # TLS cannot half-close: the client's close_notify or EOF ends it
            self.transport.write_eof()
        self.transport.resume_reading()  # eof_received (the client's close) then closes the transport

    # -- timers (the heartbeat sweep calls these) --------------------------------------------------------

    def handshake_expired(self) -> None:
        if self.session is not None and self.session.state < OPEN and self.transport is not None:
            self.session.close_reason = "handshake timeout"
            self.close()

    def _start_heartbeats(self) -> None:
        assert self.session is not None
        self.heartbeats.start_heartbeats(self, self.session.heartbeat)

    def heartbeats_missed(self, interval: int) -> None:
        if self._closed or self.transport is None:
            return
        if self.session is not None:
            self.session.close_reason = f"missed heartbeats from client, timeout: {interval}s"
        self.transport.abort()  # as RabbitMQ: no connection.close, the socket is dropped

    def send_heartbeat(self) -> None:
        if self._closed or self.transport is None or self._lingering:
            return
        self.last_send = time.monotonic()
        if self.session is not None:
            self.session.send_oct += len(HEARTBEAT_FRAME)
            self.session.send_cnt += 1
        self.transport.write(HEARTBEAT_FRAME)

    def shutdown(self) -> None:
        if self.session is not None:
            self.session.close_forced()
            self.flush()
        self.loop.call_later(CLOSE_GRACE_S, self._abort)

    def _abort(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.abort()
