"""One AMQP connection's protocol logic, with no I/O: fed bytes, it answers with bytes.

The server wraps it with a socket (server/connection.py); tests drive it directly. The connection and each
channel are state machines whose tables are in states.py: what a method does in each state, and RabbitMQ's
reply code for one a state does not take.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from amqpd import errors
from amqpd.protocol.constants import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_REJECT,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    PROTOCOL_HEADER,
)
from amqpd.protocol.frames import PUBLISH, PUBLISH_GROUP, PUBLISH_RUN, BrokenStream, FrameReader
from amqpd.protocol.methods import decode_method, encode_method
from amqpd.session import handshake
from amqpd.session.channel import Channel
from amqpd.session.login import check_channel_limits, text
from amqpd.session.publish_groups import PreparedRun, prepare_run
from amqpd.session.states import (
    ANSWER_CLOSE,
    AWAIT_HEADER,
    AWAIT_START_OK,
    CHANNEL_CLOSING,
    CLOSE,
    CLOSED,
    CLOSING,
    HANG_UP,
    IGNORE,
    OPEN,
    OPEN_CHANNEL,
    OPEN_CONNECTION,
    START_OK,
    TUNE_OK,
    UNOPENED,
    UPDATE_SECRET,
    Refusal,
    channel_step,
    connection_step,
)

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.routing.vhost import VirtualHost

log = logging.getLogger("amqpd.session")
channel_log = logging.getLogger("amqpd.channel")

_u32 = struct.Struct(">I")
_ACK_KEY = _u32.pack(BASIC_ACK)
_FRAMES_HELD = "frames held"  # why reading pauses while a channel awaits the store (hold_frames)


class Transport(Protocol):
    """What the session asks of the socket layer."""

    def request_flush(self) -> None: ...
    def close(self) -> None: ...
    def hold_reading(self, reason: object) -> None: ...
    def release_reading(self, reason: object) -> None: ...


class Session:
    def __init__(self, broker: Broker, transport: Transport, peer: str = "") -> None:
        self.broker = broker
        self.settings = broker.settings
        self.transport = transport
        self.peer = peer
        self.state = AWAIT_HEADER
        self.reader = FrameReader(self.settings.frame_max, self.settings.max_message_size)
        self.out: list[bytes | memoryview] = []
        self.in_pieces = False  # `out` holds a large delivery's pieces (send_pieces): flushed unjoined
        self.channels: dict[int, Channel] = {}
        # Channels without a Channel that are not UNOPENED: CHANNEL_CLOSING or CROSSED (states.py).
        self.ending: dict[int, int] = {}
        self.confirm_channels: set[Channel] = set()
        self.user = ""
        self.vhost: VirtualHost | None = None
        self.frame_max = self.settings.frame_max
        self.channel_max = self.settings.channel_max
        self.heartbeat = 0
        self.client_properties: dict[str, Any] = {}
        self.consumer_cancel_notify = False
        self.auth_failure_close = False
        self._header_buf = b""
        self.writable = True  # the transport keeps this current (flow control)
        self.publishes = False  # has published: blocked while a resource alarm is on
        self.blocked_by_alarm = False
        self.on_open: Callable[[], None] | None = None
        self.local = ""  # our end of the socket, "host:port" (the connection's name in the management API)
        self.connected_at = time.time()
        # Octets and reads/writes on the socket (recv_oct, send_oct, recv_cnt, send_cnt in the management API),
        # counted by the socket layer once per read and once per flush.
        self.recv_oct = self.send_oct = self.recv_cnt = self.send_cnt = 0
        # TLS (set by the socket layer): whether this connection is encrypted, and the user its verified
        # client certificate names (EXTERNAL logs in as that user), if any.
        self.tls = False
        self.cert_user: str | None = None
        self._acking: Channel | None = None  # the channel of the acks just read, if any (_resume_acked)
        # Frames read while a channel awaits the store (a basic.get reading its message back): handled, in
        # order, once it has answered (hold_frames)
        self._frame_holds: set[object] = set()
        self._held_frames: list[tuple[int, int, Any]] = []
        self._held_broken: BrokenStream | None = None
        self.unconfirmed = 0  # publishes awaiting their fsync before a confirm, over all channels
        self.held_for_confirms = False
        self.close_reason = ""  # why the connection ended, for its closing log line (server.connection)
        self.closed_normally = False  # by the client's connection.close, or by an operator or shutdown (320)

    # -- output -------------------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if not self.out:
            self.transport.request_flush()
        self.out.append(data)

    def send_pieces(self, pieces: list[bytes | memoryview]) -> None:
        """Frames as pieces in wire order (frames.content_pieces: a large body not joined), written as they
        are by a transport that takes a list of buffers (take_pieces)."""
        if not self.out:
            self.transport.request_flush()
        self.out += pieces
        self.in_pieces = True

    def take_output(self) -> bytes:
        """Everything to write this loop turn, confirms first settled into one ack per channel."""
        self._settle_confirms()
        data = b"".join(self.out)
        self.out.clear()
        self.in_pieces = False
        return data

    def take_pieces(self) -> list[bytes | memoryview]:
        """take_output not joined, for a transport's writelines (uvloop writes the list with one writev, a
        chunk's 600 KB body never copied; asyncio before 3.12 joins them as take_output would)."""
        self._settle_confirms()
        out, self.out = self.out, []
        self.in_pieces = False
        return out

    def _settle_confirms(self) -> None:
        if self.confirm_channels:
            channels, self.confirm_channels = self.confirm_channels, set()
            for ch in channels:
                ch.emit_confirms()

    def confirms_pending(self, channel: Channel) -> None:
        if not self.confirm_channels and not self.out:
            self.transport.request_flush()
        self.confirm_channels.add(channel)

    def send_method(self, channel: int, method: Any) -> None:
        self.send(encode_method(channel, method))

    # -- input --------------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes from the socket. Every error ends up as a close frame, never as an exception."""
        if self.state == AWAIT_HEADER:
            data = self._protocol_header(data)
            if not data:
                return
        if self.state == CLOSED:
            return
        broken: BrokenStream | None = None
        try:
            frames = self.reader.feed(data)
        except BrokenStream as exc:
            frames, broken = exc.frames, exc
        if self._frame_holds:
            self._hold(frames, broken)
            return
        self._handle(frames, broken)

    def _handle(self, frames: list[tuple[int, int, Any]], broken: BrokenStream | None) -> None:
        try:
            for i, (ftype, channel, payload) in enumerate(frames):
                if self._acking is not None and not (
                    ftype == FRAME_METHOD and channel == self._acking.id and payload[:4] == _ACK_KEY
                ):
                    self._resume_acked()
                self._frame(ftype, channel, payload)
                if self.state == CLOSED:
                    return
                if self._frame_holds:  # the rest waits for the channel's answer (hold_frames)
                    self._hold(frames[i + 1 :], broken)
                    broken = None
                    break
            self._resume_acked()
            if broken is not None:
                # Nothing after the damage can be read, close-ok included: close, then hang up.
                self._fail(broken)
                self._close_transport()
        except errors.AMQPError as exc:
            self._resume_acked()  # what the acks before the error made room for goes first, as it would have
            self._fail(exc)
        except Exception as exc:  # a bug of ours must cost one connection, never the broker
            log.exception("internal error on connection from %s", self.peer)
            self._fail(errors.ConnectionError(errors.INTERNAL_ERROR, f"internal error: {type(exc).__name__}"))
        finally:
            self._resume_acked()  # after a close: nothing to hand out, but the channel resumes at once again

    def hold_frames(self, reason: object) -> None:
        """A channel awaits the store before it can answer (basic.get): the frames after the one it is
        handling, on every channel, wait until release_frames, so nothing the client sent later is answered
        first; reading from the socket pauses meanwhile."""
        if not self._frame_holds:
            self.transport.hold_reading(_FRAMES_HELD)
        self._frame_holds.add(reason)

    def release_frames(self, reason: object) -> None:
        """The channel has answered: the frames that waited are handled, in order, then reading resumes."""
        self._frame_holds.discard(reason)
        if self._frame_holds:
            return
        frames, broken = self._held_frames, self._held_broken
        self._held_frames, self._held_broken = [], None
        if self.state != CLOSED and (frames or broken is not None):
            self._handle(frames, broken)
        if not self._frame_holds:
            self.transport.release_reading(_FRAMES_HELD)

    def _hold(self, frames: list[tuple[int, int, Any]], broken: BrokenStream | None) -> None:
        self._held_frames += frames
        if broken is not None:
            self._held_broken = broken

    def _protocol_header(self, data: bytes) -> bytes:
        buf = self._header_buf + data
        verdict = handshake.protocol_header(buf)
        if verdict is None:
            self._header_buf = buf  # too short to tell yet
            return b""
        self._header_buf = b""
        if not verdict:  # anything but AMQP 0-9-1: tell the peer which protocol we speak, and hang up
            self.send(PROTOCOL_HEADER)
            self._close_transport()
            return b""
        self.state = AWAIT_START_OK
        handshake.start(self)
        return buf[8:]

    def _frame(self, ftype: int, channel: int, payload: Any) -> None:
        if ftype == PUBLISH:
            ch = self.channels.get(channel)
            if ch is None or ch.assembler.busy or self.state != OPEN:
                for kind, part in zip((FRAME_METHOD, FRAME_HEADER, FRAME_BODY), payload, strict=False):
                    if kind != FRAME_BODY or part:
                        self._frame(kind, channel, part)
                return
            if not self.publishes:
                self._first_publish()
            try:
                ch.on_whole_publish(*payload)
            except errors.ChannelError as exc:
                self._close_channel(ch, exc)
            return
        if ftype == PUBLISH_RUN:
            self._publish_run(channel, *payload)
            return
        if ftype == PUBLISH_GROUP:
            self._publish_group(channel, *payload)
            return
        if self.state == CLOSING:
            self._frame_while_closing(ftype, channel, payload)
            return
        if ftype == FRAME_METHOD:
            if channel == 0:
                self._connection_method(payload)
            else:
                self._channel_method(channel, payload)
        elif ftype == FRAME_HEADER or ftype == FRAME_BODY:
            if channel == 0:
                raise errors.unexpected_frame(f"content frame (type {ftype}) on channel 0")
            self._content(ftype, channel, payload)
        elif ftype == FRAME_HEARTBEAT:
            if payload:  # RabbitMQ knows only the empty heartbeat: anything else is an unknown frame
                raise errors.frame_error(f"type 8, {len(payload)} octets: unknown_frame")
            if channel != 0:  # the spec says 501; clients see RabbitMQ's 505
                raise errors.unexpected_frame(f"heartbeat frame on channel {channel}")
        else:
            raise errors.frame_error(f"unknown frame type {ftype}")

    def _publish_run(self, channel: int, method: bytes, header: bytes, bodies: list[bytes]) -> None:
        """Publishes that differ only by body: in one pass when the channel can take them so, else one by one
        (parsed once); after a channel error, or if anything is unusual, the rest go frame by frame."""
        ch = self.channels.get(channel)
        if ch is not None and not ch.assembler.busy and self.state == OPEN:
            if not self.publishes:
                self._first_publish()
            if ch.groups.run(method, header, bodies):
                return
            run = prepare_run(method, header, ch.assembler.max_size)
            if run is not None:
                bodies = self._publish_each(ch, run, bodies)
        for body in bodies:
            self._frame(PUBLISH, channel, (method, header, body))
            if self.state == CLOSED:
                return

    def _publish_group(self, channel: int, method: bytes, headers: list[bytes], bodies: list[bytes]) -> None:
        """Publishes to one place, each with its own properties: the leading ones the channel can deliver in one
        pass go so; the others one by one."""
        ch = self.channels.get(channel)
        done = 0
        if ch is not None and not ch.assembler.busy and self.state == OPEN:
            if not self.publishes:
                self._first_publish()
            done = ch.groups.group(method, headers, bodies)
        for i in range(done, len(bodies)):
            self._frame(PUBLISH, channel, (method, headers[i], bodies[i]))
            if self.state == CLOSED:
                return

    def _publish_each(self, ch: Channel, run: PreparedRun, bodies: list[bytes]) -> list[bytes]:
        """Publish each body as on_whole_publish would; what is left after a channel error."""
        publish, message, mandatory = ch.publish, run.message, run.mandatory
        for i, body in enumerate(bodies):
            try:
                publish(message(body), mandatory)
            except errors.ChannelError as exc:
                self._close_channel(ch, exc)
                return bodies[i + 1 :]
        return []

    # -- connection class ---------------------------------------------------------------------------------

    def _connection_method(self, payload: bytes) -> None:
        self._connection_step(decode_method(payload, self.settings.max_table_depth))

    def _connection_step(self, method: Any) -> None:
        """A method on channel 0, as the connection's table (states.py) says for the current state."""
        state = self.state
        step = connection_step(state, type(method))
        if isinstance(step, Refusal):
            raise step.error(method)
        _CONNECTION_ACTIONS[step.action](self, method)
        if self.state == state:  # unless the action closed the connection
            self.state = step.after

    def _client_close(self, m: commands.Connection.Close) -> None:
        self.close_reason = f"client closed it ({m.reply_code} {m.reply_text})"
        self.closed_normally = True
        self.send_method(0, commands.Connection.CloseOk())
        self._teardown()
        self._close_transport()

    def hang_up(self, m: Any = None) -> None:
        self._close_transport()

    def _answer_close(self, m: commands.Connection.Close) -> None:
        """The client's close after ours: close-ok, and hang up."""
        self.send_method(0, commands.Connection.CloseOk())
        self._close_transport()

    def _ignore(self, m: Any) -> None:
        """Blocked and unblocked from a client, and anything but close or close-ok after our close."""

    @property
    def client_name(self) -> str:
        """The connection_name client property (RabbitMQ's client-provided name), or ""."""
        return text(self.client_properties.get("connection_name", ""))

    @property
    def name(self) -> str:
        """The connection as RabbitMQ's log names it: "peer -> local", and " - client name" when given."""
        base = f"{self.peer} -> {self.local}" if self.local else self.peer
        return f"{base} - {self.client_name}" if self.client_name else base

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.client_properties.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    # -- channels -----------------------------------------------------------------------------------------

    def _channel_method(self, channel: int, payload: bytes) -> None:
        if self.state != OPEN:
            raise errors.unexpected_frame("expected method frame on channel 0 before connection.open-ok")
        ch = self.channels.get(channel)
        if ch is None:
            self._method_on_unopened(channel, payload)
            return
        key = _u32.unpack_from(payload)[0] if len(payload) >= 4 else 0
        if ch.assembler.busy:
            ch.assembler.expect_method()
        try:
            if key == BASIC_PUBLISH:
                if not self.publishes:
                    self._first_publish()
                ch.on_publish(payload)
            elif key == BASIC_ACK:
                if self._acking is None:
                    self._acking = ch
                    ch.resume_after_acks = False
                ch.on_ack(payload)
            elif key == BASIC_NACK:
                ch.on_nack(payload)
            elif key == BASIC_REJECT:
                ch.on_reject(payload)
            else:
                self._channel_slow_path(ch, payload)
        except errors.ChannelError as exc:
            self._close_channel(ch, exc)

    def _resume_acked(self) -> None:
        """The last of consecutive acks on one channel in a read was taken: its consumers' queues hand out what
        the acks made room for, once for them all rather than once per ack (a consumer that multiple-acks
        every few messages sends several in one write)."""
        ch, self._acking = self._acking, None
        if ch is None:
            return
        resume, ch.resume_after_acks = ch.resume_after_acks, None
        if resume and not ch.closing:
            ch.resume_deliveries()

    def _channel_slow_path(self, ch: Channel, payload: bytes) -> None:
        method = decode_method(payload, self.settings.max_table_depth)
        if ch.handle(method) == CLOSE:  # the channel's table (states.py) took it, or gave the session's part
            self._forget_channel(ch)
            ch.shutdown()
            self.send_method(ch.id, commands.Channel.CloseOk())

    def _method_on_unopened(self, channel: int, payload: bytes) -> None:
        """A method on a channel with no Channel: not opened yet, or closing (states.py)."""
        method = decode_method(payload, self.settings.max_table_depth)
        step = channel_step(self.ending.pop(channel, UNOPENED), type(method))
        if isinstance(step, Refusal):
            raise step.error(method)
        if step.action == OPEN_CHANNEL:
            self._open_channel(channel, step.after)
            return
        if step.action == ANSWER_CLOSE:
            # The client's close crossed ours: answer it, and the channel is closed; the close-ok it still owes
            # ours may follow and is ignored (unless it opens the channel again first).
            self.send_method(channel, commands.Channel.CloseOk())
        if step.after != UNOPENED:
            self.ending[channel] = step.after

    def _open_channel(self, channel: int, state: int) -> None:
        check_channel_limits(self.broker, self.user, len(self.channels), self.channel_max)
        assert self.vhost is not None
        ch = self.channels[channel] = Channel(self, channel, self.vhost, self.broker)
        self.broker.connections.channel_opened(self)  # the user's channel count (its max-channels)
        ch.enter(state)
        self.send_method(channel, commands.Channel.OpenOk())

    def _content(self, ftype: int, channel: int, payload: bytes) -> None:
        ch = self.channels.get(channel)
        if ch is None:
            if channel in self.ending:
                return  # the rest of a message published before our channel.close
            raise errors.unexpected_frame("expected method frame, got non method frame instead")
        try:
            if ftype == FRAME_HEADER:
                ch.on_header(payload)
            else:
                ch.on_body(payload)
        except errors.ChannelError as exc:
            self._close_channel(ch, exc)

    def close_channel(self, channel: Channel, exc: errors.AMQPError) -> None:
        """A channel error found later than the method that caused it (a transaction whose publishes the
        store could not write): closed as a method's error would close it, if it is still open."""
        if self.channels.get(channel.id) is channel:
            self._close_channel(channel, exc)

    def _close_channel(self, ch: Channel, exc: errors.AMQPError) -> None:
        """A channel error: channel.close to the client, the channel's state cleaned up at once."""
        channel_log.warning(
            "channel error on connection %s, channel %d (vhost '%s', user '%s'): %s %s",
            self.name,
            ch.id,
            self.vhost.name if self.vhost is not None else "",
            self.user,
            exc.code,
            exc.reply_text,
            extra={"peer": self.peer, "user": self.user, "channel": ch.id, "reply_code": exc.code},
        )
        self._forget_channel(ch)
        self.ending[ch.id] = CHANNEL_CLOSING
        ch.shutdown()
        self.send_method(ch.id, commands.Channel.Close(exc.code, exc.wire_text, exc.class_id, exc.method_id))

    def _forget_channel(self, ch: Channel) -> None:
        if self.channels.pop(ch.id, None) is not None:
            self.broker.connections.channel_closed(self)

    # -- closing ------------------------------------------------------------------------------------------

    def _fail(self, exc: errors.AMQPError) -> None:
        """A connection error: connection.close with the reason, then wait for close-ok."""
        self.close_reason = self.close_reason or f"{exc.code} {exc.reply_text}"
        if self.state in (CLOSING, CLOSED):
            return
        if self.state == AWAIT_START_OK and exc.code != errors.ACCESS_REFUSED:
            # Before start-ok the client cannot take a close frame it did not negotiate; drop it.
            self._close_transport()
            return
        self._teardown()
        self.state = CLOSING
        self.send_method(0, commands.Connection.Close(exc.code, exc.wire_text, exc.class_id, exc.method_id))

    def close_forced(self, text: str = "broker forced connection closure with reason 'shutdown'") -> None:
        """Server shutdown: 320 CONNECTION_FORCED."""
        self.closed_normally = True
        if self.state == OPEN:
            self._fail(errors.ConnectionError(errors.CONNECTION_FORCED, text))
        elif self.state not in (CLOSING, CLOSED):
            self._close_transport()

    def _frame_while_closing(self, ftype: int, channel: int, payload: bytes) -> None:
        """After our connection.close only close and close-ok count (states.py); nothing else is even read."""
        if ftype != FRAME_METHOD or channel != 0:
            return
        try:
            method = decode_method(payload, self.settings.max_table_depth)
        except errors.AMQPError:
            return
        self._connection_step(method)

    def _close_transport(self) -> None:
        if self.state != CLOSED:
            self.state = CLOSED
            self.transport.close()

    def _teardown(self) -> None:
        """Channels close (unacked messages go back), exclusive queues go with the connection."""
        channels = list(self.channels.values())
        self.channels.clear()
        for ch in channels:
            ch.shutdown()
        if self.vhost is not None:
            self.vhost.drop_exclusive(self)
        self.broker.connections.discard(self)

    def connection_lost(self) -> None:
        self._teardown()
        self.state = CLOSED
        self.reader.discard()  # a body half read may be large: not kept for as long as this object is

    # -- flow control and heartbeats ------------------------------------------------------------------------

    def _first_publish(self) -> None:
        self.publishes = True
        if self.broker.alarms:
            self.apply_alarms()
        if self.broker.store_pressure:
            self.hold_reading_for("store", True)

    def hold_reading_for(self, reason: str, hold: bool) -> None:
        if hold:
            self.transport.hold_reading(reason)
        else:
            self.transport.release_reading(reason)

    def apply_alarms(self) -> None:
        """Block a publishing connection while any resource alarm is on; unblock when all clear."""
        block = bool(self.broker.alarms) and self.publishes and self.state == OPEN
        if block == self.blocked_by_alarm:
            return
        self.blocked_by_alarm = block
        caps = self.capabilities
        if block:
            if caps.get("connection.blocked"):
                reason = "low on " + " and ".join(sorted(self.broker.alarms))
                self.send_method(0, commands.Connection.Blocked(reason))
            self.transport.hold_reading("alarm")
        else:
            if caps.get("connection.blocked"):
                self.send_method(0, commands.Connection.Unblocked())
            self.transport.release_reading("alarm")

    def unconfirmed_changed(self, delta: int) -> None:
        """A client may have max_unconfirmed_publishes confirms outstanding: beyond that reading from it
        pauses (as RabbitMQ's credit flow would) until half of them are confirmed; a slow disk then costs
        the publisher time, not the broker memory."""
        self.unconfirmed += delta
        limit = self.settings.max_unconfirmed_publishes
        if not limit:
            return
        if not self.held_for_confirms and self.unconfirmed >= limit:
            self.held_for_confirms = True
            self.transport.hold_reading("unconfirmed")
        elif self.held_for_confirms and self.unconfirmed <= limit // 2:
            self.held_for_confirms = False
            self.transport.release_reading("unconfirmed")

    def check_ack_timeout(self, ch: Channel, now: float, timeout_ms: int) -> bool:
        """RabbitMQ's consumer_timeout for one channel of this connection: closed with 406 once its oldest
        unacked delivery is older than timeout_ms (0: never). False once the channel needs no more checks
        (closed, or nothing unacked: its next delivery puts it back on the watch, Outstanding.on_first)."""
        if self.channels.get(ch.id) is not ch or not ch.unacked:
            return False
        if not timeout_ms or not ch.overdue_ack(now, timeout_ms / 1000):
            return True
        self._close_channel(
            ch,
            errors.precondition_failed(
                f"delivery acknowledgement on channel {ch.id} timed out. Timeout value used: {timeout_ms} ms. "
                "This timeout value can be configured, see consumers doc guide to learn more"
            ),
        )
        return False

    def throttle(self, queue: Any) -> None:
        """A queue we publish to has a backlog its consumers are not keeping up with: stop reading
        from this client until it drains (RabbitMQ's credit flow does the same)."""
        if self not in queue.throttled:
            queue.throttled.add(self)
            self.transport.hold_reading(queue)

    def unthrottle(self, queue: Any) -> None:
        self.transport.release_reading(queue)

    def writable_again(self) -> None:
        """The socket drained: consumers on this connection may take messages again."""
        self.writable = True
        for ch in list(self.channels.values()):
            ch.resume_deliveries()


_CONNECTION_ACTIONS: dict[str, Callable[[Session, Any], None]] = {
    START_OK: handshake.start_ok,
    TUNE_OK: handshake.tune_ok,
    OPEN_CONNECTION: handshake.open_vhost,
    CLOSE: Session._client_close,
    HANG_UP: Session.hang_up,
    ANSWER_CLOSE: Session._answer_close,
    IGNORE: Session._ignore,
    UPDATE_SECRET: handshake.update_secret,
}
