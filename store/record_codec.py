"""Encoding of a message record: the payload of one frame in a segment file (see FORMAT.md).

    u64 message_id | u64 timestamp_ms | u8 flags | u8 exchange_len | u8 routing_key_len | u16 queue_count
    | u32 properties_len | [u64 expires_at_ms if flags & 1] | u32 queue_id * queue_count
    | exchange | routing_key | properties | body (the rest)

The queue ids are in the record so that a message routed to several queues is written once and recovery
learns which queues hold it from the record alone.
"""

from __future__ import annotations

import struct

from store.records import MessageRecord

FIXED = struct.Struct("<QQBBBHI")
_EXPIRES = struct.Struct("<Q")
FLAG_EXPIRES = 1
MAX_SHORT = 255  # exchange names and routing keys are AMQP short strings
_QUEUE_IDS: dict[int, struct.Struct] = {}
_HEADS: dict[tuple[int, bool], struct.Struct] = {}


def _queue_ids_struct(count: int) -> struct.Struct:
    found = _QUEUE_IDS.get(count)
    if found is None:
        found = _QUEUE_IDS[count] = struct.Struct(f"<{count}I")
    return found


def _head_struct(count: int, expires: bool) -> struct.Struct:
    """Fixed fields, optional expiry and queue ids in one Struct: one pack per record on the hot path."""
    key = (count, expires)
    found = _HEADS.get(key)
    if found is None:
        found = _HEADS[key] = struct.Struct(FIXED.format + ("Q" if expires else "") + f"{count}I")
    return found


def encode_record(message_id: int, record: MessageRecord, queue_ids: list[int]) -> bytes:
    # Names are bytes in AMQP: invalid UTF-8 arrives as surrogates (surrogateescape) and goes back as sent.
    exchange = record.exchange.encode("utf-8", "surrogateescape")
    routing_key = record.routing_key.encode("utf-8", "surrogateescape")
    if len(exchange) > MAX_SHORT or len(routing_key) > MAX_SHORT:
        raise ValueError("exchange and routing key are limited to 255 bytes")
    # The fields as pack's arguments directly: no intermediate tuples on the per-message path.
    expires = record.expires_at_ms
    count = len(queue_ids)
    if expires is None:
        head = _head_struct(count, False).pack(
            message_id,
            record.timestamp_ms,
            0,
            len(exchange),
            len(routing_key),
            count,
            len(record.properties),
            *queue_ids,
        )
    else:
        head = _head_struct(count, True).pack(
            message_id,
            record.timestamp_ms,
            FLAG_EXPIRES,
            len(exchange),
            len(routing_key),
            count,
            len(record.properties),
            expires,
            *queue_ids,
        )
    return b"".join((head, exchange, routing_key, record.properties, record.body))


def decode_record(payload: bytes) -> tuple[int, tuple[int, ...], MessageRecord]:
    """(message_id, queue_ids, record) from a frame payload."""
    message_id, timestamp, flags, ex_len, rk_len, n_queues, props_len = FIXED.unpack_from(payload, 0)
    pos = FIXED.size
    expires: int | None = None
    if flags & FLAG_EXPIRES:
        (expires,) = _EXPIRES.unpack_from(payload, pos)
        pos += 8
    queue_ids: tuple[int, ...] = _queue_ids_struct(n_queues).unpack_from(payload, pos) if n_queues else ()
    pos += 4 * n_queues
    exchange = payload[pos : pos + ex_len].decode("utf-8", "surrogateescape")
    pos += ex_len
    routing_key = payload[pos : pos + rk_len].decode("utf-8", "surrogateescape")
    pos += rk_len
    properties = payload[pos : pos + props_len]
    body = payload[pos + props_len :]
    return message_id, queue_ids, MessageRecord(exchange, routing_key, properties, body, timestamp, expires)
