"""Chunk deliveries from a stream (amqpd's own consumer argument `x-amqpd-chunk`): a run of records in one
basic.deliver, as RabbitMQ's stream protocol delivers osiris chunks, so that a bulk reader (the PySpark
connector) costs the broker almost nothing per message.

A consumer asks with `x-amqpd-chunk` = the most records it wants per delivery (1 … MAX_RECORDS). Each
delivery then carries:

- exchange "" and the stream's name as routing key;
- content type `application/vnd.amqpd.stream-chunk.v2`, and a headers table with `x-stream-offset` (the
  first record's offset) and `x-amqpd-chunk` (how many offsets the chunk covers), both signed 64-bit integers;
- a body of `count` u32 lengths (big-endian), one per offset from the first, then the records one after the
  other, each as the store keeps it (store/FORMAT.md, "Record": little-endian fields, then exchange, routing
  key, the content header's bytes as published, and the body). Length 0: the record at that offset failed
  its checks on disk and is skipped, as a per-message consumer skips it; it has no bytes after the table.
  The lengths come first so that a reader finds every record with one cumulative sum, without walking the
  body record by record (amqpd/spark/chunk_rows.py does it with numpy). The first layout (`…stream-chunk`,
  a length before each record) changed its content type with it, so a reader of either layout that gets
  the other sees a delivery it does not know and falls back to message by message.

A chunk is one delivery for credit and acks: basic.qos prefetch counts chunks, an ack of its tag settles
all of it. A chunk holds what is committed when it is read (at the tail, a short chunk rather than a
wait) and stops after CHUNK_BYTES. Filtered and offset-tracking consumers get per-message deliveries only:
asking for both is refused (406), as RabbitMQ refuses arguments it cannot honour together. RabbitMQ, which
does not know the argument, ignores it and delivers message by message: a reader detects the mode by the
first delivery's content type.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.broker.arguments import amqp_type_name
from amqpd.broker.message import LogDelivery
from amqpd.broker.stored_message import route_of
from amqpd.broker.stream_log import payload_bytes
from amqpd.protocol.constants import FLAG_CONTENT_TYPE, FLAG_HEADERS
from amqpd.protocol.fastpath import shortstr

if TYPE_CHECKING:
    from amqpd.broker.stream import Cursor, StreamEntry, StreamQueue

CHUNK_ARG = "x-amqpd-chunk"
MAX_RECORDS = 65_536
CHUNK_BYTES = 1 << 20  # a chunk stops at the read step that takes it past this many bytes
READ_STEP = 256  # records read from the log at a time while filling a chunk, at most
FIRST_STEP = 16
FEED_CHUNKS = 16  # chunks per consumer per dispatch before yielding to the loop
CONTENT_TYPE = "application/vnd.amqpd.stream-chunk.v2"

_LENGTH = struct.Struct(">I")
_HEADER_HEAD = struct.Struct(">HHQH")  # class id, weight, body size, property flags
_TABLE = shortstr("x-stream-offset") + b"l%s" + shortstr(CHUNK_ARG) + b"l%s"
_I64 = struct.Struct(">q")
_PROPERTIES_HEAD = shortstr(CONTENT_TYPE)


def chunk_records(args: dict[str, Any], filtered: bool, tracking: bool, queue: str, vhost: str) -> int | None:
    """The consumer's x-amqpd-chunk (records per delivery), None when not asked for; 406 for a value that
    is not an integer in 1 … MAX_RECORDS, or with a filter or offset tracking."""
    value = args.get(CHUNK_ARG)
    if value is None:
        return None
    where = f"for queue '{queue}' in vhost '{vhost}'"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RECORDS:
        raise errors.precondition_failed(
            f"invalid arg '{CHUNK_ARG}' {where}: {{expected_integer_1_to_{MAX_RECORDS},{amqp_type_name(value)}}}"
        )
    if filtered or tracking:
        other = "x-stream-filter" if filtered else "offset tracking"
        raise errors.precondition_failed(f"invalid arg '{CHUNK_ARG}' {where}: not supported with {other}")
    return value


class ChunkDelivery(LogDelivery):
    """One chunk as its consumer gets it (see the module's docstring for the layout)."""

    __slots__ = ()

    def __init__(self, stream: str, first: int, payloads: list[bytes | None]) -> None:  # noqa: D107
        body = encode_chunk(payloads)
        self.exchange = ""
        self.routing_key = stream
        self.route = route_of("", stream)
        self.header = chunk_header(first, len(payloads), len(body))
        self.body = body
        self.size = len(body)
        self.flags = FLAG_CONTENT_TYPE | FLAG_HEADERS
        self.timestamp_ms = 0


def encode_chunk(payloads: list[bytes | None]) -> bytes:
    """The lengths table, then the records (a skipped one, None, is a length 0 and no bytes)."""
    try:  # mostly none is skipped: the list as it is (a `None in` test alone was a tenth of a re-read's cost)
        return struct.pack(f">{len(payloads)}I", *map(len, payloads)) + b"".join(payloads)  # type: ignore[arg-type]
    except TypeError:  # len(None): one was skipped
        kept = [p or b"" for p in payloads]
        return struct.pack(f">{len(kept)}I", *map(len, kept)) + b"".join(kept)


def chunk_header(first: int, count: int, body_size: int) -> bytes:
    table = _TABLE % (_I64.pack(first), _I64.pack(count))
    flags = FLAG_CONTENT_TYPE | FLAG_HEADERS
    return _HEADER_HEAD.pack(60, 0, body_size, flags) + _PROPERTIES_HEAD + _LENGTH.pack(len(table)) + table


def feed_chunks(stream: StreamQueue, cursor: Cursor, entry: type[StreamEntry]) -> None:
    """Deliver chunks from the cursor while its consumer has room, at most FEED_CHUNKS per call (the rest
    on the loop's next turn). `entry`: stream.py's StreamEntry (which imports this module), whose ack
    moves the cursor as a single delivery's does."""
    consumer = cursor.consumer
    for start, end in stream.steps(cursor, FEED_CHUNKS, cursor.chunk):
        payloads = _read_chunk(stream, start, end)
        cursor.next = start + len(payloads)
        cursor.outstanding.add(start, start + 1)
        delivery = ChunkDelivery(stream.name, start, payloads)
        consumer.channel.deliver_many(consumer, stream, [entry(delivery, start, cursor)])


def _read_chunk(stream: StreamQueue, start: int, end: int) -> list[bytes | None]:
    """Records [start, end), or fewer: the read stops once it holds CHUNK_BYTES. Steps are sized by the
    records read so far (a first small one), so large records are not read far past the limit."""
    payloads: list[bytes | None] = []
    size = 0
    at = start
    step = FIRST_STEP
    while at < end and size < CHUNK_BYTES:
        read = stream.log.read_raw(at, min(step, end - at))[1]  # `at` is kept: the caller clipped start
        payloads += read
        size += payload_bytes(read)
        at += len(read)
        step = min(READ_STEP, (CHUNK_BYTES - size) * len(payloads) // max(size, 1) + 1)
    return payloads
