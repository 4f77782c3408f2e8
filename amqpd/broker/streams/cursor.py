"""A consumer's place in a stream (Cursor), what it has out (StreamEntry, StreamRun), and what the stream's
readers need of the stream (Feed): the modules that deliver from a stream (chunks.py, replay.py) and the
stream itself (stream.py) all stand on this one."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from amqpd.broker.delivery.unacked import Run
from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.streams.log import StreamLog
from amqpd.broker.streams.offsets import Offsets, OffsetSet
from amqpd.protocol.constants import FLAG_HEADERS
from amqpd.protocol.methods import decode_table
from amqpd.protocol.properties import PropertyScan
from store import MessageRecord

if TYPE_CHECKING:
    from amqpd.broker.delivery.consumer import Consumer
    from amqpd.broker.queues.queue import Queue

TIMESTAMP_ARG = "x-stream-timestamp"
_FLAGS = struct.Struct(">H")


class Feed(Protocol):
    """A stream as the readers that deliver from it see it (StreamQueue)."""

    name: str
    log: StreamLog

    def steps(self, cursor: Cursor, budget: int, span: int | None = None) -> Iterator[tuple[int, int]]: ...


class StreamEntry(Entry):
    """A delivery from a stream: seq is its offset; the cursor it was read for takes its ack."""

    __slots__ = ("cursor",)

    def __init__(self, msg: Message, offset: int, cursor: Cursor) -> None:
        self.msg = msg
        self.seq = offset
        self.redelivered = False
        self.expires_at = None
        self.cursor = cursor


class Cursor:
    """One consumer's place in the stream."""

    __slots__ = (
        "consumer",
        "next",
        "filter",
        "match_unfiltered",
        "tracking",
        "outstanding",
        "with_time",
        "chunk",
        "layout",
        "moved",
        "sent",
        "filling",
    )

    def __init__(
        self,
        consumer: Consumer,
        start: int,
        filter_values: frozenset[str] | None,
        match_unfiltered: bool,
        tracking: bool,
        chunk: int,
        layout: int,
        moved: Callable[[Cursor], None],
    ) -> None:
        self.consumer = consumer
        self.next = start
        self.filter = filter_values
        self.match_unfiltered = match_unfiltered
        self.tracking = tracking
        self.outstanding = OffsetSet()  # delivered, not yet acked
        self.with_time = consumer.arguments.get(TIMESTAMP_ARG) is True
        self.chunk = chunk  # records per chunk delivery (checked), 0: none
        self.layout = layout  # the chunks' layout (streams/chunks.py)
        self.moved = moved  # the stream saves a tracking consumer's place
        self.sent = 0  # bytes delivered to it in this dispatch (StreamQueue.steps yields past FEED_BYTES)
        self.filling: object = None  # a chunk being filled while the store reads (streams/chunks.py ChunkFill)

    def wants(self, record: MessageRecord) -> bool:
        if self.filter is None:
            return True
        value = filter_value(record.properties)
        if value is None:
            return self.match_unfiltered
        return value in self.filter

    def resume_offset(self) -> int:
        """Where this consumer would go on after a restart: no gap (the oldest unacked delivery), no repeat
        (past everything acked or filtered out)."""
        first = self.outstanding.first()
        return self.next if first is None else first

    def acked(self, first: int, end: int) -> None:
        """A single delivery (or a chunk, which stands at its first offset) was acked."""
        self.outstanding.discard(first, end)
        if self.tracking:
            self.moved(self)

    def run_acked(self, offsets: Offsets) -> None:
        """A run of batched deliveries (streams/replay.py) was acked."""
        self.outstanding.discard_offsets(offsets)
        if self.tracking:
            self.moved(self)


class StreamRun(Run[Offsets]):
    """Deliveries of a stream to one consumer: items[i] is the offset that went out with tag first + i,
    read for `cursor`."""

    __slots__ = ("cursor",)
    consumer: Consumer

    def __init__(
        self, first: int, offsets: Offsets, queue: Queue, consumer: Consumer, cursor: Cursor, at: float
    ) -> None:
        super().__init__(first, offsets, queue, consumer, at)
        self.cursor = cursor

    def split_off(self, upto: int) -> StreamRun:
        k = upto - self.first + 1
        offsets = self.items
        taken = StreamRun(self.first, offsets[:k], self.queue, self.consumer, self.cursor, self.at)
        self.items = offsets[k:]  # a range is sliced without copying its offsets
        self.first = upto + 1
        return taken

    def split_last(self) -> StreamRun:
        offsets = self.items
        self.items = offsets[:-1]
        return StreamRun(self.first + len(offsets) - 1, offsets[-1:], self.queue, self.consumer, self.cursor, self.at)

    def acked(self) -> None:
        self.cursor.run_acked(self.items)

    def give_back(self, requeue: bool, into: dict[Queue, list[Entry]]) -> None:
        """A stream never redelivers: the offsets stay outstanding in the cursor, so a tracking consumer
        resumes at the oldest of them."""


def filter_value(header: bytes) -> str | None:
    """A record's x-stream-filter-value header (RabbitMQ 3.13's name), if any."""
    flags = _FLAGS.unpack_from(header, 12)[0]
    if not flags & FLAG_HEADERS:
        return None
    raw = PropertyScan(header, flags).headers_raw
    value = decode_table(raw).get("x-stream-filter-value") if raw else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None
