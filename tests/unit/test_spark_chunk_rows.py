"""Chunk deliveries into record batches (amqpd/spark/chunk_rows.py) for records the in-process differential
(test_spark_chunks.py) cannot produce: records as the disk store writes them for several queues with an
expiry, names that are not UTF-8, damaged records, and chunks that do not add up."""

from __future__ import annotations

import struct

import pytest

from amqpd.broker.stream_chunks import encode_chunk
from amqpd.spark.chunk_rows import chunk_batch
from amqpd.spark.wire import BrokerError, Chunks
from store.record_codec import encode_record
from store.records import MessageRecord

PLAIN = struct.pack(">HHQH", 60, 0, 0, 0x1000) + b"\x02"  # a content header's bytes: persistent, nothing else


def record(body: bytes, exchange: str = "", routing_key: str = "s", **fields: object) -> MessageRecord:
    return MessageRecord(exchange, routing_key, PLAIN, body, 1_700_000_000_000, **fields)  # type: ignore[arg-type]


def rows(payloads: list[bytes | None], first: int = 0, stop: int = 1 << 62) -> dict[str, list[object]]:
    chunks = Chunks(stop)
    chunks.add(encode_chunk(payloads), first, len(payloads))
    return chunk_batch("s", chunks, include_headers=False).to_pydict()


def test_a_record_for_several_queues_with_an_expiry_reads_as_its_names_and_body() -> None:
    payloads: list[bytes | None] = [
        encode_record(7, record(b"a" * 30, "amq.fanout", "key", expires_at_ms=1_800_000_000_000), [1, 2, 3]),
        encode_record(8, record(b"b"), []),
    ]
    got = rows(payloads, first=40)
    assert got["offset"] == [40, 41]
    assert got["exchange"] == ["amq.fanout", ""]
    assert got["routing_key"] == ["key", "s"]
    assert got["body"] == [b"a" * 30, b"b"]


def test_names_that_are_not_utf8_read_with_replacement_characters_as_message_by_message() -> None:
    name = b"caf\xe9-\xff-long-enough-to-be-out-of-line".decode("utf-8", "surrogateescape")
    got = rows([encode_record(1, record(b"x", "ex\xff".encode().decode(), name), [])])
    assert got["routing_key"] == [b"caf\xe9-\xff-long-enough-to-be-out-of-line".decode("utf-8", "replace")]
    assert got["exchange"] == ["ex\xff"]


def test_damaged_records_and_offsets_past_the_stop_are_left_out() -> None:
    payloads: list[bytes | None] = [encode_record(i, record(b"%d" % i), []) for i in range(6)]
    payloads[2] = None
    got = rows(payloads, first=10, stop=15)
    assert got["offset"] == [10, 11, 13, 14]
    assert got["body"] == [b"0", b"1", b"3", b"4"]


def test_a_chunk_whose_lengths_do_not_add_up_to_its_body_is_an_error() -> None:
    body = encode_chunk([encode_record(1, record(b"x"), [])])
    for broken in (body[:-1], body + b"\x00"):
        chunks = Chunks(1 << 62)
        chunks.add(broken, 0, 1)
        with pytest.raises(BrokerError, match="do not add up"):
            chunk_batch("s", chunks, include_headers=False)


def test_a_record_shorter_than_its_fields_is_an_error() -> None:
    whole = encode_record(1, record(b""), [])
    for cut in (whole[:20], whole[:-2]):  # shorter than the fixed fields; properties running past the end
        chunks = Chunks(1 << 62)
        chunks.add(encode_chunk([cut]), 0, 1)
        with pytest.raises(BrokerError):
            chunk_batch("s", chunks, include_headers=False)
