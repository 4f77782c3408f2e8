"""The pamqp adapter: method payloads to pamqp objects and back, with AMQP errors for bad input."""

from __future__ import annotations

import functools
import struct
import typing

from pamqp import base, commands, common
from pamqp import decode as pdecode
from pamqp import encode as pencode

from amqpd import errors
from amqpd.protocol.field_tables import BadField, Overrun, check_fields, check_table, method_error
from amqpd.protocol.frames import method_frame

_class_method = struct.Struct(">HH")
_index = struct.Struct(">I")


def method_ids(payload: bytes) -> tuple[int, int]:
    if len(payload) < 4:
        raise errors.frame_error("method frame too short")
    return _class_method.unpack_from(payload)  # type: ignore[return-value]


MAX_TABLE_DEPTH = 64


class AccessRequest(base.Frame):
    """access.request (class 30), deprecated in 0-9-1 and gone from pamqp, still sent by old clients."""

    __slots__: typing.ClassVar[list[str]] = ["realm", "exclusive", "passive", "active", "write", "read"]
    frame_id: typing.ClassVar[int] = 10
    index: typing.ClassVar[int] = 0x001E000A
    name: typing.ClassVar[str] = "Access.Request"
    _realm = "shortstr"
    _exclusive = _passive = _active = _write = _read = "bit"


class AccessRequestOk(base.Frame):
    __slots__: typing.ClassVar[list[str]] = ["ticket"]
    frame_id: typing.ClassVar[int] = 11
    index: typing.ClassVar[int] = 0x001E000B
    name: typing.ClassVar[str] = "Access.RequestOk"
    _ticket = "short"

    def __init__(self, ticket: int = 1) -> None:
        self.ticket = ticket


# Methods pamqp does not know, by (class_id << 16) | method_id.
EXTRA_METHODS: dict[int, type[base.Frame]] = {AccessRequest.index: AccessRequest}


def decode_method(payload: bytes, max_depth: int = MAX_TABLE_DEPTH) -> base.Frame:
    """A method payload (with class/method ids) → pamqp method object.

    Unknown methods → 540 NOT_IMPLEMENTED and unknown field types → 502 SYNTAX_ERROR (RabbitMQ 3.10 drops
    the socket silently there; a close with a reason is kinder). Fields running past the end of the
    frame → 501 FRAME_ERROR "cannot decode", as RabbitMQ answers. All name the method.
    """
    class_id, method_id = method_ids(payload)
    index = (class_id << 16) | method_id
    cls = commands.INDEX_MAPPING.get(index) or EXTRA_METHODS.get(index)
    if cls is None:
        raise errors.ConnectionError(
            errors.NOT_IMPLEMENTED, f"unknown method {class_id}/{method_id}", class_id, method_id
        )
    method = cls()
    try:
        check_fields(_field_types(cls), payload, 4, max_depth)
    except (Overrun, BadField) as exc:
        raise method_error(exc, method.name, class_id, method_id) from None
    try:
        method.unmarshal(payload[4:])
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError, RecursionError, KeyError) as exc:
        # The walk above passed, so this is something pamqp alone dislikes (invalid UTF-8, say).
        raise errors.ConnectionError(
            errors.SYNTAX_ERROR, f"cannot decode {method.name}: {exc}", class_id, method_id
        ) from None
    return method


@functools.cache
def _field_types(cls: type[base.Frame]) -> list[str]:
    return [cls.amqp_type(name) for name in cls.__slots__]


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


def _lenient_timestamp(value: bytes) -> tuple[int, common.FieldValue]:
    """pamqp turns a table's timestamp into a datetime and raises past year 9999; RabbitMQ takes any 64-bit
    value, so such a one is kept as its integer (routing on the table's other entries must still work)."""
    try:
        return _pamqp_timestamp(value)
    except (OverflowError, ValueError, OSError):
        return 8, _u64.unpack_from(value)[0]


_u64 = struct.Struct(">Q")
_pamqp_timestamp = pdecode.timestamp
pdecode.TABLE_MAPPING[b"T"] = _lenient_timestamp


def decode_table(raw: bytes) -> dict:
    """A field table with its 4-byte length prefix → dict; malformed → 502."""
    try:
        check_table(raw, 0, len(raw), 1, MAX_TABLE_DEPTH)
        _, table = pdecode.field_table(raw)
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.syntax_error(f"cannot decode field table: {exc}") from None
    except (Overrun, BadField) as exc:
        raise errors.syntax_error(f"cannot decode field table: {exc}") from None
    return table
