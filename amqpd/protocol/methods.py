"""The pamqp adapter: method payloads to pamqp objects and back, with AMQP errors for bad input."""

from __future__ import annotations

import struct

from pamqp import base, commands
from pamqp import decode as pdecode
from pamqp import encode as pencode

from amqpd import errors
from amqpd.protocol.frames import method_frame

_class_method = struct.Struct(">HH")
_index = struct.Struct(">I")


def method_ids(payload: bytes) -> tuple[int, int]:
    if len(payload) < 4:
        raise errors.frame_error("method frame too short")
    return _class_method.unpack_from(payload)  # type: ignore[return-value]


MAX_TABLE_DEPTH = 64


def decode_method(payload: bytes, max_depth: int = MAX_TABLE_DEPTH) -> base.Frame:
    """A method payload (with class/method ids) → pamqp method object.

    Unknown methods → 540 NOT_IMPLEMENTED and unknown field types → 502 SYNTAX_ERROR (RabbitMQ 3.10 drops
    the socket silently there; a close with a reason is kinder). Fields running past the end of the
    frame → 501 FRAME_ERROR "cannot decode", as RabbitMQ answers. All name the method.
    """
    class_id, method_id = method_ids(payload)
    cls = commands.INDEX_MAPPING.get((class_id << 16) | method_id)
    if cls is None:
        raise errors.ConnectionError(
            errors.NOT_IMPLEMENTED, f"unknown method {class_id}/{method_id}", class_id, method_id
        )
    method = cls()
    try:
        method.unmarshal(payload[4:])
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError, RecursionError, KeyError) as exc:
        # pamqp raises ValueError("Unknown type ...") for a bad type tag; everything else is a truncation.
        code = errors.SYNTAX_ERROR if "Unknown type" in str(exc) else errors.FRAME_ERROR
        raise errors.ConnectionError(code, f"cannot decode {method.name}: {exc}", class_id, method_id) from None
    for name in method.__slots__:
        value = getattr(method, name, None)
        if isinstance(value, dict) and nesting_depth(value) > max_depth:
            raise errors.ConnectionError(
                errors.SYNTAX_ERROR, f"field table nested deeper than {max_depth}", class_id, method_id
            )
    return method


def nesting_depth(value: object) -> int:
    """How deeply tables and arrays nest, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = list(item.values()) if isinstance(item, dict) else item if isinstance(item, list) else []
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def build(cls: type[base.Frame], *args: object) -> base.Frame:
    """A method object from positional field values, skipping pamqp's validation in __init__ (its
    name rules reject UTF-8 names that RabbitMQ and we accept)."""
    method = cls.__new__(cls)
    for name, value in zip(cls.__slots__, args, strict=True):
        setattr(method, name, value)
    return method


def encode_method(channel: int, method: base.Frame) -> bytes:
    """pamqp method object → a whole method frame."""
    return method_frame(channel, _index.pack(method.index) + marshal_arguments(method))


def marshal_arguments(method: base.Frame) -> bytes:
    """pamqp's Frame.marshal without validate(): its name rules are stricter than RabbitMQ's (a
    queue named in UTF-8 is legal), and what the server sends back was already accepted on the way in."""
    out: list[bytes] = []
    bits, nbits = 0, -1
    for name in method.__slots__:
        kind = method.amqp_type(name)
        value = getattr(method, name, 0)
        if kind == "bit":
            nbits += 1
            if nbits == 8:
                out.append(bytes((bits,)))
                bits, nbits = 0, 0
            if value:
                bits |= 1 << nbits
            continue
        if nbits >= 0:
            out.append(bytes((bits,)))
            bits, nbits = 0, -1
        out.append(pencode.by_type(value, kind))
    if nbits >= 0:
        out.append(bytes((bits,)))
    return b"".join(out)


def decode_table(raw: bytes) -> dict:
    """A field table with its 4-byte length prefix → dict; malformed → 502."""
    try:
        _, table = pdecode.field_table(raw)
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.syntax_error(f"cannot decode field table: {exc}") from None
    return table


def method_name(method: base.Frame) -> str:
    """'Basic.Publish' → 'basic.publish', as RabbitMQ names methods in error texts."""
    return method.name.lower()
