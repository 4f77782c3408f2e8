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

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from amqpd.spark.wire import Endpoint, Outgoing, Publisher

OVERWRITE_REFUSED = (
    "amqpd streams are append-only: a write can only add messages. Use .mode('append') (a Python data source "
    "needs it named: the default save mode, errorifexists, is not supported by Spark for it)."
)


@dataclass
class WriteOptions:
    endpoint: Endpoint
    exchange: str
    routing_key: str
    id_columns: list[str]

    @classmethod
    def parse(cls, options: dict[str, Any]) -> WriteOptions:
        lower = {k.lower(): v for k, v in options.items()}
        if "uri" not in lower:
            raise ValueError("option uri is required: amqp://user:password@host:port/vhost")
        cols = [c.strip() for c in str(lower.get("messageidcolumns", "")).split(",") if c.strip()]
        routing_key = lower.get("routing_key", lower.get("routingkey", lower.get("queue", "")))
        return cls(Endpoint.parse(lower["uri"]), str(lower.get("exchange", "")), str(routing_key), cols)


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
    publisher = Publisher(opts.endpoint)
    try:
        for row in rows:
            fields = row.asDict() if hasattr(row, "asDict") else dict(row)
            missing = [c for c in opts.id_columns if c not in fields]
            if missing:
                raise ValueError(f"option messageIdColumns names columns the data lacks: {missing}")
            publisher.publish(message_for(fields, opts))
        return Published(publisher.flush())
    finally:
        publisher.close()


class BatchWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return publish_rows(iterator, self.opts)


class StreamingWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return publish_rows(iterator, self.opts)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task's messages are confirmed already: nothing is staged, so nothing to make visible."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A confirmed message cannot be taken back; the batch's retry republishes the same message ids."""
