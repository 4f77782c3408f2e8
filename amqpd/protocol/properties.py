"""Message properties, kept as the encoded bytes the publisher sent and decoded only when needed.

A content header payload is class(2) weight(2) body_size(8) flags(2) properties…; consumers get
those bytes verbatim. Routing needs at most delivery_mode, expiration, priority and headers, which
a partial scan finds without building a pamqp object.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from pamqp import commands
from pamqp import encode as pencode
from pamqp.header import ContentHeader

from amqpd import errors
from amqpd.protocol.constants import (
    FLAG_CONTENT_ENCODING,
    FLAG_CONTENT_TYPE,
    FLAG_CORRELATION_ID,
    FLAG_DELIVERY_MODE,
    FLAG_EXPIRATION,
    FLAG_HEADERS,
    FLAG_PRIORITY,
    FLAG_REPLY_TO,
)
from amqpd.protocol.field_tables import BadField, Overrun, check_table, table_entries
from amqpd.protocol.methods import MAX_TABLE_DEPTH

_u32 = struct.Struct(">I")
_u16 = struct.Struct(">H")
_header_prefix = struct.Struct(">HHQ")


# Property flag bits in wire order, each with the size of its value: -1 shortstr, -4 table, else a byte count.
_LAYOUT: tuple[tuple[int, int], ...] = tuple(
    (1 << (15 - i), kind) for i, kind in enumerate((-1, -1, -4, 1, 1, -1, -1, -1, -1, 8, -1, -1, -1, -1))
)
_KIND = dict(_LAYOUT)

_HEADERS: dict[bytes, bytes] = {}
_HEADERS_MAX = 4096
_SHARED_HEADER_LEN = 96  # longer headers (big tables) are rarely repeated and cost more to hash


def shared_header(header: bytes) -> bytes:
    """An equal header payload seen before, if any: most publishers send the same properties for every
    message of a size, and a backlog then holds one copy instead of one per message."""
    if len(header) > _SHARED_HEADER_LEN:
        return header
    known = _HEADERS.get(header)
    if known is None:
        if len(_HEADERS) >= _HEADERS_MAX:
            _HEADERS.clear()
        _HEADERS[header] = known = header
    return known


def checked_header(header: bytes) -> bytes:
    """shared_header() of a published header, its property list checked first (check_property_list); a
    header seen before was checked then."""
    known = _HEADERS.get(header)
    if known is not None:
        return known
    check_property_list(header)
    return shared_header(header)


def malformed_properties() -> errors.ConnectionError:
    """RabbitMQ decodes every published property list and its channel crashes on a malformed one: the
    connection is closed with 541 INTERNAL_ERROR naming no method. Clients see the same from us."""
    return errors.ConnectionError(errors.INTERNAL_ERROR, "malformed content header properties")


def check_property_list(header: bytes) -> None:
    """Every property present must fit, end exactly at the end of the header, and a headers table must
    be well formed; nothing is decoded (values go to consumers as sent). On the per-message path of
    publishers whose properties change per message: a tight walk, no call per value."""
    try:
        flags = _u16.unpack_from(header, 12)[0]
        kinds = _KINDS_BY_FLAGS.get(flags)
        if kinds is None:
            if flags & 1:  # a continuation flag word: no 0-9-1 property needs one, and RabbitMQ refuses it
                raise IndexError
            kinds = _KINDS_BY_FLAGS[flags] = tuple(kind for flag, kind in _LAYOUT if flags & flag)
        o, end = 14, len(header)
        for kind in kinds:
            if kind == -1:
                o += 1 + header[o]
            elif kind == -4:
                o = _check_flat_table(header, o, end)
            else:
                o += kind
        if o != end:
            raise IndexError
    except (IndexError, struct.error, Overrun, BadField):
        raise malformed_properties() from None


_KINDS_BY_FLAGS: dict[int, tuple[int, ...]] = {}
# Field value sizes by type tag: >= 0 fixed, -2 a u32 length then that many bytes, -3 nested, -1 unknown.
_VALUE_SIZE = [-1] * 256
for _tag, _size in {
    "t": 1,
    "b": 1,
    "B": 1,
    "s": 2,
    "u": 2,
    "I": 4,
    "i": 4,
    "f": 4,
    "l": 8,
    "L": 8,
    "d": 8,
    "T": 8,
    "D": 5,
    "V": 0,
}.items():
    _VALUE_SIZE[ord(_tag)] = _size
_VALUE_SIZE[ord("S")] = _VALUE_SIZE[ord("x")] = -2
_VALUE_SIZE[ord("F")] = _VALUE_SIZE[ord("A")] = -3


def _check_flat_table(h: bytes, o: int, end: int) -> int:
    """check_table() for the usual table of scalars and strings, inline; nested ones take the full walk."""
    table_end = o + 4 + _u32.unpack_from(h, o)[0]
    if table_end > end:
        raise IndexError
    p = o + 4
    while p < table_end:
        p += 1 + h[p]  # the key
        size = _VALUE_SIZE[h[p]]
        p += 1
        if size >= 0:
            p += size
        elif size == -2:
            p += 4 + _u32.unpack_from(h, p)[0]
        elif size == -3:
            return check_table(h, o, end, 1, MAX_TABLE_DEPTH)
        else:
            raise IndexError
    if p != table_end:
        raise IndexError
    return table_end


# For scan_published: per property-flag word, each present property's size kind and what the scan keeps of it
# (0 nothing, 1 the headers table, 2 delivery_mode, 3 priority).
_SCAN_FIELD = {FLAG_HEADERS: 1, FLAG_DELIVERY_MODE: 2, FLAG_PRIORITY: 3}
_SCAN_LAYOUTS: dict[int, tuple[tuple[int, int], ...]] = {}
_header_fields = struct.Struct(">HHQH")


def scan_published(header: bytes, skip: int) -> tuple[int, int, int, bytes, PropertyScan] | None:
    """parse_content_header, checked_header and PropertyScan of a published header in one walk: (class_id,
    body_size, flags, the header as checked_header returns it, its scan). None when the header is malformed,
    or has a property flag in `skip` or a continuation flag word: the caller then publishes it one message at
    a time, where the same reads report any error."""
    try:
        class_id, _weight, body_size, flags = _header_fields.unpack_from(header)
    except struct.error:
        return None
    if flags & skip or flags & 1:
        return None
    # Only short headers are ever shared (and so known as checked): a longer one is not hashed for nothing.
    end = len(header)
    known = _HEADERS.get(header) if end <= _SHARED_HEADER_LEN else None
    if known is not None:  # checked before
        return class_id, body_size, flags, known, PropertyScan(known, flags)
    shape = _SHAPES.get(flags << 32 | end)
    if shape is not None and shape.structure(header) == shape.expected:
        return class_id, body_size, flags, shared_header(header), shape.scan(header)
    layout = _SCAN_LAYOUTS.get(flags)
    if layout is None:
        layout = _SCAN_LAYOUTS[flags] = tuple(
            (kind, _SCAN_FIELD.get(flag, 0)) for flag, kind in _LAYOUT if flags & flag
        )
    scan = PropertyScan.__new__(PropertyScan)
    scan.delivery_mode = scan.priority = scan.expiration = scan.headers_raw = None
    o = 14
    try:
        for kind, field in layout:
            if kind == -1:
                o += 1 + header[o]
            elif kind == -4:
                start, o = o, _check_flat_table(header, o, end)
                scan.headers_raw = header[start:o]
            else:
                if field == 2:
                    scan.delivery_mode = header[o]
                elif field == 3:
                    scan.priority = header[o]
                o += kind
    except (IndexError, struct.error, Overrun, BadField):
        return None
    if o != end:
        return None
    if shape is None:
        _learn_shape(header, flags, layout)
    return class_id, body_size, flags, shared_header(header), scan


class HeaderShape:
    """Where the structure of a checked header lies: every byte that the walk of scan_published reads to find
    where a property or table entry ends (the flags, each length, each field value's type tag), and where the
    scanned fields are. A header of the same flags and length whose bytes there are equal to the checked one's
    has every property and table entry at the same place, so it is as well formed, and is scanned without the
    walk: publishers whose properties change per message (ids, timestamps) mostly keep their lengths."""

    __slots__ = ("structure", "expected", "mode_at", "priority_at", "table_at", "table_end")

    def __init__(self, header: bytes, positions: list[int], mode_at: int, priority_at: int, table: slice) -> None:
        self.structure: Callable[[bytes], Any] = itemgetter(*positions)
        self.expected = self.structure(header)
        self.mode_at, self.priority_at = mode_at, priority_at  # 0: absent (no property starts before 14)
        self.table_at, self.table_end = table.start, table.stop  # table_end 0: no headers table

    def scan(self, header: bytes) -> PropertyScan:
        scan = PropertyScan.__new__(PropertyScan)
        scan.delivery_mode = header[self.mode_at] if self.mode_at else None
        scan.priority = header[self.priority_at] if self.priority_at else None
        scan.expiration = None
        scan.headers_raw = header[self.table_at : self.table_end] if self.table_end else None
        return scan


# HeaderShape by flags << 32 | header length; cleared when full, as _HEADERS is. One shape per key: a header of
# that key with another structure takes the walk.
_SHAPES: dict[int, HeaderShape] = {}
_SHAPES_MAX = 1024
# A header with more places to compare (a large headers table) takes the walk: this keeps the shapes' memory
# small whatever publishers send (a shape holds its places and their bytes).
_SHAPE_POSITIONS_MAX = 64


def _learn_shape(header: bytes, flags: int, layout: tuple[tuple[int, int], ...]) -> None:
    """The HeaderShape of a header that scan_published's walk has just found well formed; none for a table with
    a nested value (a table or an array: check_table walks those in full) or too many places to compare."""
    positions, mode_at, priority_at, table = [12, 13], 0, 0, slice(0, 0)
    o = 14
    for kind, field in layout:
        if kind == -1:
            positions.append(o)
            o += 1 + header[o]
        elif kind == -4:
            end = o + 4 + _u32.unpack_from(header, o)[0]
            positions += range(o, o + 4)
            table, p = slice(o, end), o + 4
            while p < end:
                positions.append(p)  # the key's length
                p += 1 + header[p]
                positions.append(p)  # the value's type tag
                size = _VALUE_SIZE[header[p]]
                p += 1
                if size == -2:
                    positions += range(p, p + 4)
                    p += 4 + _u32.unpack_from(header, p)[0]
                elif size < 0:
                    return
                else:
                    p += size
            o = end
        else:
            if field == 2:
                mode_at = o
            elif field == 3:
                priority_at = o
            o += kind
    if len(positions) > _SHAPE_POSITIONS_MAX:
        return
    if len(_SHAPES) >= _SHAPES_MAX:
        _SHAPES.clear()
    _SHAPES[flags << 32 | len(header)] = HeaderShape(header, positions, mode_at, priority_at, table)


def raw_property(header: bytes, flags: int, wanted: int) -> bytes | None:
    """One property's encoded value (a short string without its length byte), found by skipping over the
    ones before it: nothing else is decoded. None when absent. The header was checked on the way in."""
    if not flags & wanted:
        return None
    o = 14
    for flag, kind in _LAYOUT:
        if flag == wanted:
            break
        if flags & flag:
            o += 1 + header[o] if kind == -1 else 4 + _u32.unpack_from(header, o)[0] if kind == -4 else kind
    kind = _KIND[wanted]
    if kind == -1:
        return header[o + 1 : o + 1 + header[o]]
    if kind == -4:
        return header[o : o + 4 + _u32.unpack_from(header, o)[0]]
    return header[o : o + kind]


class PropertyScan:
    """The fields the broker acts on, scanned from the raw header payload."""

    __slots__ = ("delivery_mode", "priority", "expiration", "headers_raw")

    def __init__(self, header: bytes, flags: int) -> None:
        self.delivery_mode: int | None = None
        self.priority: int | None = None
        self.expiration: str | None = None
        self.headers_raw: bytes | None = None
        try:
            self._scan(header, flags)
        except (IndexError, struct.error, UnicodeDecodeError):
            raise errors.syntax_error("malformed content header properties").with_method(60, 40) from None

    def _scan(self, h: bytes, flags: int) -> None:
        o = 14
        if flags & 1:  # continuation flag words: RabbitMQ never sets them, skip over them
            while struct.unpack_from(">H", h, o - 2)[0] & 1:
                o += 2
        if flags & FLAG_CONTENT_TYPE:
            o += 1 + h[o]
        if flags & FLAG_CONTENT_ENCODING:
            o += 1 + h[o]
        if flags & FLAG_HEADERS:
            size = _u32.unpack_from(h, o)[0]
            self.headers_raw = h[o : o + 4 + size]
            if len(self.headers_raw) != 4 + size:
                raise IndexError
            o += 4 + size
        if flags & FLAG_DELIVERY_MODE:
            self.delivery_mode = h[o]
            o += 1
        if flags & FLAG_PRIORITY:
            self.priority = h[o]
            o += 1
        if not flags & FLAG_EXPIRATION:
            return
        if flags & FLAG_CORRELATION_ID:
            o += 1 + h[o]
        if flags & FLAG_REPLY_TO:
            o += 1 + h[o]
        n = h[o]
        if len(h) < o + 1 + n:
            raise IndexError("expiration runs past the header")
        self.expiration = h[o + 1 : o + 1 + n].decode()


def decode_properties(header: bytes) -> commands.Basic.Properties:
    ch = ContentHeader()
    try:
        ch.unmarshal(header)
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.syntax_error(f"malformed content header: {exc}").with_method(60, 40) from None
    return ch.properties


# Property flag bits in wire order, each with the size of its value: -1 shortstr, -4 table, else a byte count.


def split_properties(header: bytes) -> dict[int, bytes]:
    """A content header's properties as {flag: encoded value}, untouched: rewriting one property must not
    re-encode the others (pamqp's decoder would turn a millisecond timestamp into seconds)."""
    o, parts = 14, {}
    try:
        flags = struct.unpack_from(">H", header, 12)[0]
        for flag, kind in _LAYOUT:
            if not flags & flag:
                continue
            if kind == -1:
                size = 1 + header[o]
            elif kind == -4:
                size = 4 + _u32.unpack_from(header, o)[0]
            else:
                size = kind
            parts[flag] = header[o : o + size]
            if len(parts[flag]) != size:
                raise IndexError("property runs past the header")
            o += size
    except (IndexError, struct.error):
        raise errors.syntax_error("malformed content header properties").with_method(60, 40) from None
    return parts


def join_properties(body_size: int, parts: dict[int, bytes]) -> bytes:
    flags = sum(flag for flag, _ in _LAYOUT if flag in parts)
    values = b"".join(parts[flag] for flag, _ in _LAYOUT if flag in parts)
    return _header_prefix.pack(60, 0, body_size) + struct.pack(">H", flags) + values


def rewrite_properties(header: bytes, body_size: int, changes: dict[int, bytes | None]) -> bytes:
    """The same header with some properties replaced (encoded values) or removed (None)."""
    parts = split_properties(header)
    for flag, value in changes.items():
        if value is None:
            parts.pop(flag, None)
        else:
            parts[flag] = value
    return join_properties(body_size, parts)


def encode_table(table: dict) -> bytes:
    return pencode.field_table(table)


_DELIVERY_COUNT_KEY = b"x-delivery-count"
_i64 = struct.Struct(">q")


def with_delivery_count(header: bytes, count: int) -> bytes:
    """A quorum queue's delivery: the headers table gains x-delivery-count (a signed 64-bit 'l', the times
    the message went back to its queue) and, as RabbitMQ re-encodes it (rabbit_misc:set_table_value), its
    entries sorted by key; every value and every other property stays byte for byte as published."""
    parts = split_properties(header)
    raw = parts.get(FLAG_HEADERS)
    entries = [e for e in table_entries(raw, MAX_TABLE_DEPTH) if e[0] != _DELIVERY_COUNT_KEY] if raw else []
    entries.append((_DELIVERY_COUNT_KEY, b"l" + _i64.pack(count)))
    entries.sort(key=lambda e: e[0])
    inner = b"".join(bytes((len(key),)) + key + value for key, value in entries)
    parts[FLAG_HEADERS] = _u32.pack(len(inner)) + inner
    return join_properties(_header_prefix.unpack_from(header)[2], parts)


def append_header_field(header: bytes, body_size: int, field: bytes) -> bytes:
    """The same header payload with one encoded field (shortstr name, type tag, value) appended to its
    headers table, every other byte untouched (a stream's x-stream-offset on each delivery)."""
    parts = split_properties(header)
    table = parts.get(FLAG_HEADERS, b"\x00\x00\x00\x00")
    parts[FLAG_HEADERS] = _u32.pack(len(table) - 4 + len(field)) + table[4:] + field
    return join_properties(body_size, parts)
