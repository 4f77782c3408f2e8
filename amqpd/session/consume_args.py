"""basic.consume's arguments, checked in RabbitMQ's order with its texts: the consumer's priority, what a classic
queue refuses, and where a stream consumer starts (x-stream-offset, tracking, filters, chunks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amqpd import errors
from amqpd.broker.streams.args import OffsetSpec, check_consumer_arguments, parse_filter, parse_offset_spec
from amqpd.broker.streams.chunks import chunk_records


def consumer_priority(args: dict[str, Any]) -> int:
    """x-priority: an integer (a bool is not one), 0 when absent."""
    priority = args.get("x-priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise errors.precondition_failed(f"invalid x-priority argument: {priority!r}")
    return priority


def check_queue_consumer(args: dict[str, Any], queue: str, vhost: str, queue_arguments: dict[str, Any]) -> None:
    """What a classic (or quorum-declared) queue refuses of a consumer: a stream offset."""
    if "x-stream-offset" in args:
        kind = "rabbit_quorum_queue" if queue_arguments.get("x-queue-type") == "quorum" else "rabbit_classic_queue"
        raise errors.precondition_failed(
            f"invalid arg 'x-stream-offset' for queue '{queue}' in vhost '{vhost}' of queue type {kind}"
        )


@dataclass(frozen=True)
class StreamStart:
    """Where and how a stream consumer reads (StreamQueue.subscribe)."""

    spec: OffsetSpec
    filter_values: frozenset[str] | None
    match_unfiltered: bool
    tracking: bool


def stream_start(args: dict[str, Any], no_ack: bool, prefetch: int, queue: str, vhost: str, now_ms: int) -> StreamStart:
    """A stream consumer acks manually with a prefetch of its own, and starts where x-stream-offset (or its
    tracked offset) says: RabbitMQ's rules, LavinMQ's offset tracking, RabbitMQ 3.13's filters."""
    where = f"queue '{queue}' in vhost '{vhost}'"
    if no_ack:
        raise errors.not_implemented(f"automatic acknowledgement not supported by stream queues {where}")
    if not prefetch:
        raise errors.precondition_failed(f"consumer prefetch count is not set for '{where}'")
    check_consumer_arguments(args, queue, vhost)
    spec = parse_offset_spec(args.get("x-stream-offset"), queue, vhost, now_ms)
    filter_values, match_unfiltered = parse_filter(args, queue, vhost)
    # LavinMQ: tracking is asked for explicitly, or by an x-stream-offset given as void.
    void_offset = "x-stream-offset" in args and args["x-stream-offset"] is None
    tracking = args.get("x-stream-automatic-offset-tracking") is True or void_offset
    if void_offset:
        spec = parse_offset_spec("first", queue, vhost, 0)
    chunk_records(args, filter_values is not None, tracking, queue, vhost)
    return StreamStart(spec, filter_values, match_unfiltered, tracking)
