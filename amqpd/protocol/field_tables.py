"""Strict bounds checking of method fields and field tables, before pamqp decodes them.

pamqp slices past the end of a table without complaint (a longstr claiming 99999 bytes in a 9-byte table
comes back truncated) and recurses without bound on nested tables. This walk checks every length against
its enclosing table, array and frame, every type tag, and the nesting depth, so bad input gets:
501 FRAME_ERROR for anything running past its end (RabbitMQ's answer), 502 SYNTAX_ERROR for an unknown
type tag or nesting deeper than the limit.
"""

from __future__ import annotations

import struct

from amqpd import errors

_u32 = struct.Struct(">I")

# Field value sizes by type tag (RabbitMQ's and pamqp's table types); None: a u32 length, then that many bytes.
_FIXED = {
    ord("t"): 1,
    ord("b"): 1,
    ord("B"): 1,
    ord("s"): 2,
    ord("u"): 2,
    ord("I"): 4,
    ord("i"): 4,
    ord("f"): 4,
    ord("l"): 8,
    ord("L"): 8,
    ord("d"): 8,
    ord("T"): 8,
    ord("D"): 5,
    ord("V"): 0,
    0: 0,
}
_SIZED = (ord("S"), ord("x"))
_TABLE, _ARRAY = ord("F"), ord("A")
_FIELD_SIZES = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}


class Overrun(Exception):
    """A length runs past the end of what encloses it."""


class BadField(Exception):
    """An unknown type tag, or nesting deeper than allowed."""


def check_fields(field_types: list[str], data: bytes, start: int, max_depth: int) -> None:
    """Walk a method's arguments (pamqp type names, in order) over data[start:]; raise Overrun/BadField."""
    o, n, bits = start, len(data), 0
    for kind in field_types:
        if kind == "bit":
            if bits % 8 == 0:
                o += 1
            bits += 1
        else:
            bits = 0
            if kind == "shortstr":
                o = _need(o, 1, n) + data[o]
            elif kind == "longstr":
                o = _need(o, 4, n) + _u32.unpack_from(data, o)[0]
            elif kind == "table":
                o = check_table(data, o, n, 1, max_depth)
            else:
                o += _FIELD_SIZES[kind]
        if o > n:
            raise Overrun(f"{kind} field runs past the end of the frame")


def check_table(data: bytes, o: int, end: int, depth: int, max_depth: int) -> int:
    """A field table at data[o:] within data[:end]; returns the offset just after it."""
    if depth > max_depth:
        raise BadField(f"field table nested deeper than {max_depth}")
    table_end = _need(o, 4, end) + _u32.unpack_from(data, o)[0]
    if table_end > end:
        raise Overrun("field table runs past its end")
    p = o + 4
    while p < table_end:
        p = _need(p, 1, table_end) + data[p]  # the key
        tag = data[p] if p < table_end else -1
        p = _check_value(tag, data, _need(p, 1, table_end), table_end, depth, max_depth)
    return table_end


def _check_value(tag: int, data: bytes, p: int, end: int, depth: int, max_depth: int) -> int:
    size = _FIXED.get(tag)
    if size is not None:
        p += size
    elif tag in _SIZED:
        p = _need(p, 4, end) + _u32.unpack_from(data, p)[0]
    elif tag == _TABLE:
        p = check_table(data, p, end, depth + 1, max_depth)
    elif tag == _ARRAY:
        p = _check_array(data, p, end, depth + 1, max_depth)
    else:
        raise BadField(f"unknown field type {bytes((tag,))!r}")
    if p > end:
        raise Overrun("field value runs past its table")
    return p


def table_entries(raw: bytes, max_depth: int) -> list[tuple[bytes, bytes]]:
    """A checked field table (with its length prefix) as (key, encoded value with its type tag) pairs, in
    order: entries can be added or reordered without decoding (and re-encoding) any value."""
    end = check_table(raw, 0, len(raw), 1, max_depth)
    entries, p = [], 4
    while p < end:
        key_end = p + 1 + raw[p]
        value_end = _check_value(raw[key_end], raw, key_end + 1, end, 1, max_depth)
        entries.append((raw[p + 1 : key_end], raw[key_end:value_end]))
        p = value_end
    return entries


def _check_array(data: bytes, p: int, end: int, depth: int, max_depth: int) -> int:
    if depth > max_depth:
        raise BadField(f"field array nested deeper than {max_depth}")
    array_end = _need(p, 4, end) + _u32.unpack_from(data, p)[0]
    if array_end > end:
        raise Overrun("field array runs past its end")
    q = p + 4
    while q < array_end:
        tag = data[q]
        q = _check_value(tag, data, q + 1, array_end, depth, max_depth)
    return array_end


def _need(o: int, size: int, end: int) -> int:
    if o + size > end:
        raise Overrun("field runs past its end")
    return o + size


def method_error(exc: Overrun | BadField, name: str, class_id: int, method_id: int) -> errors.ConnectionError:
    code = errors.FRAME_ERROR if isinstance(exc, Overrun) else errors.SYNTAX_ERROR
    return errors.ConnectionError(code, f"cannot decode {name}: {exc}", class_id, method_id)
