"""A stream's replay in batches, straight from the stored record bytes to the frames a consumer receives.

The per-message path (StreamQueue._feed's filtered branch) decodes each record into a MessageRecord, wraps it
in a StreamDelivery and a StreamEntry and encodes it with encode_delivery: four objects and a dozen calls per
message, the replay's whole cost. Here a run of records is read as raw payloads (their frame checks done by
the store), and each payload's fields are sliced out of it once, into one output buffer: basic.deliver, the
content header with x-stream-offset (and x-stream-timestamp) spliced into its headers table exactly as
`with_offset_header` does, and the body frames (split at frame_max). The deliveries are one StreamRun in the
channel's unacked table, not an entry per message. A run of records of one layout (a publisher's fixed-size
messages) is cut and packed by two Structs over the whole run (_encode_uniform), with no Python step per piece.

The record layout is the store's (store/FORMAT.md): its fixed fields (message id skipped), [u64 expires],
u32 queue ids, exchange, routing key, properties (the content header payload, verbatim), body.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate, count, repeat
from typing import TYPE_CHECKING, cast

from amqpd import errors
from amqpd.broker.streams.cursor import StreamRun
from amqpd.broker.streams.log import payload_bytes
from amqpd.broker.streams.offsets import Offsets
from amqpd.protocol.constants import FLAG_CONTENT_ENCODING, FLAG_CONTENT_TYPE, FLAG_HEADERS
from amqpd.protocol.fastpath import shortstr
from store import RECORD_FIXED_AFTER_ID, RECORD_FLAG_EXPIRES

if TYPE_CHECKING:
    from amqpd.broker.streams.cursor import Cursor, Feed

_RECORD = RECORD_FIXED_AFTER_ID  # timestamp, flags, exchange length, routing key length, queues, props
_RECORD_SIZE = _RECORD.size
_EXPIRES_FLAG = RECORD_FLAG_EXPIRES
_DELIVER_PREFIX = b"\x00\x3c\x00\x3c"
_FRAME_HEAD = struct.Struct(">BHI")
_BODY_HEAD = struct.Struct(">BBHI")  # the header frame's end byte, then the body frame's head
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_OFFSET_NAME = shortstr("x-stream-offset") + b"l"
_TIMESTAMP_NAME = shortstr("x-stream-timestamp") + b"l"
_OFFSET_FIELD = struct.Struct(f">{len(_OFFSET_NAME)}sq")
_BOTH_FIELDS = struct.Struct(f">{len(_OFFSET_NAME)}sq{len(_TIMESTAMP_NAME)}sq")
# A run of at least this many records of one layout is encoded by _encode_uniform (below it the general loop
# is as cheap as checking the layout).
UNIFORM_MIN = 16
# A body at least this big goes into the join as a view of its record rather than a copy (the join copies it
# anyway; below this a slice costs less than the view).
VIEW_FROM = 1024
# A body at least this big is written as a piece of its own (a view of its record), not copied into the join:
# below it, the copy costs less than one more buffer for the transport and the kernel.
APART_FROM = 8192
_UNIFORM_KEPT = 64  # layouts whose Structs are kept
Pieces = list[bytes | memoryview]  # bytes to write, in order
_uniform_structs: dict[tuple[int | bool, ...], tuple[struct.Struct, ...]] = {}


def replay(stream: Feed, cursor: Cursor, start: int, limit: int, budget: int) -> tuple[int, int]:
    """Deliver up to `limit` records from `start` (or the first kept) to the cursor's consumer, and no more
    than the one that takes them past `budget` bytes: one encoding pass, one write, one unacked run. A record
    damaged on disk is skipped, its offset unused. Returns the offset to go on from and the bytes sent."""
    start, payloads = stream.log.read_raw(start, limit)
    payloads = within(payloads, budget)
    next_offset = start + len(payloads)
    consumer = cursor.consumer
    channel = consumer.channel
    first_tag = channel.last_tag + 1
    pieces, offsets = encode_replay_pieces(
        channel.id, consumer.ctag, first_tag, start, payloads, cursor.with_time, channel.conn.frame_max
    )
    if not offsets:
        return next_offset, 0
    cursor.outstanding.add_offsets(offsets)
    run = StreamRun(first_tag, offsets, consumer.queue, consumer, cursor, channel.broker.clock)
    channel.deliver_encoded_run(consumer.queue, run, pieces)
    return next_offset, sum(map(len, pieces))


def within(payloads: list[bytes | None], budget: int) -> list[bytes | None]:
    """The first payloads, up to the one whose bytes take them to `budget` (at least one)."""
    if payload_bytes(payloads) <= budget:
        return payloads
    try:
        totals = list(accumulate(map(len, payloads)))  # type: ignore[arg-type]
    except TypeError:  # len(None): a damaged record, which sends nothing
        totals = list(accumulate(len(p) if p is not None else 0 for p in payloads))
    return payloads[: bisect_left(totals, budget) + 1]


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
    pieces, offsets = encode_replay_pieces(channel, ctag, first_tag, start, payloads, with_time, frame_max)
    return b"".join(pieces), offsets


def encode_replay_pieces(
    channel: int,
    ctag: bytes,
    first_tag: int,
    start: int,
    payloads: list[bytes | None],
    with_time: bool,
    frame_max: int,
) -> tuple[Pieces, Offsets]:
    """encode_replay's bytes in pieces to write in this order: joined, but for bodies of APART_FROM bytes
    or more, each a view of its record (a writev sends them without copying them into the join)."""
    offsets: Offsets = range(start, start + len(payloads))
    if None in payloads:
        offsets = [offset for offset, p in zip(offsets, payloads, strict=True) if p is not None]
        present = [p for p in payloads if p is not None]
    else:
        present = cast(list[bytes], payloads)
    if len(present) >= UNIFORM_MIN:
        pieces = _encode_uniform(channel, ctag, first_tag, offsets, present, with_time, frame_max - 8)
        if pieces is not None:
            return pieces, offsets
    parts: list[bytes | memoryview] = []
    apart: list[int] = []  # where in parts the bodies written apart are
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
            head, mid = _route_frames(channel, ctag, names, ex_len)
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
                    p[hend:] if size < VIEW_FROM else memoryview(p)[hend:],
                    b"\xce",
                )
                if size >= APART_FROM:
                    apart.append(len(parts) - 2)
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
            body = p[hend:] if size < VIEW_FROM else memoryview(p)[hend:]
            parts += (body_head(0xCE, 3, channel, size), body, b"\xce")
            if size >= APART_FROM:
                apart.append(len(parts) - 2)
        else:
            _split_body(parts, channel, memoryview(p)[hend:], chunk)
        tag += 1
    return _joined_but(parts, apart), offsets


def _joined_but(parts: list[bytes | memoryview], apart: Iterable[int]) -> Pieces:
    """`parts` joined, but for those at the indexes in `apart` (ascending), which stay pieces of their own."""
    pieces: Pieces = []
    done = 0
    for i in apart:
        pieces += (b"".join(parts[done:i]), parts[i])
        done = i + 1
    pieces.append(b"".join(parts[done:]))
    return pieces


def _route_frames(channel: int, ctag: bytes, names: bytes, ex_len: int) -> tuple[bytes, bytes]:
    """What comes before and after the delivery tag, from basic.deliver's frame header to the content header
    frame's head (without its size), for records with these exchange + routing key bytes."""
    route = bytes((ex_len,)) + names[:ex_len] + bytes((len(names) - ex_len,)) + names[ex_len:]
    head = _FRAME_HEAD.pack(1, channel, 13 + len(ctag) + len(route)) + _DELIVER_PREFIX + ctag
    return head, b"\x00" + route + b"\xce\x02" + _U16.pack(channel)


def _encode_uniform(
    channel: int, ctag: bytes, first_tag: int, offsets: Offsets, present: list[bytes], with_time: bool, chunk: int
) -> Pieces | None:
    """encode_replay_pieces' frames for records that all have the first one's layout (the same length, route,
    property flags and the same bytes up to its headers table's length, or up to where a table would go when
    they have none; a body of one frame), as a publisher sending fixed-size messages leaves them: each
    record is cut into its pieces by one Struct and its frames packed by another, with no Python step per
    piece. A small body is cut and packed with the rest (one object per delivery); a big one goes into the
    join as a view of its record (cut and packed, it would be copied twice more). None when the records
    are not all alike (encode_replay then goes one by one)."""
    first = present[0]
    size = len(first)
    _stamp, flags, ex_len, rk_len, queues, props_len = _RECORD.unpack_from(first)
    pos = _RECORD_SIZE + 4 * queues + (8 if flags & _EXPIRES_FLAG else 0)
    h0 = pos + ex_len + rk_len
    hend = h0 + props_len
    body = size - hend
    if props_len < 14 or hend > size or not 0 < body <= chunk:
        return None
    hflags = first[h0 + 12] << 8 | first[h0 + 13]
    at = h0 + 14
    if hflags & FLAG_CONTENT_TYPE:
        at += 1 + first[at]
    if hflags & FLAG_CONTENT_ENCODING and at < hend:
        at += 1 + first[at]
    has_table = bool(hflags & FLAG_HEADERS)
    if has_table:
        if at + 4 > hend:
            return None  # malformed: the general loop says so
        (table,) = _U32.unpack_from(first, at)
        stop = at + 4 + table
    else:
        table, stop = 0, at
    if stop > hend or len(set(map(len, present))) != 1:
        return None
    big = body >= VIEW_FROM
    head, mid = _route_frames(channel, ctag, first[pos:h0], ex_len)
    layout, cut, frames = _uniform_struct((pos, h0, at, stop, hend, size, len(head), len(mid), with_time, big))
    joined = b"" if big else b"".join(present)
    if len(set(map(layout.unpack_from, present) if big else layout.iter_unpack(joined))) != 1:
        return None
    extra = _BOTH_FIELDS.size if with_time else _OFFSET_FIELD.size
    # Everything from the content header's size to the table's size is alike in every record: packed once.
    if has_table:
        props = first[h0:at]
    else:  # the table the offset goes in is added, its flag set
        props = first[h0 : h0 + 12] + _U16.pack(hflags | FLAG_HEADERS) + first[h0 + 14 : at]
        extra += 4
    mid_props = mid + _U32.pack(props_len + extra) + props + _U32.pack(table + extra - (0 if has_table else 4))
    body_head = _BODY_HEAD.pack(0xCE, 3, channel, body)
    pack = frames.pack
    if big:
        records = zip(count(first_tag), offsets, map(cut.unpack_from, present))
        if with_time:
            heads = [
                pack(head, tag, mid_props, b, _OFFSET_NAME, o, _TIMESTAMP_NAME, stamp, c, body_head)
                for tag, o, (stamp, b, c) in records
            ]
        else:
            heads = [pack(head, tag, mid_props, b, _OFFSET_NAME, o, c, body_head) for tag, o, (_, b, c) in records]
        parts: list[bytes | memoryview | None] = [None] * (3 * len(heads))
        parts[::3] = heads
        parts[1::3] = [memoryview(p)[hend:] for p in present]
        parts[2::3] = repeat(b"\xce", len(heads))
        if body >= APART_FROM:
            return _joined_but(parts, range(1, len(parts), 3))  # type: ignore[arg-type]
        return [b"".join(parts)]  # type: ignore[arg-type]
    records = zip(count(first_tag), offsets, cut.iter_unpack(joined))
    if with_time:
        packed = [
            pack(head, tag, mid_props, b, _OFFSET_NAME, o, _TIMESTAMP_NAME, stamp, c, body_head, d, 0xCE)
            for tag, o, (stamp, b, c, d) in records
        ]
    else:
        packed = [
            pack(head, tag, mid_props, b, _OFFSET_NAME, o, c, body_head, d, 0xCE) for tag, o, (_, b, c, d) in records
        ]
    return [b"".join(packed)]


def _uniform_struct(key: tuple[int, int, int, int, int, int, int, int, bool, bool]) -> tuple[struct.Struct, ...]:
    """For records of this layout: the Struct reading what must be alike in all of them (the fixed fields
    but the id and timestamp, and the bytes from the route to the headers table's length, or to where the
    table would be), the one cutting a record into (timestamp, the table's fields, the properties after it,
    and unless `big` the body), and the one packing a delivery's frames from those (with a big body: up to
    the body frame's head)."""
    found = _uniform_structs.get(key)
    if found is None:
        pos, h0, at, stop, hend, size, head, mid, with_time, big = key
        has_table = stop > at
        alike_to = at + 4 if has_table else at
        if len(_uniform_structs) >= _UNIFORM_KEPT:
            _uniform_structs.clear()
        layout = struct.Struct(f"<16x9s{pos - 25}x{alike_to - pos}s" + ("" if big else f"{size - alike_to}x"))
        table = f"{stop - alike_to}s"
        body = "" if big else f"{size - hend}s"
        cut = struct.Struct(f"<8xQ{alike_to - 16}x{table}{hend - stop}s{body}")
        fields = f"{len(_OFFSET_NAME)}sq{len(_TIMESTAMP_NAME)}sq" if with_time else f"{len(_OFFSET_NAME)}sq"
        props = 4 + (at - h0) + 4  # the properties' size, those before the table, the table's size
        frames = struct.Struct(f">{head}sQ{mid + props}s{table}{fields}{hend - stop}s8s" + ("" if big else f"{body}B"))
        found = _uniform_structs[key] = (layout, cut, frames)
    return found


def _split_body(parts: list[bytes | memoryview], channel: int, body: memoryview, chunk: int) -> None:
    """The header frame's end, then a body larger than a frame in frames of at most `chunk` bytes."""
    parts.append(b"\xce")
    for at in range(0, len(body), chunk):
        piece = body[at : at + chunk]
        parts += (_FRAME_HEAD.pack(3, channel, len(piece)), piece, b"\xce")
