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

# After the message id: timestamp, flags, exchange length, routing key length, queue count, properties length.
_AFTER_ID = "QBBBHI"
FIXED = struct.Struct("<Q" + _AFTER_ID)
# The fixed fields with the message id skipped, for a reader that slices records without decoding them (a
# stream's replay); its size is FIXED's, the offset of the optional expiry.
FIXED_AFTER_ID = struct.Struct("<8x" + _AFTER_ID)
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
    ex_len, rk_len, names = _names(record.exchange, record.routing_key)
    return _payload(message_id, record, queue_ids, ex_len, rk_len, names)


def encode_record_head(message_id: int, record: MessageRecord, queue_ids: list[int]) -> bytes:
    """encode_record without the body at its end: the record is this followed by `record.body`. A large body
    is written after it as it is, not copied into one payload (segment_log.py)."""
    ex_len, rk_len, names = _names(record.exchange, record.routing_key)
    return _head(message_id, record, queue_ids, ex_len, rk_len) + names + record.properties


def encode_records(first_id: int, records: list[MessageRecord], queue_ids: list[int]) -> list[bytes]:
    """The payloads of records with consecutive message ids from `first_id`, for the same queues. Records
    published together share their exchange and routing key: those are encoded once for all of them. The
    head of a record without expiry (most) is packed here, without _payload's and _head's calls."""
    exchange = routing_key = ""
    ex_len, rk_len, names = 0, 0, b""
    count = len(queue_ids)
    pack_plain = _head_struct(count, False).pack
    join = b"".join
    out = []
    for message_id, record in enumerate(records, first_id):
        if record.exchange != exchange or record.routing_key != routing_key:
            exchange, routing_key = record.exchange, record.routing_key
            ex_len, rk_len, names = _names(exchange, routing_key)
        props = record.properties
        if record.expires_at_ms is None:
            head = pack_plain(message_id, record.timestamp_ms, 0, ex_len, rk_len, count, len(props), *queue_ids)
        else:
            head = _head(message_id, record, queue_ids, ex_len, rk_len)
        out.append(join((head, names, props, record.body)))
    return out


def _payload(
    message_id: int, record: MessageRecord, queue_ids: list[int], ex_len: int, rk_len: int, names: bytes
) -> bytes:
    head = _head(message_id, record, queue_ids, ex_len, rk_len)
    return b"".join((head, names, record.properties, record.body))


def _head(message_id: int, record: MessageRecord, queue_ids: list[int], ex_len: int, rk_len: int) -> bytes:
    """The fixed fields, the optional expiry and the queue ids."""
    # The fields as pack's arguments directly: no intermediate tuples on the per-message path.
    expires = record.expires_at_ms
    count = len(queue_ids)
    props_len = len(record.properties)
    if expires is None:
        return _head_struct(count, False).pack(
            message_id, record.timestamp_ms, 0, ex_len, rk_len, count, props_len, *queue_ids
        )
    return _head_struct(count, True).pack(
        message_id, record.timestamp_ms, FLAG_EXPIRES, ex_len, rk_len, count, props_len, expires, *queue_ids
    )


def _names(exchange: str, routing_key: str) -> tuple[int, int, bytes]:
    # Names are bytes in AMQP: invalid UTF-8 arrives as surrogates (surrogateescape) and goes back as sent.
    ex = exchange.encode("utf-8", "surrogateescape")
    rk = routing_key.encode("utf-8", "surrogateescape")
    if len(ex) > MAX_SHORT or len(rk) > MAX_SHORT:
        raise ValueError("exchange and routing key are limited to 255 bytes")
    return len(ex), len(rk), ex + rk


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
