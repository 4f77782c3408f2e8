"""Delivery counts and limits, as RabbitMQ 3.10's quorum queues keep them (rabbit_fifo).

A message's delivery count is the number of times it went back to its queue unacked: nack or reject with
requeue, basic.recover, or its channel or connection closing. A queue that counts (a quorum queue, or any
queue declared with `x-delivery-limit`) sends that number as an `x-delivery-count` header: with every
basic.get-ok (0 the first time), and with a basic.deliver once the count is above 0 (a consumer's first
delivery has no header), exactly as RabbitMQ 3.10.8 does (rabbit_quorum_queue adds it on basic.get
always, on deliveries only when the message header has a delivery_count, i.e. after a return). When a
return takes the count past `x-delivery-limit`, the message is dead-lettered with reason
`delivery_limit` instead (dropped without a dead-letter exchange): a limit of 2 allows three deliveries.

The header is written in one place: `Queue.header_for`, which basic.deliver and basic.get-ok use, calls
`with_delivery_count` here.
"""

from __future__ import annotations

import struct
from typing import Any

from amqpd.protocol.constants import FLAG_HEADERS
from amqpd.protocol.methods import decode_table
from amqpd.protocol.properties import PropertyScan, encode_table, rewrite_properties

HEADER = "x-delivery-count"
_FIELD_NAME = bytes([len(HEADER)]) + HEADER.encode()
_long = struct.Struct(">q")
_CACHE: dict[tuple[bytes, int], bytes] = {}
_CACHE_MAX = 4096


def counts_deliveries(arguments: dict[str, Any]) -> bool:
    """Whether a queue declared with these arguments counts deliveries and sends x-delivery-count."""
    return arguments.get("x-queue-type") == "quorum" or "x-delivery-limit" in arguments


def delivery_limit(arguments: dict[str, Any]) -> int | None:
    """The limit a queue enforces. RabbitMQ 3.10 accepts any value and compares the count with it as an
    Erlang term: a number below every count (0, negatives) dead-letters at the first return, and a
    non-number (a string) is above every count, so it never does."""
    value = arguments.get("x-delivery-limit")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def with_delivery_count(header: bytes, count: int) -> bytes:
    """The content header with `x-delivery-count: count` in its headers table (a long long, the type
    RabbitMQ sends; a value the publisher put there is replaced), every other byte as published. Cached by
    header bytes: a queue's messages mostly share one header, and most counts are small."""
    key = (header, count)
    found = _CACHE.get(key)
    if found is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        found = _CACHE[key] = _with_count(header, count)
    return found


def _with_count(header: bytes, count: int) -> bytes:
    flags = struct.unpack_from(">H", header, 12)[0]
    body_size = struct.unpack_from(">Q", header, 4)[0]
    raw = PropertyScan(header, flags).headers_raw if flags & FLAG_HEADERS else None
    field = _FIELD_NAME + b"l" + _long.pack(count)
    if raw is None:
        table = struct.pack(">I", len(field)) + field
    elif _FIELD_NAME in raw:  # the publisher set one: replace it (rare, so decoding is fine)
        headers = decode_table(raw)
        headers.pop(HEADER, None)
        inner = encode_table(headers)[4:] + field
        table = struct.pack(">I", len(inner)) + inner
    else:  # append the field, leaving the publisher's bytes as they were
        table = struct.pack(">I", len(raw) - 4 + len(field)) + raw[4:] + field
    return rewrite_properties(header, body_size, {FLAG_HEADERS: table})
