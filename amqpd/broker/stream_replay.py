"""A stream's replay in batches, straight from the stored record bytes to the frames a consumer receives.

The per-message path (StreamQueue._feed's filtered branch) decodes each record into a MessageRecord, wraps it
in a StreamDelivery and a StreamEntry and encodes it with encode_delivery: four objects and a dozen calls per
message, the replay's whole cost. Here a run of records is read as raw payloads (their frame checks done by
the store), and each payload's fields are sliced out of it once, into one output buffer: basic.deliver, the
content header with x-stream-offset (and x-stream-timestamp) spliced into its headers table exactly as
`with_offset_header` does, and the body frames (split at frame_max). The deliveries are one tag run in the
channel's StreamUnacked, not an entry per message.

Record layout (store/FORMAT.md): u64 message id | u64 timestamp_ms | u8 flags | u8 exchange length |
u8 routing key length | u16 queue count | u32 properties length | [u64 expires] | u32 queue ids |
exchange | routing key | properties (the content header payload, verbatim) | body.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, cast

from amqpd import errors
from amqpd.broker.stream_unacked import Offsets, TagRun, stream_unacked
from amqpd.protocol.constants import FLAG_CONTENT_ENCODING, FLAG_CONTENT_TYPE, FLAG_HEADERS
from amqpd.protocol.fastpath import shortstr

if TYPE_CHECKING:
    from amqpd.broker.stream import Cursor, StreamQueue

_RECORD = struct.Struct("<8xQBBBHI")  # timestamp, flags, exchange length, routing key length, queues, props
_RECORD_SIZE = 25
_EXPIRES_FLAG = 1
_DELIVER_PREFIX = b"\x00\x3c\x00\x3c"
_FRAME_HEAD = struct.Struct(">BHI")
_BODY_HEAD = struct.Struct(">BBHI")  # the header frame's end byte, then the body frame's head
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_OFFSET_NAME = shortstr("x-stream-offset") + b"l"
_TIMESTAMP_NAME = shortstr("x-stream-timestamp") + b"l"
_OFFSET_FIELD = struct.Struct(f">{len(_OFFSET_NAME)}sq")
_BOTH_FIELDS = struct.Struct(f">{len(_OFFSET_NAME)}sq{len(_TIMESTAMP_NAME)}sq")


def replay(stream: StreamQueue, cursor: Cursor, start: int, limit: int) -> int:
    """Deliver up to `limit` records from `start` (or the first kept) to the cursor's consumer: one encoding
    pass, one write, one tag run. A record damaged on disk is skipped, its offset unused. Returns the offset
    to go on from."""
    start, payloads = stream.log.read_raw(start, limit)
    next_offset = start + len(payloads)
    consumer = cursor.consumer
    channel = consumer.channel
    first_tag = channel.last_tag + 1
    data, offsets = encode_replay(
        channel.id, consumer.ctag, first_tag, start, payloads, cursor.with_time, channel.conn.frame_max
    )
    if not offsets:
        return next_offset
    channel.last_tag = first_tag + len(offsets) - 1
    stream.delivered += len(offsets)
    cursor.outstanding.add_offsets(offsets)
    stream_unacked(channel).add(TagRun(first_tag, offsets, stream, consumer, cursor, channel.broker.clock))
    channel.conn.send(data)
    return next_offset


def encode_replay(
    channel: int,
    ctag: bytes,
    first_tag: int,
    start: int,
    payloads: list[bytes | None],
    with_time: bool,
    frame_max: int,
) -> tuple[bytes, Offsets]:
    """basic.deliver + content header + body frames for each record payload (offsets from start on; None:
    a damaged record, skipped), delivery tags from first_tag on, not redelivered: what encode_delivery
    would send for each record's StreamDelivery. Also the offsets delivered, in tag order."""
    offsets: Offsets = range(start, start + len(payloads))
    if None in payloads:
        offsets = [offset for offset, p in zip(offsets, payloads, strict=True) if p is not None]
        present = [p for p in payloads if p is not None]
    else:
        present = cast(list[bytes], payloads)
    parts: list[bytes | memoryview] = []
    chunk = frame_max - 8
    names = b""  # the exchange and routing key bytes the frames below were built for
    names_at = names_end = -1
    head = mid = b""
    tag_mid = _FRAME_HEAD  # replaced with the route's own before its first use
    unpack_record = _RECORD.unpack_from
    unpack_u32 = _U32.unpack_from
    pack_u32 = _U32.pack
    body_head = _BODY_HEAD.pack
    extra = _BOTH_FIELDS.size if with_time else _OFFSET_FIELD.size
    offset_field = _OFFSET_FIELD.pack
    tag = first_tag
    for offset, p in zip(offsets, present, strict=True):
        stamp, flags, ex_len, rk_len, queues, props_len = unpack_record(p)
        pos = _RECORD_SIZE + 4 * queues + (8 if flags & _EXPIRES_FLAG else 0)
        h0 = pos + ex_len + rk_len
        if ex_len != names_at or h0 - pos != names_end or not p.startswith(names, pos):  # a new route
            names, names_at, names_end = p[pos:h0], ex_len, h0 - pos
            route = bytes((ex_len,)) + names[:ex_len] + bytes((rk_len,)) + names[ex_len:]
            head = _FRAME_HEAD.pack(1, channel, 13 + len(ctag) + len(route)) + _DELIVER_PREFIX + ctag
            mid = b"\x00" + route + b"\xce\x02" + _U16.pack(channel)
            tag_mid = struct.Struct(f">Q{len(mid)}sI")
        hend = h0 + props_len
        hflags = p[h0 + 12] << 8 | p[h0 + 13]
        at = h0 + 14
        if hflags & FLAG_CONTENT_TYPE:
            at += 1 + p[at]
        if hflags & FLAG_CONTENT_ENCODING:
            at += 1 + p[at]
        field = (
            _BOTH_FIELDS.pack(_OFFSET_NAME, offset, _TIMESTAMP_NAME, stamp)
            if with_time
            else offset_field(_OFFSET_NAME, offset)
        )
        size = len(p) - hend
        if hflags & FLAG_HEADERS:
            (table,) = unpack_u32(p, at)
            stop = at + 4 + table
            if stop > hend:
                raise errors.syntax_error("malformed content header properties").with_method(60, 40)
            if 0 < size <= chunk:  # the common case, in one step
                parts += (
                    head,
                    tag_mid.pack(tag, mid, props_len + extra),
                    p[h0:at],
                    pack_u32(table + extra),
                    p[at + 4 : stop],
                    field,
                    p[stop:hend],
                    body_head(0xCE, 3, channel, size),
                    p[hend:],
                    b"\xce",
                )
                tag += 1
                continue
            parts += (
                head,
                tag_mid.pack(tag, mid, props_len + extra),
                p[h0:at],
                pack_u32(table + extra),
                p[at + 4 : stop],
                field,
                p[stop:hend],
            )
        else:
            parts += (
                head,
                tag_mid.pack(tag, mid, props_len + 4 + extra),
                p[h0 : h0 + 12],
                _U16.pack(hflags | FLAG_HEADERS),
                p[h0 + 14 : at],
                pack_u32(extra),
                field,
                p[at:hend],
            )
        if not size:
            parts.append(b"\xce")
        elif size <= chunk:
            parts += (body_head(0xCE, 3, channel, size), p[hend:], b"\xce")
        else:
            _split_body(parts, channel, memoryview(p)[hend:], chunk)
        tag += 1
    return b"".join(parts), offsets


def _split_body(parts: list[bytes | memoryview], channel: int, body: memoryview, chunk: int) -> None:
    """The header frame's end, then a body larger than a frame in frames of at most `chunk` bytes."""
    parts.append(b"\xce")
    for at in range(0, len(body), chunk):
        piece = body[at : at + chunk]
        parts += (_FRAME_HEAD.pack(3, channel, len(piece)), piece, b"\xce")
