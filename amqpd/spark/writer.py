"""Writing rows as messages: each task publishes its rows with publisher confirms and reports success only
once the broker confirmed every one of them.

Exactly once: each message gets a message_id derived from the data, so a retried task or a replayed
micro-batch publishes the same ids again, and a target stream declared with `x-message-deduplication: true`
drops the repeats (and still confirms them). Where the id comes from, first that applies:
the row's `message_id` column; the columns named by the `messageIdColumns` option (a SHA-256 of their
values); the `stream` and `offset` columns of a row read from amqpd (`stream:offset`). Without any, rows are
published without a message_id: at least once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegralType,
    MapType,
    StringType,
    StructType,
)

from amqpd.spark.positions import AmqpPositions, NotAmqpd
from amqpd.spark.wire import BrokerError, Endpoint, KeptConnections, Outgoing, Publisher

try:  # rows as Arrow record batches, without a Row object each: batch writes from 4.0, streaming from 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # pyspark 4.0
    DataSourceStreamArrowWriter = None  # type: ignore[assignment,misc]

OVERWRITE_REFUSED = (
    "amqpd streams are append-only: a write can only add messages. Use .mode('append') (a Python data source "
    "needs it named: the default save mode, errorifexists, is not supported by Spark for it)."
)


# the writer's options, and Spark's own that reach a data source with them (a streaming write's checkpoint)
WRITE_OPTIONS = ("uri", "exchange", "routing_key", "routingKey", "queue", "messageIdColumns")
SPARK_OPTIONS = ("checkpointLocation", "path")
_WRITE_LOWER = {name.lower() for name in WRITE_OPTIONS + SPARK_OPTIONS}


@dataclass
class WriteOptions:
    endpoint: Endpoint
    exchange: str
    routing_key: str
    id_columns: list[str]

    @classmethod
    def parse(cls, options: dict[str, Any]) -> WriteOptions:
        lower = {k.lower(): v for k, v in options.items()}
        unknown = sorted(k for k in options if k.lower() not in _WRITE_LOWER)
        if unknown:
            raise ValueError(f"option {unknown[0]} is not known to the amqpd source for writing (see docs/spark.md)")
        if "uri" not in lower:
            raise ValueError("option uri is required: amqp://user:password@host:port/vhost")
        cols = [c.strip() for c in str(lower.get("messageidcolumns", "")).split(",") if c.strip()]
        routing_key = lower.get("routing_key", lower.get("routingkey", lower.get("queue", "")))
        return cls(Endpoint.parse(lower["uri"]), str(lower.get("exchange", "")), str(routing_key), cols)

    @property
    def target(self) -> str:
        """What the options publish to, for messages."""
        if self.exchange:
            return f"exchange '{self.exchange}' (routing key '{self.routing_key}')"
        return f"stream '{self.routing_key}'" if self.routing_key else "the routing_key column's streams"

    def check_target(self) -> None:
        """On the driver, before any task runs: a stream named by the options (the default exchange and a
        routing key) must exist and be a stream (ValueError naming it). Through an exchange, or when the broker
        is not amqpd (the writer publishes to any broker), there is nothing to ask."""
        if self.exchange or not self.routing_key:
            return
        positions = AmqpPositions(self.endpoint)
        try:
            positions.bounds(self.routing_key)
        except NotAmqpd:
            pass
        finally:
            positions.close()


@dataclass
class Published(WriterCommitMessage):
    messages: int


def _derived_id(row: dict[str, Any], columns: list[str]) -> str:
    values = [row[c] for c in columns]
    text = json.dumps(
        values, default=lambda v: v.hex() if isinstance(v, (bytes, bytearray)) else str(v), separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def message_for(row: dict[str, Any], opts: WriteOptions) -> Outgoing:
    body = row.get("body")
    if body is None:
        raise ValueError("every row needs a non-null body column (binary or string)")
    if isinstance(body, str):
        body = body.encode()
    message_id = row.get("message_id")
    if message_id is None and opts.id_columns:
        message_id = _derived_id(row, opts.id_columns)
    if message_id is None and row.get("stream") is not None and row.get("offset") is not None:
        message_id = f"{row['stream']}:{row['offset']}"
    headers = row.get("headers")
    return Outgoing(
        body=bytes(body),
        exchange=row.get("exchange") or opts.exchange,
        routing_key=row.get("routing_key") or opts.routing_key,
        message_id=None if message_id is None else str(message_id),
        correlation_id=row.get("correlation_id"),
        content_type=row.get("content_type"),
        headers=dict(headers) if headers else None,
    )


def publish_rows(rows: Iterator[Row], opts: WriteOptions) -> Published:
    return publish_dicts((row.asDict() if hasattr(row, "asDict") else dict(row) for row in rows), opts)


# Unconfirmed messages a task may have in flight. The broker confirms a group once it is durable: a wide
# window keeps a task publishing meanwhile (the task still succeeds only once every message is confirmed).
SINK_WINDOW = 20_000

# A Python worker runs task after task (spark.python.worker.reuse, on by default): the connection a task
# published on is kept for the worker's next task to the same broker, instead of a new connection (and its
# handshake, a broker round trip or more each) for each task of each micro-batch. Only a connection whose
# every message was confirmed is kept; one that failed, or was left mid-task, is closed.
_kept: KeptConnections[Publisher] = KeptConnections()
close_kept = _kept.close_all


def _publisher(endpoint: Endpoint) -> Publisher:
    """The worker's kept connection to the broker, if it is still open, else a new one."""
    kept = _kept.take(endpoint)
    if kept is not None and kept.idle_and_open():
        return kept
    if kept is not None:
        kept.close()
    return Publisher(endpoint, window=SINK_WINDOW)


def publish_dicts(rows: Iterator[dict[str, Any]], opts: WriteOptions) -> Published:
    """Publish every row; a broken link (the broker gone, a refusal) is one line naming the target and how
    many of the task's messages were confirmed (the task's retry publishes them again, with the same ids)."""
    publisher: Publisher | None = None
    base = 0  # what the kept connection had published for earlier tasks
    try:
        publisher = _publisher(opts.endpoint)
        base = publisher.sent
        for fields in rows:
            missing = [c for c in opts.id_columns if c not in fields]
            if missing:
                raise ValueError(f"option messageIdColumns names columns the data lacks: {missing}")
            publisher.publish(message_for(fields, opts))
        published = Published(publisher.flush() - base)
        _kept.keep(opts.endpoint, publisher)
        publisher = None
        return published
    except (BrokerError, OSError) as exc:
        ep = opts.endpoint
        done = (
            f"{publisher.confirmed - base} of {publisher.sent - base} messages confirmed"
            if publisher
            else "nothing published"
        )
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise BrokerError(f"amqpd writer to {opts.target} at {ep.host}:{ep.port}: {reason} ({done})") from None
    finally:
        if publisher is not None:
            publisher.close()


def batch_dicts(batches: Iterator[pa.RecordBatch], wanted: set[str]) -> Iterator[dict[str, Any]]:
    """Each row as {column: value}, for the columns the writer reads, one column at a time (a Spark Row per
    message cost more than the publishing)."""
    for batch in batches:
        names = [n for n in batch.schema.names if n in wanted]
        columns = [batch.column(n).to_pylist() for n in names]
        for values in zip(*columns, strict=True):
            yield dict(zip(names, values, strict=True))


READ_COLUMNS = {"body", "exchange", "routing_key", "message_id", "correlation_id", "content_type", "headers"}
READ_COLUMNS |= {"stream", "offset"}
_SAME_IN_ARROW = (StringType, BinaryType, IntegralType, FloatType, DoubleType, BooleanType)


def _same_in_arrow(t: DataType) -> bool:
    """A type whose Arrow value in Python is what a Row holds (a timestamp is not: Arrow's carries a zone)."""
    if isinstance(t, MapType):
        return _same_in_arrow(t.keyType) and _same_in_arrow(t.valueType)
    return isinstance(t, _SAME_IN_ARROW)


def arrow_columns(schema: StructType, opts: WriteOptions, streaming: bool) -> set[str] | None:
    """The columns to read from Arrow batches, or None when rows must come as Rows: pyspark has no Arrow
    writer for this (streaming before 4.1), or a column the writer reads (an id column above all: a
    retried task must derive the same id) has a type whose Arrow value differs from the Row's."""
    if streaming and DataSourceStreamArrowWriter is None:
        return None
    wanted = READ_COLUMNS | set(opts.id_columns)
    if any(f.name in wanted and not _same_in_arrow(f.dataType) for f in schema.fields):
        return None
    return wanted


class BatchWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return publish_rows(iterator, self.opts)


class ArrowBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, columns: set[str]) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return publish_dicts(batch_dicts(iterator, self.columns), self.opts)


class StreamingWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return publish_rows(iterator, self.opts)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task's messages are confirmed already: nothing is staged, so nothing to make visible."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A confirmed message cannot be taken back; the batch's retry republishes the same message ids."""


if DataSourceStreamArrowWriter is not None:

    class ArrowStreamingWriter(DataSourceStreamArrowWriter):  # type: ignore[misc,valid-type]
        def __init__(self, opts: WriteOptions, columns: set[str]) -> None:
            self.opts = opts
            self.columns = columns

        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
            return publish_dicts(batch_dicts(iterator, self.columns), self.opts)

        def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
            """As StreamingWriter's: every message is confirmed already."""

        def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
            """As StreamingWriter's: the batch's retry republishes the same message ids."""
