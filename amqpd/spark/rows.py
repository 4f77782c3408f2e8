"""Rows as Spark sees them: the schema and Arrow record batches built column by column.

Headers (with includeHeaders=true) become map<string,string>: string values as they are, byte arrays as
base64, every other AMQP value type (numbers, booleans, timestamps, decimals, tables, arrays) as JSON text."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import pyarrow as pa

from amqpd.spark.wire import Columns

BASE_COLUMNS = (
    "offset long, timestamp timestamp, stream string, exchange string, routing_key string, message_id string, "
    "correlation_id string, content_type string"
)


_MS = pa.timestamp("ms", tz="UTC")
_US = pa.timestamp("us", tz="UTC")


KAFKA_HEADERS = "array<struct<key:string,value:binary>>"


def schema_ddl(include_headers: bool, headers_array: bool = False) -> str:
    headers = f", headers {KAFKA_HEADERS if headers_array else 'map<string,string>'}" if include_headers else ""
    return BASE_COLUMNS + headers + ", body binary"


def kafka_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its headers map as Kafka's source shows headers: an array of (key, value) structs,
    the values as UTF-8 bytes of the map's text, in the table's order."""
    at = batch.schema.get_field_index("headers")
    maps = batch.column(at)
    pairs = pa.StructArray.from_arrays([maps.keys, maps.items.cast(pa.binary())], names=["key", "value"])
    offsets = maps.offsets
    array = pa.ListArray.from_arrays(offsets, pairs, mask=maps.is_null() if maps.null_count else None)
    return batch.set_column(at, pa.field("headers", array.type), array)


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("stream", pa.string()),
        ("exchange", pa.string()),
        ("routing_key", pa.string()),
        ("message_id", pa.string()),
        ("correlation_id", pa.string()),
        ("content_type", pa.string()),
    ]
    if include_headers:
        fields.append(("headers", pa.map_(pa.string(), pa.string())))
    fields.append(("body", pa.binary()))
    return pa.schema(fields)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"no JSON form for {type(value).__name__}")


def header_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def record_batch(stream: str, cols: Columns, include_headers: bool) -> pa.RecordBatch:
    """The columns as one record batch."""
    n = len(cols.offset)
    arrays = [
        pa.array(cols.offset, pa.int64()),
        pa.array(cols.timestamp, _MS).cast(_US),  # the broker's ms, as Spark's timestamp (µs)
        pa.repeat(pa.scalar(stream, pa.string()), n),
        pa.array(cols.exchange, pa.string()),
        pa.array(cols.routing_key, pa.string()),
        pa.array(cols.message_id, pa.string()),
        pa.array(cols.correlation_id, pa.string()),
        pa.array(cols.content_type, pa.string()),
    ]
    if include_headers:
        arrays.append(headers_array(cols.headers))
    arrays.append(pa.array(cols.body, pa.binary()))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def headers_array(headers: list[dict[str, Any] | None]) -> pa.Array:
    """The headers column: each table as map<string,string> (values as header_text shows them)."""
    maps = [None if h is None else [(k, header_text(v)) for k, v in h.items()] for h in headers]
    return pa.array(maps, pa.map_(pa.string(), pa.string()))
