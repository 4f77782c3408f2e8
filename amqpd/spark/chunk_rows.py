"""Chunk deliveries (amqpd/broker/streams/chunks.py) straight into an Arrow record batch, with numpy doing the
per-row work in bulk: Python touches each chunk, not each row.

A chunk's body is a table of u32 lengths and the records after it (layout 2), or a table of runs (count, the
bytes before each record, its length) and the store's frames or records after it (layout 3): either way one
cumulative sum finds every record;
a record's fixed fields (store/FORMAT.md, "Record") are gathered for all rows at once, and its exchange,
routing key and body are variable-length slices of the received bytes, which Arrow copies into the plain
string/binary layout Spark takes (_picked); a name that every row shares is built once, bodies of one length
are one fixed-width gather (_names, _bodies). Only rows that carry a property with a column of its own
(content type, correlation id, message id, headers) are read one by one, as the per-message path reads every
row; the bench's rows and most streams have none of them.

A batch whose records are alike (_Alike: one length, and the same layout, names and properties, as one
publisher with one body size writes them) skips all of that: its names and properties are read once and its
bodies copied with one fixed-width gather. The check costs a gather of each record's head and one compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from amqpd.spark.rows import arrow_schema, headers_array
from amqpd.spark.wire import (
    F_CONTENT_ENCODING,
    F_CONTENT_TYPE,
    F_CORRELATION_ID,
    F_DELIVERY_MODE,
    F_EXPIRATION,
    F_HEADERS,
    F_MESSAGE_ID,
    F_PRIORITY,
    F_REPLY_TO,
    SHOWN,
    BrokerError,
    Chunks,
    table_headers,
)

_FIXED = 25  # store/FORMAT.md's Record: the fixed fields' bytes (little-endian), before the queue ids
_MS_TO_US = 1000
_BLOCK = 4096  # rows per block where _gathered copies bytes of every row only to compare them
# a record's fixed fields from its time on (little-endian, unaligned): one gather reads them all for every row
_FIELDS = np.dtype(
    {
        "names": ["time", "flags", "exchange", "routing_key", "queues", "properties"],
        "formats": ["<i8", "u1", "u1", "u1", "<u2", "<u4"],
        "offsets": [0, 8, 9, 10, 11, 13],
        "itemsize": 17,
    }
)
_US = pa.timestamp("us", tz="UTC")


class Located:
    """Where each kept row's record is in the chunks' data (their bodies back to back, as received): start,
    end, and its offset (records need not be contiguous: layout 3 has the store's frame headers between
    them)."""

    def __init__(self, chunks: Chunks) -> None:
        # wire.PAD zero bytes follow the last body, so that every fixed-width load (_loads) stays inside
        self.data = chunks.data
        starts, ends, offsets = [], [], []
        chunked = zip(chunks.spans(), chunks.firsts, chunks.counts, chunks.layouts, strict=True)
        with memoryview(self.data) as data:
            for (base, stop), first, count, layout in chunked:
                body = data[base:stop]
                gaps, lengths, table = (
                    _records(body, count) if layout == 3 else (None, _lengths(body, count), 4 * count)
                )
                end = np.cumsum(lengths if gaps is None else gaps + lengths)
                if table + (int(end[-1]) if count else 0) != len(body):
                    raise BrokerError("a chunk delivery whose lengths do not add up to its body")
                keep = lengths > 0  # length 0: the record failed its checks on disk, its offset is skipped
                keep[max(chunks.stop - first, 0) :] = False  # from the range's end on: a last chunk may run past it
                end += base + table
                starts.append((end - lengths)[keep])
                ends.append(end[keep])
                offsets.append(np.arange(first, first + count, dtype=np.int64)[keep])
        self.starts = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        self.ends = np.concatenate(ends) if ends else np.zeros(0, np.int64)
        self.offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)


def _lengths(body: memoryview, count: int) -> np.ndarray:
    """Layout 2: `count` u32 lengths at the body's head."""
    if len(body) < 4 * count:
        raise BrokerError("a chunk delivery shorter than its lengths table")
    return np.frombuffer(body, ">u4", count).astype(np.int64)


def _records(body: memoryview, count: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Layout 3: each record's gap (the bytes before it: a frame header, or none) and length, from the runs
    table (u32 runs, then each run's u32 count, gap and length), and the table's size."""
    runs = int.from_bytes(body[:4], "big") if len(body) >= 4 else -1
    if runs < 0 or len(body) < 4 + 12 * runs:
        raise BrokerError("a chunk delivery shorter than its runs table")
    table = np.frombuffer(body, ">u4", 3 * runs, 4).astype(np.int64).reshape(runs, 3)
    counts = table[:, 0]
    if int(counts.sum()) != count:
        raise BrokerError("a chunk delivery whose runs do not add up to its count")
    return np.repeat(table[:, 1], counts), np.repeat(table[:, 2], counts), 4 + 12 * runs


def chunk_batch(stream: str, chunks: Chunks, include_headers: bool) -> pa.RecordBatch:
    """The rows of the chunks (offsets below chunks.stop, skipped records left out) as one record batch with
    rows.arrow_schema's columns: the same values as rows.record_batch gives for the same messages read one
    by one."""
    at = Located(chunks)
    n = len(at.starts)
    alike = _Alike.of(at)
    columns = alike.columns(include_headers) if alike else _mixed_columns(at, include_headers)
    arrays = [pa.array(at.offsets, pa.int64()), columns[0], _repeat_text(stream, n), *columns[1:]]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


class _Alike:
    """A batch whose records differ only in their store message id (the record's first field, not a column),
    time and body bytes: all of one length, with the same bytes from the flags to the body (the layout,
    queue ids, exchange, routing key and properties: a stream written by one publisher with one body size,
    as the bench's). The names and properties are then read once, and the bodies gathered with one
    fixed-width copy and offsets from an arange: none of the general path's per-row positions and picking.
    Records need not be equally spaced in `data`."""

    def __init__(self, at: Located, head: tuple[int, ...], size: int, times: np.ndarray) -> None:
        self.at, self.head, self.size, self.times = at, head, size, times

    @classmethod
    def of(cls, at: Located) -> _Alike | None:
        """The batch's shared layout, or None when its records are not alike (checked cheapest first)."""
        starts, n = at.starts, len(at.starts)
        if not n:
            return None
        first, size = int(starts[0]), int(at.ends[0] - starts[0])
        if size < _FIXED or n * size >= 1 << 31 or not (at.ends - starts == size).all():  # 32-bit offsets
            return None
        head = tuple(int(field) for field in _loads(at.data, _FIELDS)[first + 8])[1:]
        flags, ex_len, rk_len, queues, props_len = head
        body = _FIXED + 8 * (flags & 1) + 4 * queues + ex_len + rk_len + props_len
        if props_len < 14 or body > size:  # left to the general path, which refuses it
            return None
        # each record's time and head are gathered together: the times are taken out, the rest compared
        times = np.empty(n, np.int64)
        if not _same_rows(_untimed(_gathered(at.data, starts + 8, body - 8), times)):
            return None
        return cls(at, head, size, times)

    def columns(self, include_headers: bool) -> list[pa.Array]:
        """timestamp, exchange, routing_key, the property columns and body."""
        data, starts, n = self.at.data, self.at.starts, len(self.at.starts)
        flags, ex_len, rk_len, queues, props_len = self.head
        names = int(starts[0]) + _FIXED + 8 * (flags & 1) + 4 * queues  # the first record's
        props = names + ex_len + rk_len
        body = props + props_len - int(starts[0])  # in each record
        return [
            pa.array(self.times, _US),
            _repeat(data[names : names + ex_len], n),
            _repeat(data[names + ex_len : props], n),
            *_same_properties(data, props, props_len, n, include_headers),
            _fixed_binary(data, starts + body, self.size - body),
        ]


def _fixed_binary(data: bytes | bytearray, starts: np.ndarray, width: int) -> pa.Array:
    """data[start:start + width] for each start, as a binary column: one fixed-width gather is its values,
    an arange its (32-bit) offsets."""
    n = len(starts)
    values = _loads(data, f"V{width}")[starts] if width else np.zeros(0, np.uint8)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _names(data: bytes | bytearray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The exchange or routing key column; built once when every row has the same name, as in a stream
    written by one publisher (the lengths are compared first: that check costs little when it fails)."""
    width = int(lengths[0]) if len(lengths) else 0
    if not len(lengths) or not (lengths == width).all():
        return _strings(data, starts, lengths)
    first, last = int(starts[0]), int(starts[-1])
    if not width or (data[first : first + width] == data[last : last + width] and _same_bytes(data, starts, width)):
        return _repeat(data[first : first + width], len(lengths))
    return _fixed_strings(data, starts, width)


def _fixed_strings(data: bytes | bytearray, starts: np.ndarray, width: int) -> pa.Array:
    """Strings of one length (ids an application formats alike) with one fixed-width gather, as _fixed_binary;
    unless they are all ASCII, through _strings, which decodes what is not UTF-8 as the per-message path."""
    n = len(starts)
    if n * width >= 1 << 31:
        return _strings(data, starts, np.full(n, width))
    values = _loads(data, f"V{width}")[starts]
    if not (values.view(np.uint8) < 0x80).all():
        return _strings(data, starts, np.full(n, width))
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _bodies(data: bytes | bytearray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The body column: one fixed-width gather when the bodies have one length, else picked one by one."""
    if len(lengths) and (lengths == lengths[0]).all() and len(lengths) * int(lengths[0]) < 1 << 31:
        return _fixed_binary(data, starts, int(lengths[0]))
    return _picked(data, starts, starts + lengths)


def _same_bytes(data: bytes | bytearray, starts: np.ndarray, width: int) -> bool:
    """Whether data[start:start + width] is the same for every start."""
    return _same_rows(_gathered(data, starts, width))


def _gathered(data: bytes | bytearray, starts: np.ndarray, width: int) -> Iterator[np.ndarray]:
    """data[start:start + width] for each start (width > 0), a block of rows at a time: the copies stay small
    (in cache, and reused by malloc rather than mapped afresh every batch)."""
    values = _loads(data, f"V{width}")
    for at in range(0, len(starts), _BLOCK):
        yield values[starts[at : at + _BLOCK]]


def _same_rows(blocks: Iterable[np.ndarray]) -> bool:
    """Whether every row of the blocks holds the same bytes; a batch that is not alike is found out at its
    first block."""
    same = b""
    for block in blocks:
        raw = block.view(np.uint8).tobytes()
        same = same or raw[: block.itemsize] * len(block)  # the first block is the longest
        if raw != (same if len(raw) == len(same) else same[: len(raw)]):
            return False
    return True


def _untimed(blocks: Iterable[np.ndarray], times: np.ndarray) -> Iterator[np.ndarray]:
    """The blocks of records' bytes from their time on, each with its times moved out into `times` (as
    Spark's µs) and zeroed."""
    at = 0
    for block in blocks:
        stamps = np.ndarray((len(block),), "<i8", block, 0, (block.itemsize,))
        np.multiply(stamps, _MS_TO_US, out=times[at : at + len(block)])
        stamps[:] = 0
        at += len(block)
        yield block


def _same_properties(
    data: bytes | bytearray, props: int, props_len: int, n: int, include_headers: bool
) -> list[pa.Array]:
    """The property columns of n rows that all have the properties at `props`: scanned once."""
    none = np.zeros(0, np.int64)
    if not (data[props + 12] << 8 | data[props + 13]) & SHOWN:
        return _properties(data, none, none, none, n, include_headers)
    one = _properties(data, np.array([props]), np.array([props + props_len]), np.array([0]), 1, include_headers)
    return [column.take(np.zeros(n, np.intp)) for column in one]


def _repeat(name: bytes | bytearray, n: int) -> pa.Array:
    """n times one exchange or routing key, decoded as the per-message path decodes it (once)."""
    return _repeat_text(name.decode("utf-8", "replace"), n)


def _repeat_text(text: str, n: int) -> pa.Array:
    """n times `text` as a string column, its buffers made by numpy: half what pa.repeat takes."""
    raw = text.encode()
    if len(raw) * n >= 1 << 31:  # more than 32-bit offsets hold: let Arrow say so
        return pa.repeat(pa.scalar(text, pa.string()), n)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _mixed_columns(at: Located, include_headers: bool) -> list[pa.Array]:
    """timestamp, exchange, routing_key, the property columns and body, from each row's positions."""
    n = len(at.starts)
    data = at.data
    starts = at.starts
    fields = _gather_fields(data, starts + 8)
    ex_len = fields["exchange"].astype(np.int64)
    rk_len = fields["routing_key"].astype(np.int64)
    props_len = fields["properties"].astype(np.int64)
    names = starts + _FIXED + 4 * fields["queues"].astype(np.int64) + 8 * (fields["flags"] & 1)  # bit 0: an expiry
    props = names + ex_len + rk_len
    body = props + props_len
    # a record's fields must lie inside it (one shorter than the fixed fields ends before its body would
    # start): Arrow would copy whatever the offsets point at
    if n and ((body > at.ends) | (props_len < 14)).any():
        raise BrokerError("a chunk delivery with a record whose fields run past its end")
    flags = _loads(data, ">u2")[props + 12]  # the content header's property flags
    rich = np.flatnonzero(flags & SHOWN)
    return [
        pa.array(fields["time"] * _MS_TO_US, _US),  # the broker's ms, as Spark's timestamp (µs)
        _names(data, names, ex_len),
        _names(data, names + ex_len, rk_len),
        *_properties(data, props, body, rich, n, include_headers),
        _bodies(data, body, at.ends - body),
    ]


def _loads(data: bytes | bytearray, dtype: str | np.dtype[Any]) -> np.ndarray:
    """Every byte position of `data` read as one `dtype` value (element i: the value whose bytes start at i),
    a strided view without a copy: indexing it with n positions reads n unaligned fields at once."""
    kind = np.dtype(dtype)
    return np.ndarray((len(data) - kind.itemsize + 1,), kind, data, 0, (1,))


def _gather_fields(data: bytes | bytearray, positions: np.ndarray) -> np.ndarray:
    """The records' fixed fields (_FIELDS) at each position: gathered as raw 17-byte values, then viewed as
    the fields. Gathered as _FIELDS directly, numpy converted each value field by field, at ~40x the cost
    (most of a batch of records of many sizes)."""
    return _loads(data, f"V{_FIELDS.itemsize}")[positions].view(_FIELDS)


def _picked(data: bytes | bytearray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """data[start:end] for each row, as a binary column. An array over `data` whose values are, in turn, a
    row's bytes and what lies between it and the next (offsets start0, end0, start1, end1, ...) is made
    without a copy; Arrow's take of every other value then copies each row's bytes once."""
    n = len(starts)
    large = len(data) >= 1 << 31  # past what 32-bit offsets hold
    bounds: np.ndarray = np.empty(2 * n, np.int64 if large else np.int32)
    bounds[0::2] = starts
    bounds[1::2] = ends
    if not n or (bounds[1:] < bounds[:-1]).any():  # rows out of order in `data` (or none): one by one
        return pa.array([data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)], pa.binary())
    spans = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
    )
    return spans.take(np.arange(0, 2 * n - 1, 2)).cast(pa.binary())


def _strings(data: bytes | bytearray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """data[start:start + length] for each row as UTF-8 strings; bytes that are not UTF-8 are decoded with
    replacement characters, as the per-message path decodes them (Arrow would refuse them)."""
    try:
        return _picked(data, starts, starts + lengths).cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [
                data[s : s + k].decode("utf-8", "replace")
                for s, k in zip(starts.tolist(), lengths.tolist(), strict=True)
            ],
            pa.string(),
        )


def _properties(
    data: bytes | bytearray,
    props: np.ndarray,
    stops: np.ndarray,
    rich: np.ndarray,
    n: int,
    include_headers: bool,
) -> list[pa.Array]:
    """The message_id, correlation_id and content_type (and headers) columns: null (and empty maps) but
    for the `rich` rows, whose property lists (each row's content header at props, ending at stops) are
    walked all at once (_Walk); only the headers tables are decoded one by one (and only with
    includeHeaders)."""
    if not len(rich):
        nulls = [pa.nulls(n, pa.string()) for _ in range(3)]
        if include_headers:
            empty = pa.array([], pa.string())
            nulls.append(pa.MapArray.from_arrays(np.zeros(n + 1, np.int32), empty, empty))
        return nulls
    walk = _Walk(data, props[rich] + 12, stops[rich], n, rich)
    columns = [walk.column(name) for name in ("message_id", "correlation_id", "content_type")]
    if include_headers:
        headers: list[dict[str, Any] | None] = [{} for _ in range(n)]
        for row, (start, end) in zip(rich.tolist(), walk.tables.tolist(), strict=True):
            if start:
                headers[row] = table_headers(bytes(data[start:end]))
        columns.append(headers_array(headers))
    return columns


# a content header's properties in the order they are laid out (AMQP 0-9-1, basic class), up to the last
# one with a column (message_id): each a short string, a table (u32 size), or one byte
_LAYOUT = (
    (F_CONTENT_TYPE, "content_type"),
    (F_CONTENT_ENCODING, "shortstr"),
    (F_HEADERS, "table"),
    (F_DELIVERY_MODE, "octet"),
    (F_PRIORITY, "octet"),
    (F_CORRELATION_ID, "correlation_id"),
    (F_REPLY_TO, "shortstr"),
    (F_EXPIRATION, "shortstr"),
    (F_MESSAGE_ID, "message_id"),
)


class _Walk:
    """The property lists of many rows walked in step, one property at a time for all of them: each row's
    position moves past the properties its flags say it has, and the shown ones' places are kept (a short
    string's start and length, the headers table's start and end). Rows are `rows` of n; `at` is where
    each one's property flags are in `data`, `limit` where its property list ends (its body): a walk past
    it is a corrupt record, refused."""

    def __init__(self, data: bytes | bytearray, at: np.ndarray, limit: np.ndarray, n: int, rows: np.ndarray) -> None:
        self.data, self.n, self.rows = data, n, rows
        flags = _loads(data, ">u2")[at].astype(np.int64)
        self.found: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.tables = np.zeros((len(rows), 2), np.int64)
        if len(flags) and (flags == flags[0]).all():
            self._uniform(int(flags[0]), at + 2, limit)
        else:
            self._mixed(flags, at + 2, limit)

    def _uniform(self, flags: int, pos: np.ndarray, limit: np.ndarray) -> None:
        """Every row has the same properties (one publisher's messages): no per-row masks, and positions only
        grow, so one check at the end finds a walk past a row's end (the loads are kept inside it)."""
        data, last, every = self.data, limit - 1, np.ones(len(pos), bool)
        for flag, kind in _LAYOUT:
            if not flags & flag:
                continue
            if kind == "octet":
                pos = pos + 1
            elif kind == "table":
                end = pos + 4 + _loads(data, ">u4")[np.minimum(pos, last)].astype(np.int64)
                self.tables[:, 0], self.tables[:, 1] = pos, end
                pos = end
            else:
                length = np.frombuffer(data, np.uint8)[np.minimum(pos, last)].astype(np.int64)
                if kind != "shortstr":
                    self.found[kind] = (every, pos + 1, length)
                pos = pos + 1 + length
        if (pos > limit).any():
            raise BrokerError("a chunk delivery with a record whose properties run past its end")

    def _mixed(self, flags: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> None:
        """Rows with different properties: each step moves only the rows that have that property."""
        data = self.data
        octets = np.frombuffer(data, np.uint8)
        for flag, kind in _LAYOUT:
            has = (flags & flag) != 0
            if not has.any():
                continue
            where = np.where(has, np.minimum(pos, limit - 1), 0)  # loads stay inside data (PAD bytes follow)
            if kind == "octet":
                pos = pos + has
            elif kind == "table":
                size = np.where(has, _loads(data, ">u4")[where].astype(np.int64), 0)
                self.tables[has] = np.stack([pos[has], (pos + 4 + size)[has]], axis=1)
                pos = pos + has * (4 + size)
            else:
                length = np.where(has, octets[where].astype(np.int64), 0)
                if kind != "shortstr":
                    self.found[kind] = (has, pos + 1, length)
                pos = pos + has * (1 + length)
            if (pos > limit).any():
                raise BrokerError("a chunk delivery with a record whose properties run past its end")

    def column(self, name: str) -> pa.Array:
        """One short-string property as a string column of all n rows: null where a row does not have it."""
        got = self.found.get(name)
        if got is None:
            return pa.nulls(self.n, pa.string())
        has, starts, lengths = got
        valid = np.zeros(self.n, bool)
        valid[self.rows[has]] = True
        full_starts = np.zeros(self.n, np.int64)
        full_lengths = np.zeros(self.n, np.int64)
        full_starts[self.rows] = starts
        full_lengths[self.rows] = lengths
        if valid.all():  # every row has it: often the same value (a content type), then built once
            return _names(self.data, full_starts, full_lengths)
        # rows without it: an empty string at the previous row's end keeps the spans in order for _picked
        missing = np.flatnonzero(~valid)
        if len(missing):
            ends = full_starts + full_lengths
            prior = np.maximum.accumulate(np.where(valid, ends, 0))
            full_starts[missing] = prior[missing]
        values = _strings(self.data, full_starts, full_lengths)
        if values.offset:  # the validity bitmap below starts at row 0
            values = pa.concat_arrays([values.take(np.arange(self.n))])
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(pa.string(), self.n, [bitmap, *values.buffers()[1:]])
