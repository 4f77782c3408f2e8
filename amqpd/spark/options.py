"""The connector's options, on the model of Spark's Kafka source, checked once on the driver with messages
that name the option."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from amqpd.spark.positions import AmqpPositions, Bounds, HttpPositions, Positions
from amqpd.spark.wire import Endpoint

EARLIEST, LATEST = "earliest", "latest"
ERROR = "error"  # startingOffsetsByTimestampStrategy's default, as Kafka's
KAFKA_EARLIEST, KAFKA_LATEST = -2, -1  # what Kafka's JSON offsets use for earliest and latest
# Offsets per partition by default. Spark costs tens of ms of CPU per task whatever it reads (the JVM's task start,
# the Python worker's per-task setup and gc.collect()): bench.spark_probe's no-I/O source shows the cost per row
# rising with the partitions of a read, the JVM's share alike. 500,000 offsets of 100-byte messages are ~50 MB, a few
# tenths of a second per task, the size of Spark's own file splits (128 MB): larger tasks would save little more and
# leave cores idle on mid-size reads. A read smaller than 500,000 × the cluster's cores gets fewer tasks than cores:
# minPartitions is there for that, as in Spark's Kafka source.
DEFAULT_PARTITION_OFFSETS = 500_000


class DataLossError(RuntimeError):
    """Offsets that were asked for are gone (retention deleted them) and failOnDataLoss is true."""


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name}: 'true' or 'false', got {raw!r}")
    return value == "true"


def _int(options: dict[str, str], name: str, minimum: int) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name}: an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {name}: at least {minimum}, got {value}")
    return value


def _spec(options: dict[str, str], name: str, default: str) -> str | dict[str, int]:
    raw = str(options.get(name, default)).strip()
    if raw.lower() in (EARLIEST, LATEST):
        return raw.lower()
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, int) and v >= -2 for v in parsed.values()):
        raise ValueError(
            f"option {name}: 'earliest', 'latest' or JSON like {{\"stream\": 42}} (-2 earliest, -1 latest), got {raw!r}"
        )
    return parsed


def _check_streams(name: str, spec: dict[str, int], streams: list[str]) -> None:
    unknown = set(spec) - set(streams)
    missing = set(streams) - set(spec)
    if unknown or missing:
        raise ValueError(
            f"option {name}: the JSON must name exactly the streams in queue "
            f"({', '.join(streams)}); unknown {sorted(unknown)}, missing {sorted(missing)}"
        )


def _times(options: dict[str, str], one: str, by_stream: str, streams: list[str]) -> dict[str, int] | None:
    """Per-stream times in ms from Kafka's pair of options: `one` (a time for every stream) wins over
    `by_stream` (JSON {"stream": ms}); None when neither is given."""
    every = _int(options, one, 0)
    if every is not None:
        return dict.fromkeys(streams, every)
    raw = options.get(by_stream)
    if raw is None:
        return None
    try:
        parsed = json.loads(str(raw))
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in parsed.values()
    ):
        raise ValueError(f'option {by_stream}: JSON like {{"stream": 1764028800000}} (ms since the epoch), got {raw!r}')
    _check_streams(by_stream, parsed, streams)
    return parsed


_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*")
_UNIT_S = {"ms": 0.001, None: 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def _duration_s(options: dict[str, str], name: str, default: str) -> float:
    """A time as Spark writes one ("15m", "30s", "500ms"; a bare number is ms), in seconds."""
    raw = str(options.get(name, default))
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise ValueError(f"option {name}: a duration such as '15m', '30s' or '500ms', got {raw!r}")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def headers_format(options: dict[str, Any]) -> str:
    """headersFormat: `map` (the default) or `array` (Kafka's source's headers column)."""
    lower = {k.lower(): v for k, v in options.items()}
    value = str(lower.get("headersformat", "map")).strip().lower()
    if value not in ("map", "array"):
        raise ValueError(f"option headersFormat: 'map' or 'array', got {value!r}")
    return value


READ_OPTIONS = (
    "uri",
    "queue",
    "managementUri",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "failOnDataLoss",
    "includeHeaders",
    "headersFormat",
    "maxOffsetsPerTrigger",
    "maxRecordsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxOffsetsPerPartition",
)
_READ_LOWER = {name.lower() for name in READ_OPTIONS}


@dataclass
class ReadOptions:
    uri: str
    endpoint: Endpoint
    management_uri: str | None
    streams: list[str]
    starting: str | dict[str, int]
    ending: str | dict[str, int]
    starting_times: dict[str, int] | None
    ending_times: dict[str, int] | None
    timestamp_strategy: str
    fail_on_data_loss: bool
    include_headers: bool
    headers_array: bool  # headersFormat=array: Kafka's array<struct<key, value binary>> instead of the map
    max_per_trigger: int | None
    min_per_trigger: int | None
    max_trigger_delay_s: float
    min_partitions: int
    partition_offsets: int

    @classmethod
    def parse(cls, options: dict[str, Any], streaming: bool) -> ReadOptions:
        options = {k: v for k, v in options.items()}
        lower = {k.lower(): v for k, v in options.items()}  # Spark passes options case-insensitively

        def get(name: str) -> dict[str, str]:
            return {name: lower[name.lower()]} if name.lower() in lower else {}

        unknown = sorted(k for k in options if k.lower() not in _READ_LOWER)
        if unknown:
            raise ValueError(f"option {unknown[0]} is not known to the amqpd source for reading (see docs/spark.md)")
        merged: dict[str, str] = {}
        for name in READ_OPTIONS:
            merged.update(get(name))
        if "uri" not in merged:
            raise ValueError("option uri is required: amqp://user:password@host:port/vhost")
        endpoint = Endpoint.parse(merged["uri"])
        streams = [s.strip() for s in merged.get("queue", "").split(",") if s.strip()]
        if not streams:
            raise ValueError("option queue is required: one stream or several, comma-separated")
        starting = _spec(merged, "startingOffsets", LATEST if streaming else EARLIEST)
        ending = _spec(merged, "endingOffsets", LATEST)
        for name in ("minOffsetsPerTrigger", "maxTriggerDelay"):
            if not streaming and name in merged:
                raise ValueError(f"option {name} is for streaming reads only")
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if streaming and name in merged:
                raise ValueError(f"option {name} is for batch reads only (a stream has no end)")
        if not streaming and starting == LATEST:
            raise ValueError(
                "option startingOffsets: 'latest' is not allowed for a batch read (it would read "
                "nothing); use 'earliest', JSON offsets or startingTimestamp"
            )
        if not streaming and ending == EARLIEST:
            raise ValueError("option endingOffsets: 'earliest' is not allowed for a batch read")
        for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
            if isinstance(spec, dict):
                _check_streams(name, spec, streams)
            if name == "endingOffsets" and isinstance(spec, dict) and KAFKA_EARLIEST in spec.values():
                raise ValueError("option endingOffsets: -2 (earliest) is not allowed for a batch read")
        strategy = str(merged.get("startingOffsetsByTimestampStrategy", ERROR)).strip().lower()
        if strategy not in (ERROR, LATEST):
            raise ValueError(f"option startingOffsetsByTimestampStrategy: 'error' or 'latest', got {strategy!r}")
        per_trigger = _int(merged, "maxOffsetsPerTrigger", 1)
        if per_trigger is None:
            per_trigger = _int(merged, "maxRecordsPerTrigger", 1)
        management = merged.get("managementUri") or None  # an override only: offsets come over AMQP
        return cls(
            uri=merged["uri"],
            endpoint=endpoint,
            management_uri=management,
            streams=streams,
            starting=starting,
            ending=ending,
            starting_times=_times(merged, "startingTimestamp", "startingOffsetsByTimestamp", streams),
            ending_times=_times(merged, "endingTimestamp", "endingOffsetsByTimestamp", streams),
            timestamp_strategy=strategy,
            fail_on_data_loss=_bool(merged, "failOnDataLoss", True),
            include_headers=_bool(merged, "includeHeaders", False),
            headers_array=headers_format(merged) == "array",
            max_per_trigger=per_trigger,
            min_per_trigger=_int(merged, "minOffsetsPerTrigger", 1),
            max_trigger_delay_s=_duration_s(merged, "maxTriggerDelay", "15m"),
            min_partitions=_int(merged, "minPartitions", 1) or 1,
            partition_offsets=_int(merged, "maxOffsetsPerPartition", 1) or DEFAULT_PARTITION_OFFSETS,
        )

    def positions(self) -> Positions:
        if self.management_uri:
            return HttpPositions(self.management_uri, self.endpoint)
        return AmqpPositions(self.endpoint)

    def start_offset(self, positions: Positions, stream: str, bounds: Bounds) -> int:
        """Where reading starts in one stream, checked against what retention kept."""
        if self.starting_times is not None:
            return self._start_at_time(positions, stream, bounds)
        spec = self.starting
        if isinstance(spec, dict):
            value = spec[stream]
            return bounds.first if value == KAFKA_EARLIEST else bounds.end if value == KAFKA_LATEST else value
        return bounds.first if spec == EARLIEST else bounds.end

    def _start_at_time(self, positions: Positions, stream: str, bounds: Bounds) -> int:
        """Kafka's rule: the first offset appended at or after the time; when there is none, the strategy
        says whether that is an error (the default) or the stream's end."""
        assert self.starting_times is not None
        at = self.starting_times[stream]
        offset = positions.offset_at(stream, at)
        # the broker answers its end when nothing is that recent; asked again, as it may have grown since `bounds`
        if offset < bounds.end or offset < positions.bounds(stream).end:
            return offset
        if self.timestamp_strategy == LATEST:
            return offset
        raise ValueError(
            f"amqpd stream '{stream}': no message was appended at or after {at} ms (the starting timestamp). "
            "Set startingOffsetsByTimestampStrategy=latest to start at the stream's end instead."
        )

    def end_offset(self, positions: Positions, stream: str, bounds: Bounds) -> int:
        if self.ending_times is not None:
            # Kafka's rule: end before the first message at or after the time; none that recent: the end
            return min(positions.offset_at(stream, self.ending_times[stream]), bounds.end)
        spec = self.ending
        if isinstance(spec, dict) and spec[stream] != KAFKA_LATEST:
            return min(spec[stream], bounds.end)  # what does not exist yet is not waited for
        return bounds.end

    def check_loss(self, stream: str, start: int, first: int) -> int:
        """The start offset to use when retention already deleted below `first`."""
        if start >= first:
            return start
        if self.fail_on_data_loss:
            raise DataLossError(
                f"amqpd stream '{stream}': offsets {start}..{first - 1} were deleted by retention before they "
                f"were read (the stream now starts at {first}). Set failOnDataLoss=false to go on from {first}."
            )
        return first
