"""Frame boundaries: split a byte stream into frames, and frame payloads for writing.

pamqp cannot tell "need more bytes" from "malformed" and does not check frame_max, so the
framing is ours; pamqp only ever sees one complete method payload.
"""

from __future__ import annotations

import struct
from typing import Any

from amqpd import errors
from amqpd.protocol.constants import FRAME_BODY, FRAME_END, FRAME_END_BYTE, FRAME_HEADER, FRAME_METHOD

FRAME_HEADER_STRUCT = struct.Struct(">BHI")
_pack_header = FRAME_HEADER_STRUCT.pack
_unpack_header = FRAME_HEADER_STRUCT.unpack_from

Frame = tuple[int, int, bytes]  # (frame type, channel, payload)


PUBLISH = -1  # pseudo frame type: a whole basic.publish, its header and its single body frame, as one item
# Pseudo frame type: back-to-back whole publishes on one channel whose method frame, header frame and body
# frame header are byte-identical (same destination, properties and body size): (method, header, [bodies]).
PUBLISH_RUN = -2
# Pseudo frame type: back-to-back whole publishes on one channel with the same method frame (destination and
# flags) but each its own properties: (method, [headers], [bodies]), so that the broker can route them once.
PUBLISH_GROUP = -3
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_BASIC_PUBLISH = (60 << 16) | 40
# A body at least this large is read into its own buffer frame by frame (FrameReader's body sink): smaller ones
# are cheaper to slice out of the read buffer and join.
SINK_MIN = 128 * 1024


class BrokenStream(errors.ConnectionError):
    """The byte stream lost its frame boundaries. `frames` are the complete ones before the damage:
    they still take effect (RabbitMQ acts on them) before the connection is closed."""

    def __init__(self, cause: errors.AMQPError, frames: list[tuple[int, int, Any]]) -> None:
        super().__init__(cause.code, cause.text, cause.class_id, cause.method_id)
        self.frames = frames


class BodyPart:
    """A body frame's payload that the reader has already put in place: the next `size` bytes of `body`, the
    whole message body being filled (so that assembling the message copies nothing)."""

    __slots__ = ("body", "size")

    def __init__(self, body: bytearray, size: int) -> None:
        self.body = body
        self.size = size

    def __len__(self) -> int:
        return self.size


class FrameReader:
    """Accepts arbitrary chunks (split or coalesced) and returns the complete frames in them.

    A basic.publish whose header and body frames are all buffered comes out as one PUBLISH item
    with the payload triple: the per-message path then takes one step instead of three (the
    frames are checked exactly as they would be one by one). Publishes that repeat the one before
    them byte for byte up to the body join it in one PUBLISH_RUN item, and publishes to the same
    place with their own properties in one PUBLISH_GROUP item, so that the broker can route them
    once.

    A content header that announces a body of SINK_MIN bytes or more (and at most `max_body`) makes the reader
    copy that channel's body frames, as they arrive, straight from the chunks fed into one buffer of the body's
    size: each body byte is copied once, and the body frames come out as BodyPart items (the frames are checked
    exactly as before, and anything unusual on that channel goes the ordinary way, which reports it)."""

    __slots__ = (
        "_buf",
        "_need",
        "frame_max",
        "max_body",
        "_sink",
        "_sink_channel",
        "_sink_left",
        "_frame_left",
        "_frame_size",
    )

    def __init__(self, frame_max: int, max_body: int = 1 << 63) -> None:
        self._buf = bytearray()
        self._need = 0  # bytes the buffer must hold before the next frame can be complete
        self.frame_max = frame_max
        self.max_body = max_body
        self._sink: bytearray | None = None  # the body being filled, if any
        self._sink_channel = -1
        self._sink_left = 0  # bytes of it still to come
        self._frame_left = -1  # payload bytes of the body frame being filled still to come; 0: its end byte
        self._frame_size = 0  # that frame's payload size

    def feed(self, data: bytes) -> list[tuple[int, int, Any]]:
        frames: list[tuple[int, int, Any]] = []
        rest: bytes | memoryview = data
        try:
            if self._frame_left >= 0:
                rest = self._fill(rest, frames)
            while rest:
                rest = self._parse(rest, frames)
        except errors.AMQPError as exc:
            self._buf.clear()
            self._need = 0
            self._drop_sink()
            raise BrokenStream(exc, frames) from None
        return frames

    def _parse(self, data: bytes | memoryview, frames: list[tuple[int, int, Any]]) -> bytes | memoryview:
        """The frames in what is held and `data`; what follows a sink's body frames, to be parsed in turn."""
        held = self._buf
        held += data
        n = len(held)
        if n < self._need:  # the rest of a large frame: don't copy the buffer once per read
            return b""
        # One copy of the buffer per read: a slice of bytes is then one object, where a bytearray slice
        # made into bytes is two.
        buf = bytes(held)
        pos = need = 0
        while n - pos >= 7:
            ftype, channel, size = _unpack_header(buf, pos)
            if channel == self._sink_channel and self._sink_takes(ftype, size):
                held.clear()
                self._need = 0
                return self._fill(memoryview(buf)[pos:], frames)
            end = self._frame_end(buf, pos, size, n)
            if end < 0:
                need = size + 8
                break
            if ftype == FRAME_METHOD and size >= 4 and _u32.unpack_from(buf, pos + 7)[0] == _BASIC_PUBLISH:
                after = self._whole_publish(buf, channel, pos, end, n, frames)
                if after:
                    pos = after
                    continue
            payload = buf[pos + 7 : end]
            if ftype == FRAME_HEADER:
                self._content_header(channel, payload)
            frames.append((ftype, channel, payload))
            pos = end + 1
        if pos:
            del held[:pos]
        self._need = need
        return b""

    # -- the body sink --------------------------------------------------------------------------------------

    def _content_header(self, channel: int, payload: bytes) -> None:
        """A content header: a large body announced in it is filled in a buffer of its own from now on."""
        if channel == self._sink_channel:
            self._drop_sink()  # the body before was not finished: the assembler reports it
        if len(payload) >= 12 and self._sink is None:  # one body at a time: another channel's goes as before
            body_size = _u64.unpack_from(payload, 4)[0]
            if SINK_MIN <= body_size <= self.max_body:
                # Grown as the bytes arrive, never ahead of them (a header alone costs no memory); a large
                # bytearray grows in place (glibc's realloc remaps its pages).
                self._sink, self._sink_channel, self._sink_left = bytearray(), channel, body_size

    def _sink_takes(self, ftype: int, size: int) -> bool:
        """Whether a frame on the sink's channel is the next part of its body; any other frame there ends the
        sink (the frame goes the ordinary way, and the assembler or the frame checks report what is wrong)."""
        if ftype == FRAME_BODY and size <= self._sink_left and not (self.frame_max and size > self.frame_max):
            return True
        self._drop_sink()
        return False

    def _fill(self, data: bytes | memoryview, frames: list[tuple[int, int, Any]]) -> bytes | memoryview:
        """Body frames of the sink's channel from the start of `data` (the rest of one begun before, or whole
        ones), copied into the sink; what follows them is returned."""
        view = memoryview(data)
        n = len(view)
        pos = 0
        while True:
            left = self._frame_left
            if left < 0:  # at a frame's start: take it if it is the sink's next body frame
                if n - pos < 7:
                    break
                ftype, channel, size = _unpack_header(view, pos)
                if channel != self._sink_channel or not self._sink_takes(ftype, size):
                    break
                self._frame_left = self._frame_size = left = size
                pos += 7
            take = min(left, n - pos)
            if take:
                sink = self._sink
                assert sink is not None
                sink += view[pos : pos + take]
                self._sink_left -= take
                pos += take
                self._frame_left = left = left - take
            if left or pos == n:
                return b""  # the frame (or its end byte) continues in the next chunk
            if view[pos] != FRAME_END:
                raise errors.frame_error(f"invalid frame end byte {view[pos]:#x}")
            pos += 1
            self._frame_left = -1
            sink = self._sink
            assert sink is not None
            frames.append((FRAME_BODY, self._sink_channel, BodyPart(sink, self._frame_size)))
            if not self._sink_left:
                self._drop_sink()
                break
        return view[pos:] if pos < n else b""

    def discard(self) -> None:
        """The connection is gone: let go of what was read of frames not complete, a large body's included."""
        self._buf = bytearray()
        self._need = 0
        self._drop_sink()

    def _drop_sink(self) -> None:
        self._sink, self._sink_channel, self._sink_left, self._frame_left = None, -1, 0, -1

    def _frame_end(self, buf: bytes, pos: int, size: int, n: int) -> int:
        """Index of the frame-end byte, -1 when the frame is not all here; errors from the header alone."""
        # RabbitMQ allows a payload of up to frame_max (it adds the 8 bytes of framing as slack).
        if self.frame_max and size > self.frame_max:
            raise errors.frame_error(f"frame size {size + 8} exceeds frame_max {self.frame_max}")
        end = pos + 7 + size
        if end >= n:
            return -1
        if buf[end] != FRAME_END:
            raise errors.frame_error(f"invalid frame end byte {buf[end]:#x}")
        return end

    def _whole_publish(self, buf: bytes, channel: int, pos: int, end: int, n: int, frames: list) -> int:
        """Take publish + header + one body frame as one item; 0 when they are not all buffered
        (or anything is unusual: the frame-by-frame path then reports it)."""
        h = end + 1
        if n - h < 7:
            return 0
        htype, hchannel, hsize = _unpack_header(buf, h)
        hend = h + 7 + hsize
        if htype != FRAME_HEADER or hchannel != channel or hsize < 14 or hend >= n or buf[hend] != FRAME_END:
            return 0
        if self.frame_max and hsize > self.frame_max:
            return 0
        body_size = _u64.unpack_from(buf, h + 11)[0]
        if body_size == 0:
            frames.append((PUBLISH, channel, (buf[pos + 7 : end], buf[h + 7 : hend], b"")))
            return hend + 1
        b = hend + 1
        if n - b < 7:
            return 0
        btype, bchannel, bsize = _unpack_header(buf, b)
        bend = b + 7 + bsize
        if btype != FRAME_BODY or bchannel != channel or bsize != body_size or bend >= n or buf[bend] != FRAME_END:
            return 0
        if self.frame_max and bsize > self.frame_max:
            return 0
        method, header, body = buf[pos + 7 : end], buf[h + 7 : hend], buf[b + 7 : bend]
        after = bend + 1
        unit = after - pos
        # Cheap test first: the next publish's header and method payloads, where they would be if it repeats
        # this one (publishers with per-message properties never do: no prefix slice for them).
        if n - after < unit or not (buf.startswith(header, after + h - pos + 7) and buf.startswith(method, after + 7)):
            _add_publish(frames, channel, method, header, body)
            return self._group_rest(buf, frames, buf[pos:h], channel, after, n)
        bodies, after = _repeats(buf, buf[pos : b + 7], unit, after, n)
        if bodies:
            bodies.insert(0, body)
            frames.append((PUBLISH_RUN, channel, (method, header, bodies)))
        else:
            _add_publish(frames, channel, method, header, body)
        return after

    def _group_rest(self, buf: bytes, frames: list, mframe: bytes, channel: int, pos: int, n: int) -> int:
        """The whole publishes from pos on with this method frame, joined to the last item (the publish before
        them, just added) as _add_publish would join them one by one, in one loop; where the first one that is
        not such a publish, or that would start a run, begins (the frame loop reads it, and reports it if it is
        broken). An application publishing to one place with properties of its own comes here."""
        m = len(mframe)
        frame_max = self.frame_max
        startswith = buf.startswith
        headers: list[bytes] | None = None
        bodies: list[bytes] = []
        while n - pos > m + 7 and startswith(mframe, pos):
            h = pos + m
            htype, hchannel, hsize = _unpack_header(buf, h)
            hend = h + 7 + hsize
            if htype != FRAME_HEADER or hchannel != channel or hsize < 14 or hend >= n or buf[hend] != FRAME_END:
                break
            body_size = _u64.unpack_from(buf, h + 11)[0]
            b = hend + 1
            if (frame_max and hsize > frame_max) or not body_size or n - b < 7:
                break
            btype, bchannel, bsize = _unpack_header(buf, b)
            bend = b + 7 + bsize
            if btype != FRAME_BODY or bchannel != channel or bsize != body_size or bend >= n or buf[bend] != FRAME_END:
                break
            if frame_max and bsize > frame_max:
                break
            header = buf[h + 7 : hend]
            after = bend + 1
            if n - after >= after - pos and startswith(header, after + m + 7) and startswith(mframe, after):
                break  # the next one repeats this one: a run may start here
            if headers is None:
                ftype, _channel, last = frames[-1]
                if ftype == PUBLISH:
                    headers, bodies = [last[1]], [last[2]]
                    frames[-1] = (PUBLISH_GROUP, channel, (last[0], headers, bodies))
                else:
                    headers, bodies = last[1], last[2]
            headers.append(header)
            bodies.append(buf[b + 7 : bend])
            pos = after
        return pos

    @property
    def buffered(self) -> int:
        """Bytes of frames not complete yet (in a large body's buffer, or held to be parsed)."""
        partial = self._frame_size - self._frame_left if self._frame_left >= 0 else 0
        return len(self._buf) + partial


def _add_publish(frames: list, channel: int, method: bytes, header: bytes, body: bytes) -> None:
    """A whole publish with a body, joined to the item before it when that was one or more publishes to the
    same place on the same channel (equal method payloads): a PUBLISH_GROUP."""
    if frames:
        ftype, last_channel, last = frames[-1]
        if last_channel == channel and (ftype == PUBLISH_GROUP or (ftype == PUBLISH and last[2])) and last[0] == method:
            if ftype == PUBLISH_GROUP:
                last[1].append(header)
                last[2].append(body)
            else:
                frames[-1] = (PUBLISH_GROUP, channel, (method, [last[1], header], [last[2], body]))
            return
    frames.append((PUBLISH, channel, (method, header, body)))


def _repeats(buf: bytes, prefix: bytes, unit: int, pos: int, n: int) -> tuple[list[bytes], int]:
    """Bodies of the whole publishes from pos on whose frames up to the body are `prefix` (so every check
    made on the first holds for them too), and where they end. Anything else ends the run; the frame
    loop then reads it (and reports it, if it is broken)."""
    bodies: list[bytes] = []
    skip = len(prefix)
    startswith = buf.startswith
    while n - pos >= unit and startswith(prefix, pos) and buf[pos + unit - 1] == FRAME_END:
        bodies.append(buf[pos + skip : pos + unit - 1])
        pos += unit
    return bodies, pos


def frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return _pack_header(ftype, channel, len(payload)) + payload + FRAME_END_BYTE


def method_frame(channel: int, payload: bytes) -> bytes:
    return _pack_header(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def content_frames(channel: int, header_payload: bytes, body: bytes, frame_max: int, before: bytes = b"") -> bytes:
    """The header frame and the body split into frames no larger than frame_max, after `before` (a method
    frame: joined in the same step, not copied once more)."""
    return b"".join(content_pieces(channel, header_payload, [body], len(body), frame_max, before))


def content_pieces(
    channel: int, header_payload: bytes, body: list[bytes], size: int, frame_max: int, before: bytes = b""
) -> list[bytes | memoryview]:
    """content_frames of a body held as parts (`size` bytes in all), not joined: frame headers, end bytes
    and the parts or views of them, in wire order. A transport that writes a list of buffers at once
    (uvloop's writelines) sends a large body without the copies a join makes."""
    pieces: list[bytes | memoryview] = [
        before,
        _pack_header(FRAME_HEADER, channel, len(header_payload)),
        header_payload,
        FRAME_END_BYTE,
    ]
    room = frame_max - 8
    left = size  # body bytes not yet in a frame
    free = 0  # room left in the body frame being filled
    for part in body:
        n = len(part)
        at = 0
        view = memoryview(part) if n > (free or room) else part  # slices of it: views, not copies
        while at < n:
            if not free:
                free = min(room, left)
                pieces.append(_pack_header(FRAME_BODY, channel, free))
            take = min(free, n - at)
            pieces.append(part if take == n else view[at : at + take])
            at += take
            free -= take
            left -= take
            if not free:
                pieces.append(FRAME_END_BYTE)
    return pieces


HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
