"""A stream's facts over AMQP (amqpd's own consumer argument `x-amqpd-stream-info`): its first and next
offsets, the offset a time maps to and its retention settings, so that a reader that has only the AMQP
address (the PySpark connector) plans its reads without the HTTP API.

A consumer with `x-amqpd-stream-info: true` (a stream consumer as any other: manual acks and a prefetch) is
answered with consume-ok and then exactly one delivery, and nothing more until it is cancelled: exchange "",
the stream's name as routing key, content type `application/vnd.amqpd.stream-info+json` and a JSON body
(STREAM_INFO_FIELDS). With `x-amqpd-offset-at` (ms since the epoch as an integer, or an AMQP timestamp) the
body also holds `offset_at`: the first offset appended at or after that time, the stream's end when none
is. Acking the delivery is allowed and does nothing. A queue that is not a stream refuses the argument
(406); RabbitMQ ignores it and starts an ordinary consumer, so a reader checks the server's `product`
first (connection.start's server properties) rather than wait for a delivery that would never be an
answer.
"""

from __future__ import annotations

import datetime
import json
import struct
from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.broker.arguments import amqp_type_name
from amqpd.broker.delivery.unacked import Run
from amqpd.protocol.constants import FLAG_CONTENT_TYPE
from amqpd.protocol.fastpath import shortstr

if TYPE_CHECKING:
    from amqpd.broker.entry import Entry
    from amqpd.broker.queues.queue import Queue
    from amqpd.broker.streams.stream import StreamQueue

INFO_ARG = "x-amqpd-stream-info"
AT_ARG = "x-amqpd-offset-at"
CONTENT_TYPE = "application/vnd.amqpd.stream-info+json"
STREAM_INFO_FIELDS = (
    "first_offset",  # the oldest offset retention kept
    "end_offset",  # the next offset to be committed: readable offsets are [first_offset, end_offset)
    "first_timestamp",  # ms since the epoch of the oldest kept message, null when empty
    "max_age_ms",  # x-max-age in ms, null when not set
    "max_length_bytes",  # x-max-length-bytes, null when not set
    "max_segment_size_bytes",
)
_HEADER_HEAD = struct.Struct(">HHQH")  # class id, weight, body size, property flags


def wants_info(args: dict[str, Any], queue: str, vhost: str, is_stream: bool) -> bool:
    """Whether the consumer asks for the stream's facts (406 for a value that is not a boolean, or on a
    queue that is not a stream)."""
    value = args.get(INFO_ARG)
    if value is None or value is False:
        return False
    if value is not True:
        raise errors.precondition_failed(
            f"invalid arg '{INFO_ARG}' for queue '{queue}' in vhost '{vhost}': "
            f"{{expected_boolean,{amqp_type_name(value)}}}"
        )
    if not is_stream:
        raise errors.precondition_failed(
            f"invalid arg '{INFO_ARG}': queue '{queue}' in vhost '{vhost}' is not a stream"
        )
    return True


def _at_ms(value: Any, queue: str, vhost: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):  # an AMQP timestamp: whole seconds
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return int(moment.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise errors.precondition_failed(
        f"invalid arg '{AT_ARG}' for queue '{queue}' in vhost '{vhost}': "
        f"{{expected_ms_or_timestamp,{amqp_type_name(value)}}}"
    )


def info_time(args: dict[str, Any], queue: str, vhost: str) -> int | None:
    """The consumer's x-amqpd-offset-at in ms, None when not given (406 for one that is not a time)."""
    return _at_ms(args.get(AT_ARG), queue, vhost)


def info_body(stream: StreamQueue, first_timestamp: int | None, offset_at: int | None) -> bytes:
    """The JSON body of the info delivery: the stream's facts, with the times the store's read worker found
    (StreamQueue.times); `offset_at` only when x-amqpd-offset-at asked for it."""
    log, keep = stream.log, stream.retention
    first = log.first
    facts: dict[str, Any] = {
        "stream": stream.name,
        "first_offset": first,
        "end_offset": max(log.committed, first),
        "first_timestamp": first_timestamp,
        "max_age_ms": keep.max_age_ms,
        "max_length_bytes": keep.max_bytes,
        "max_segment_size_bytes": keep.segment_bytes,
    }
    if offset_at is not None:
        facts["offset_at"] = offset_at
    return json.dumps(facts, separators=(",", ":")).encode()


def info_header(body: bytes) -> bytes:
    """The delivery's content header payload: its content type only."""
    return _HEADER_HEAD.pack(60, 0, len(body), FLAG_CONTENT_TYPE) + shortstr(CONTENT_TYPE)


class InfoRun(Run["list[None]"]):
    """The info delivery in the channel's unacked table: an ack of it is accepted and settles nothing, a
    nack or a closing channel gives nothing back."""

    __slots__ = ()

    def split_off(self, upto: int) -> InfoRun:  # one delivery: never split inside
        return InfoRun(self.first, [None], self.queue, self.consumer, self.at)

    def split_last(self) -> InfoRun:
        return InfoRun(self.first, [None], self.queue, self.consumer, self.at)

    def acked(self) -> None:
        """Nothing was taken from the stream."""

    def give_back(self, requeue: bool, into: dict[Queue, list[Entry]]) -> None:
        """Nothing to give back."""
