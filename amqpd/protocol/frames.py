"""Frame boundaries: split a byte stream into frames, and frame payloads for writing.

pamqp cannot tell "need more bytes" from "malformed" and does not check frame_max, so the
framing is ours; pamqp only ever sees one complete method payload.
"""

from __future__ import annotations

import struct

from amqpd import errors
from amqpd.protocol.constants import FRAME_BODY, FRAME_END, FRAME_END_BYTE, FRAME_HEADER, FRAME_METHOD

FRAME_HEADER_STRUCT = struct.Struct(">BHI")
_pack_header = FRAME_HEADER_STRUCT.pack
_unpack_header = FRAME_HEADER_STRUCT.unpack_from

Frame = tuple[int, int, bytes]  # (frame type, channel, payload)


class FrameReader:
    """Accepts arbitrary chunks (split or coalesced) and returns the complete frames in them."""

    __slots__ = ("_buf", "frame_max")

    def __init__(self, frame_max: int) -> None:
        self._buf = bytearray()
        self.frame_max = frame_max

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos, n = 0, len(buf)
        frame_max = self.frame_max
        while n - pos >= 7:
            ftype, channel, size = _unpack_header(buf, pos)
            # RabbitMQ allows a payload of up to frame_max (it adds the 8 bytes of framing as slack).
            if frame_max and size > frame_max:
                raise errors.frame_error(f"frame size {size + 8} exceeds frame_max {frame_max}")
            end = pos + 7 + size
            if end >= n:
                break
            if buf[end] != FRAME_END:
                raise errors.frame_error(f"invalid frame end byte {buf[end]:#x}")
            frames.append((ftype, channel, bytes(buf[pos + 7 : end])))
            pos = end + 1
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return _pack_header(ftype, channel, len(payload)) + payload + FRAME_END_BYTE


def method_frame(channel: int, payload: bytes) -> bytes:
    return _pack_header(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def content_frames(channel: int, header_payload: bytes, body: bytes, frame_max: int) -> bytes:
    """The header frame and the body split into frames no larger than frame_max."""
    parts = [_pack_header(FRAME_HEADER, channel, len(header_payload)), header_payload, FRAME_END_BYTE]
    chunk = frame_max - 8
    if len(body) <= chunk:
        if body:
            parts += (_pack_header(FRAME_BODY, channel, len(body)), body, FRAME_END_BYTE)
    else:
        view = memoryview(body)
        for start in range(0, len(body), chunk):
            piece = view[start : start + chunk]
            parts += (_pack_header(FRAME_BODY, channel, len(piece)), piece, FRAME_END_BYTE)
    return b"".join(parts)


HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
