"""A stream queue's rules: which declaration arguments it takes, its retention settings, and the consumer's
`x-stream-offset` and filter arguments, checked with RabbitMQ 3.10's error texts.

Where RabbitMQ 3.10 crashes the connection with 541 INTERNAL_ERROR (an x-max-age or offset string it cannot
parse, an offset of an unexpected type), these checks answer 406 PRECONDITION_FAILED with the same text it
gives for the cases it does parse."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from amqpd import errors
from amqpd.broker.arguments import amqp_type_name

STREAM = "stream"
TYPE_NAME = "rabbit_stream_queue"  # as RabbitMQ names the queue type in its error texts

DEFAULT_MAX_SEGMENT_SIZE = 500_000_000  # RabbitMQ's default x-stream-max-segment-size-bytes

# Queue arguments a stream refuses (RabbitMQ 3.10's list of what other queue types understand).
REFUSED_QUEUE_ARGS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-dead-letter-strategy",
    "x-queue-master-locator",
    "x-queue-version",
)
REFUSED_CONSUMER_ARGS = ("x-priority", "x-cancel-on-ha-failover")
EQUIVALENCE_ARGS = ("x-max-age", "x-stream-max-segment-size-bytes")

# Y M D h m s, as RabbitMQ reads x-max-age and interval offsets: one positive number and one unit.
_UNIT_SECONDS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}
_AGE = re.compile(r"(\d+)([YMDhms])")

FIRST, LAST, NEXT = "first", "last", "next"


def is_stream(arguments: Mapping[str, Any]) -> bool:
    return arguments.get("x-queue-type") == STREAM


def _invalid(name: str, queue: str, vhost: str, detail: str) -> errors.ChannelError:
    return errors.precondition_failed(f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {detail}")


def _type_name(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, int) and not isinstance(value, bool):
        return "signedint"
    return amqp_type_name(value)


def parse_age_ms(value: str) -> int | None:
    """'7D' -> milliseconds; None when it is not one positive number and one unit."""
    m = _AGE.fullmatch(value)
    if m is None or int(m.group(1)) == 0:
        return None
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)] * 1000


def check_stream_declaration(
    args: dict, queue: str, vhost: str, durable: bool, exclusive: bool, auto_delete: bool
) -> None:
    """A stream is durable, shared and not auto-delete, and takes only its own arguments."""
    for bad, prop in ((not durable, "non-durable"), (exclusive, "exclusive-owner"), (auto_delete, "auto-delete")):
        if bad:
            raise errors.precondition_failed(f"invalid property '{prop}' for queue '{queue}' in vhost '{vhost}'")
    if "x-max-age" in args:
        age = args["x-max-age"]
        if not isinstance(age, str):
            raise _invalid("x-max-age", queue, vhost, f"{{unacceptable_type,{_type_name(age)}}}")
        if parse_age_ms(age) is None:
            raise _invalid("x-max-age", queue, vhost, "invalid_max_age")
    size = args.get("x-stream-max-segment-size-bytes")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool):
            raise _invalid(
                "x-stream-max-segment-size-bytes", queue, vhost, f'"expected integer, got {amqp_type_name(size)}"'
            )
        if size < 0:
            raise _invalid("x-stream-max-segment-size-bytes", queue, vhost, f"{{value_negative,{size}}}")
    for name in REFUSED_QUEUE_ARGS:
        if name in args:
            raise errors.precondition_failed(
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}' of queue type {TYPE_NAME}"
            )


@dataclass(frozen=True)
class Retention:
    max_age_ms: int | None
    max_bytes: int | None
    segment_bytes: int

    @classmethod
    def from_arguments(cls, args: dict) -> Retention:
        age = args.get("x-max-age")
        size = args.get("x-stream-max-segment-size-bytes")
        return cls(
            parse_age_ms(age) if isinstance(age, str) else None,
            args.get("x-max-length-bytes"),
            size if size else DEFAULT_MAX_SEGMENT_SIZE,  # 0 is accepted by RabbitMQ; read it as the default
        )


@dataclass(frozen=True)
class OffsetSpec:
    """Where a consumer starts: FIRST / LAST / NEXT, an offset, or a time (ms since the epoch)."""

    kind: str  # "first", "last", "next", "offset", "time"
    value: int = 0


def parse_offset_spec(value: Any, queue: str, vhost: str, now_ms: int) -> OffsetSpec:
    if value is None:
        return OffsetSpec(NEXT)
    if isinstance(value, str) and value in (FIRST, LAST, NEXT):
        return OffsetSpec(value)
    if isinstance(value, (bytes, bytearray)) and value in (b"first", b"last", b"next"):  # pika's, Go's []byte
        return OffsetSpec(value.decode())
    if isinstance(value, int) and not isinstance(value, bool):
        return OffsetSpec("offset", max(value, 0))  # before the log's start reads from the first
    if isinstance(value, datetime.datetime):  # an AMQP timestamp: whole seconds
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return OffsetSpec("time", int(moment.timestamp()) * 1000)
    if isinstance(value, str):
        age = parse_age_ms(value)
        if age is not None:
            return OffsetSpec("time", now_ms - age)
    if isinstance(value, (str, bytes)):
        text = value if isinstance(value, str) else value.decode("utf-8", "replace")
        detail = f'{{invalid_stream_offset_arg,{{longstr,<<"{text}">>}}}}'
    else:
        detail = f"{{invalid_stream_offset_arg,{{{amqp_type_name(value)},{value}}}}}"
    raise _invalid("x-stream-offset", queue, vhost, detail)


def check_consumer_arguments(args: dict, queue: str, vhost: str) -> None:
    for name in REFUSED_CONSUMER_ARGS:
        if name in args:
            raise errors.precondition_failed(
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}' of queue type {TYPE_NAME}"
            )


def parse_filter(args: dict, queue: str, vhost: str) -> tuple[frozenset[str] | None, bool]:
    """x-stream-filter (a string or an array of strings) and x-stream-match-unfiltered (RabbitMQ 3.13's
    names). None: no filter, every message."""
    raw = args.get("x-stream-filter")
    if raw is None:
        return None, False
    values = raw if isinstance(raw, list) else [raw]
    names = []
    for v in values:
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if not isinstance(v, str):
            raise _invalid("x-stream-filter", queue, vhost, f"{{unacceptable_type,{amqp_type_name(v)}}}")
        names.append(v)
    unfiltered = args.get("x-stream-match-unfiltered", False)
    if not isinstance(unfiltered, bool):
        raise _invalid("x-stream-match-unfiltered", queue, vhost, f"{{unacceptable_type,{amqp_type_name(unfiltered)}}}")
    return frozenset(names), unfiltered
