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
`amqpd.protocol.properties.with_delivery_count` (the table re-encoded key-sorted, as RabbitMQ does).
"""

from __future__ import annotations

import struct
from typing import Any

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
