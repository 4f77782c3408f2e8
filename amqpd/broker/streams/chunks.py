"""Chunk deliveries from a stream (amqpd's own consumer argument `x-amqpd-chunk`): a run of records in one
basic.deliver, as RabbitMQ's stream protocol delivers osiris chunks, so that a bulk reader (the PySpark
connector) costs the broker almost nothing per message.

A consumer asks with `x-amqpd-chunk` = the most records it wants per delivery (1 … MAX_RECORDS), and with
`x-amqpd-chunk-layout` = the newest body layout it reads (2 when absent: readers older than layout 3 do not
send it). It gets the newest layout this broker knows up to that one, so an older reader keeps getting
layout 2 and a newer reader on an older broker (which ignores the argument, as it ignores any it does not
know) gets layout 2 too; the content type says which, and a reader reads both. A value that is not an
integer from 2 on is refused (406). Each delivery carries:

- exchange "" and the stream's name as routing key;
- content type `application/vnd.amqpd.stream-chunk.v<layout>`, and a headers table with `x-stream-offset`
  (the first record's offset) and `x-amqpd-chunk` (how many offsets the chunk covers), both signed 64-bit
  integers;
- layout 2: a body of `count` u32 lengths (big-endian), one per offset from the first, then the records one
  after the other, each as the store keeps it (store/FORMAT.md, "Record": little-endian fields, then
  exchange, routing key, the content header's bytes as published, and the body). Length 0: the record at
  that offset failed its checks on disk and is skipped, as a per-message consumer skips it; it has no bytes
  after the table. The lengths come first so that a reader finds every record with one cumulative sum,
  without walking the body record by record (amqpd/spark/chunk_rows.py does it with numpy).
- layout 3: a body of a u32 run count, then per run three u32 (big-endian): how many records, the bytes
  before each record (`gap`), each record's length; then the runs' bytes one after the other, each record
  after its gap. A stretch of records of one size that a read has already checked since the broker started
  (store/checked_runs.py) is sent as its segment frames lie on disk, with one pread and nothing per record:
  gap 24, the store's frame header (store/FORMAT.md, "Frame"), which a reader skips. Any other record is a
  run of its own or joins the one before when it has the same size, with gap 0 (the record as in layout
  2); length 0 is a skipped record, as in layout 2. A reader finds every record with one repeat and one
  cumulative sum over the runs. Layout 2's 4 bytes a record became a few runs a chunk (and 24 bytes of
  frame header a record on the wire), and a re-read costs the broker no bytes object, length or join per
  record (docs and bench/ hold the figures). Records are checked in full on their first read as before
  (that read costs what it did): layout 3 sends as frames only what passed.
- The first layout (`…stream-chunk`, a length before each record) had a content type of its own too: a
  reader that gets a layout it does not know sees a delivery it does not know and falls back to message by
  message.

A chunk is one delivery for credit and acks: basic.qos prefetch counts chunks, an ack of its tag settles
all of it. A chunk holds what is committed when it is read (at the tail, a short chunk rather than a
wait) and stops after CHUNK_BYTES. Filtered and offset-tracking consumers get per-message deliveries only:
asking for both is refused (406), as RabbitMQ refuses arguments it cannot honour together. RabbitMQ, which
does not know the argument, ignores it and delivers message by message: a reader detects the mode by the
first delivery's content type.
"""

from __future__ import annotations

import struct
import sys
from array import array
from itertools import chain, groupby
from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.broker.arguments import amqp_type_name
from amqpd.broker.message import LogDelivery
from amqpd.broker.stored_message import route_of
from amqpd.broker.streams.cursor import StreamEntry
from amqpd.broker.streams.log import StreamLog, payload_bytes
from amqpd.protocol.constants import FLAG_CONTENT_TYPE, FLAG_HEADERS
from amqpd.protocol.fastpath import shortstr
from store import FRAME_HEADER_SIZE

if TYPE_CHECKING:
    from amqpd.broker.streams.cursor import Cursor, Feed

CHUNK_ARG = "x-amqpd-chunk"
LAYOUT_ARG = "x-amqpd-chunk-layout"
MAX_RECORDS = 65_536
CHUNK_BYTES = 1 << 20  # a chunk stops at the read step that takes it past this many bytes
READ_STEP = 256  # records read from the log at a time while filling a chunk, at most
FIRST_STEP = 16
FEED_CHUNKS = 16  # chunks per consumer per dispatch before yielding to the loop
CONTENT_TYPES = {2: "application/vnd.amqpd.stream-chunk.v2", 3: "application/vnd.amqpd.stream-chunk.v3"}
NEWEST_LAYOUT = 3

_LENGTH = struct.Struct(">I")
_HEADER_HEAD = struct.Struct(">HHQH")  # class id, weight, body size, property flags
_TABLE = shortstr("x-stream-offset") + b"l%s" + shortstr(CHUNK_ARG) + b"l%s"
_I64 = struct.Struct(">q")
_PROPERTIES_HEADS = {layout: shortstr(name) for layout, name in CONTENT_TYPES.items()}
_NATIVE_LITTLE = sys.byteorder == "little"  # runs tables are big-endian u32: array("I") is native
assert array("I").itemsize == 4, "layout 3's runs table needs a 4-byte array('I')"
_ONE_BARE = array("I", [1, 0, 0])  # a run of one record with no gap (its length set after)
_ONE_FRAME = array("I", [1, FRAME_HEADER_SIZE, 0])  # a run of frames (its count and length set after)


def chunk_records(args: dict[str, Any], filtered: bool, tracking: bool, queue: str, vhost: str) -> int | None:
    """The consumer's x-amqpd-chunk (records per delivery), None when not asked for; 406 for a value that
    is not an integer in 1 … MAX_RECORDS, or with a filter or offset tracking, or for a layout asked for
    that is not an integer from 2 on."""
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
    layout = args.get(LAYOUT_ARG, 2)
    if isinstance(layout, bool) or not isinstance(layout, int) or layout < 2:
        raise errors.precondition_failed(
            f"invalid arg '{LAYOUT_ARG}' {where}: {{expected_integer_from_2,{amqp_type_name(layout)}}}"
        )
    return value


def chunk_layout(args: dict[str, Any]) -> int:
    """The layout a chunk consumer gets (checked by chunk_records): the newest this broker knows up to the
    one the reader asked for; 2 when it asked for none (a reader older than layout 3). Without
    x-amqpd-chunk the argument means nothing and is not checked: 2 whatever it is."""
    layout = args.get(LAYOUT_ARG, 2)
    if args.get(CHUNK_ARG) is None or isinstance(layout, bool) or not isinstance(layout, int):
        return 2
    return min(layout, NEWEST_LAYOUT)


class ChunkDelivery(LogDelivery):
    """One chunk as its consumer gets it (see the module's docstring for the layouts). Its body is kept as
    parts (`parts`: the runs table, then the records as read): the channel frames them without a join."""

    __slots__ = ("parts",)

    def __init__(self, stream: str, first: int, count: int, parts: list[bytes], layout: int) -> None:  # noqa: D107
        size = sum(map(len, parts))
        self.exchange = ""
        self.routing_key = stream
        self.route = route_of("", stream)
        self.header = chunk_header(first, count, size, layout)
        self.parts = parts
        self.size = size
        self.flags = FLAG_CONTENT_TYPE | FLAG_HEADERS
        self.timestamp_ms = 0

    @property
    def body(self) -> bytes:  # type: ignore[override]
        """The parts joined, for whoever asks (the delivery path does not)."""
        return b"".join(self.parts)


def encode_chunk(payloads: list[bytes | None]) -> bytes:
    """Layout 2: the lengths table, then the records (a skipped one, None, is a length 0 and no bytes)."""
    try:  # mostly none is skipped: the list as it is (a `None in` test alone was a tenth of a re-read's cost)
        return struct.pack(f">{len(payloads)}I", *map(len, payloads)) + b"".join(payloads)  # type: ignore[arg-type]
    except TypeError:  # len(None): one was skipped
        kept = [p or b"" for p in payloads]
        return struct.pack(f">{len(kept)}I", *map(len, kept)) + b"".join(kept)


def runs_table(runs: list[tuple[int, int, int]]) -> bytes:
    """Layout 3's runs table, the body's first bytes. Runs alike are joined where they are made (a read
    step's records of one size), not here: a chunk of records of many sizes has a run a record."""
    return packed_runs(array("I", chain.from_iterable(runs)))


def packed_runs(flat: array[int]) -> bytes:
    """runs_table for the runs' fields one after the other (count, gap, length of each). An array, not a
    struct.pack of a list: a chunk of records of many sizes has three fields a record, which struct packed
    one Python int at a time."""
    table = array("I", [len(flat) // 3])
    table += flat
    if _NATIVE_LITTLE:
        table.byteswap()
    return table.tobytes()


def chunk_header(first: int, count: int, body_size: int, layout: int = 2) -> bytes:
    table = _TABLE % (_I64.pack(first), _I64.pack(count))
    flags = FLAG_CONTENT_TYPE | FLAG_HEADERS
    head = _PROPERTIES_HEADS[layout]
    return _HEADER_HEAD.pack(60, 0, body_size, flags) + head + _LENGTH.pack(len(table)) + table


def feed_chunks(stream: Feed, cursor: Cursor) -> None:
    """Deliver chunks from the cursor while its consumer has room, at most FEED_CHUNKS and about the stream's
    FEED_BYTES per call (the rest on the loop's next turn). A chunk is one StreamEntry, whose ack moves the
    cursor as a single delivery's does."""
    consumer = cursor.consumer
    layout = cursor.layout
    for start, end in stream.steps(cursor, FEED_CHUNKS, cursor.chunk):
        if layout >= 3:
            count, parts = _read_runs(stream, cursor, start, end)
        else:
            payloads = _read_chunk(stream, cursor, start, end)
            count, parts = len(payloads), [encode_chunk(payloads)]
        if not count:  # nothing readable after all (the steps said there was): no empty chunk
            return
        cursor.next = start + count
        cursor.outstanding.add(start, start + 1)
        delivery = ChunkDelivery(stream.name, start, count, parts, layout)
        consumer.channel.deliver_parts(consumer, consumer.queue, StreamEntry(delivery, start, cursor), parts, count)
        cursor.sent += delivery.size


def _read_chunk(stream: Feed, cursor: Cursor, start: int, end: int) -> list[bytes | None]:
    """Records [start, end), or fewer: the read stops once it holds CHUNK_BYTES. Steps are sized by the
    records read so far (a first small one), so large records are not read far past the limit. As in
    _read_runs, what a step that waits for the store's read worker finds filled is kept (ChunkFill)."""
    fill = _fill_for(cursor, start)
    payloads = fill.payloads
    while fill.at < end and fill.size < CHUNK_BYTES:
        read = stream.log.read_raw(fill.at, min(fill.step, end - fill.at))[1]  # `at` is kept: start was clipped
        if not read:
            break
        payloads += read
        fill.size += payload_bytes(read)
        fill.at += len(read)
        fill.step = _next_step(fill.size, len(payloads))
    cursor.filling = None
    return payloads


def _fill_for(cursor: Cursor, start: int) -> ChunkFill:
    """The chunk the cursor was filling from `start` when a read step waited, else a new one (kept on it)."""
    fill = cursor.filling
    if not isinstance(fill, ChunkFill) or fill.start != start:
        fill = cursor.filling = ChunkFill(start)
    return fill


class ChunkFill:
    """A chunk part filled when the store's read worker had to be asked for more (ReadPending): kept
    on the cursor, so that the next dispatch goes on from `at` rather than reading the chunk again from its
    start (a chunk takes many read steps, each of which may wait for the worker once)."""

    __slots__ = ("start", "at", "runs", "parts", "payloads", "size", "step")

    def __init__(self, start: int) -> None:  # noqa: D107
        self.start = start
        self.at = start
        self.runs = array("I")  # count, gap and length of each run, one after the other
        self.parts: list[bytes] = []  # layout 3's records
        self.payloads: list[bytes | None] = []  # layout 2's
        self.size = 0
        self.step = FIRST_STEP


def _read_runs(stream: Feed, cursor: Cursor, start: int, end: int) -> tuple[int, list[bytes]]:
    """Layout 3's (records, body parts) for [start, end) or fewer, as _read_chunk stops: stretches of frames
    a read checked before go as the store's bytes (one pread, nothing per record, never copied again: the
    parts are not joined); the others as the store's read worker reads and checks them (read_checked, so
    that the next read of them is a stretch of frames where they are of one size), their bytes joined by
    it; only where that fails (damage, records not written yet) as read_raw gives them, joined a read step
    at a time (a few pieces a chunk to write, not a record's each). The first part is the runs table. When
    a read step has to wait for the store's read worker, what is filled so far stays on the cursor
    (ChunkFill) and the next call goes on from there."""
    fill = _fill_for(cursor, start)
    _fill_runs(stream.log, fill, end)
    cursor.filling = None
    return fill.at - start, [packed_runs(fill.runs), *fill.parts]


def _fill_runs(log: StreamLog, fill: ChunkFill, end: int) -> None:
    """_read_runs' read steps from fill.at on, each recorded in `fill` as soon as it is read (a later step
    may raise ReadPending)."""
    while fill.at < end and fill.size < CHUNK_BYTES:
        at = fill.at
        frames, data, unchecked = log.read_frames(at, end - at, CHUNK_BYTES - fill.size)
        if frames:
            fill.at += _add_frames(fill, frames)
            fill.parts.append(data)
            fill.size += len(data)
            fill.step = FIRST_STEP  # past these, on a first read, the read cache checked its stretch: read few bare
            continue
        if unchecked >= READ_STEP:  # a stretch: checked by the store's read worker as it reads it
            lengths, data = log.read_checked(at, min(unchecked, end - at), CHUNK_BYTES - fill.size)
            if lengths:
                _add_bare(fill, lengths, data)
                continue
        # a few among checked ones (a record of another size): those alone, not a cached stretch around
        # them; or damage, or records not in a segment file yet: read_raw skips what fails its checks
        read = log.read_raw(at, min(fill.step, end - at, unchecked), cached=unchecked >= READ_STEP)[1]
        if not read:
            return
        lengths = [len(p) if p is not None else 0 for p in read]
        for length, same in groupby(lengths):
            fill.runs.extend((len(list(same)), 0, length))
        fill.parts.append(b"".join([p for p in read if p is not None]))
        fill.size += sum(lengths)
        fill.at += len(read)
        fill.step = _next_step(fill.size, fill.at - fill.start)


def _add_frames(fill: ChunkFill, frames: array[int]) -> int:
    """Runs of checked frames (count, payload length, one after the other), each with the frame header as
    its gap, in bulk (a stretch of frames of many sizes is a run a frame): how many records they hold."""
    runs = _ONE_FRAME * (len(frames) // 2)
    runs[0::3] = counts = frames[0::2]
    runs[2::3] = frames[1::2]
    fill.runs += runs
    return sum(counts)


def _add_bare(fill: ChunkFill, lengths: list[int], data: bytes) -> None:
    """Records read and checked, their bytes joined: one run when they are of one size, else a run each
    (made without a Python step per record)."""
    if lengths.count(lengths[0]) == len(lengths):
        fill.runs.extend((len(lengths), 0, lengths[0]))
    else:
        runs = _ONE_BARE * len(lengths)
        runs[2::3] = array("I", lengths)
        fill.runs += runs
    fill.parts.append(data)
    fill.size += len(data)
    fill.at += len(lengths)


def _next_step(size: int, records: int) -> int:
    """Records to read next into a chunk that holds `records` of `size` bytes: about what the rest of
    CHUNK_BYTES holds at their mean size, at most READ_STEP."""
    return min(READ_STEP, (CHUNK_BYTES - size) * records // max(size, 1) + 1)
