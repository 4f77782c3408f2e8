"""Chunk deliveries into record batches (amqpd/spark/chunk_rows.py) for records the in-process differential
(test_spark_chunks.py) cannot produce: records as the disk store writes them for several queues with an
expiry, names that are not UTF-8, damaged records, and chunks that do not add up; and batches of alike
records (one layout, names and properties), or nearly, read as one by one by the alike and the general path."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from fakes import header_payload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqpd.broker.streams.chunks import encode_chunk
from amqpd.spark import chunk_rows
from amqpd.spark.chunk_rows import chunk_batch
from amqpd.spark.rows import arrow_schema, record_batch
from amqpd.spark.wire import BrokerError, Chunks, Columns, scan_properties, table_headers
from store.record_codec import decode_record, encode_record
from store.records import MessageRecord

PLAIN = struct.pack(">HHQH", 60, 0, 0, 0x1000) + b"\x02"  # a content header's bytes: persistent, nothing else


def record(body: bytes, exchange: str = "", routing_key: str = "s", **fields: object) -> MessageRecord:
    return MessageRecord(exchange, routing_key, PLAIN, body, 1_700_000_000_000, **fields)  # type: ignore[arg-type]


def rows(payloads: list[bytes | None], first: int = 0, stop: int = 1 << 62) -> dict[str, list[object]]:
    chunks = Chunks(stop)
    chunks.add(encode_chunk(payloads), first, len(payloads))
    return chunk_batch("s", chunks, include_headers=False).to_pydict()


def test_a_record_for_several_queues_with_an_expiry_reads_as_its_names_and_body() -> None:
    payloads: list[bytes | None] = [
        encode_record(7, record(b"a" * 30, "amq.fanout", "key", expires_at_ms=1_800_000_000_000), [1, 2, 3]),
        encode_record(8, record(b"b"), []),
    ]
    got = rows(payloads, first=40)
    assert got["offset"] == [40, 41]
    assert got["exchange"] == ["amq.fanout", ""]
    assert got["routing_key"] == ["key", "s"]
    assert got["body"] == [b"a" * 30, b"b"]


def test_records_for_more_queues_than_16_bits_of_their_ids_hold_read_as_their_names_and_body() -> None:
    many = list(range(20_000))  # 80,000 bytes of queue ids before the names
    payloads: list[bytes | None] = [
        encode_record(1, record(b"first", "amq.fanout", "key"), many),
        encode_record(2, record(b"second", "", "other"), many[:17_000]),
    ]
    got = rows(payloads)
    assert got["exchange"] == ["amq.fanout", ""]
    assert got["routing_key"] == ["key", "other"]
    assert got["body"] == [b"first", b"second"]


def test_names_that_are_not_utf8_read_with_replacement_characters_as_message_by_message() -> None:
    name = b"caf\xe9-\xff-long-enough-to-be-out-of-line".decode("utf-8", "surrogateescape")
    got = rows([encode_record(1, record(b"x", "ex\xff".encode().decode(), name), [])])
    assert got["routing_key"] == [b"caf\xe9-\xff-long-enough-to-be-out-of-line".decode("utf-8", "replace")]
    assert got["exchange"] == ["ex\xff"]


def test_damaged_records_and_offsets_past_the_stop_are_left_out() -> None:
    payloads: list[bytes | None] = [encode_record(i, record(b"%d" % i), []) for i in range(6)]
    payloads[2] = None
    got = rows(payloads, first=10, stop=15)
    assert got["offset"] == [10, 11, 13, 14]
    assert got["body"] == [b"0", b"1", b"3", b"4"]


def test_rows_out_of_order_in_the_received_bytes_are_still_picked_whole() -> None:
    # Located finds rows in order today; _picked's array over `data` would have offsets that go back (not a
    # valid Arrow array) if they were not, so it checks the order rather than assume it
    data = bytes(range(40))
    starts, ends = np.array([20, 0, 5, 32]), np.array([30, 10, 8, 40])
    assert chunk_rows._picked(data, starts, ends).to_pylist() == [data[20:30], data[0:10], data[5:8], data[32:40]]
    assert chunk_rows._picked(data, starts[1:], ends[1:]).to_pylist() == [data[0:10], data[5:8], data[32:40]]
    assert chunk_rows._picked(data, starts[:0], ends[:0]).to_pylist() == []


def test_a_chunk_whose_lengths_do_not_add_up_to_its_body_is_an_error() -> None:
    body = encode_chunk([encode_record(1, record(b"x"), [])])
    for broken in (body[:-1], body + b"\x00"):
        chunks = Chunks(1 << 62)
        chunks.add(broken, 0, 1)
        with pytest.raises(BrokerError, match="do not add up"):
            chunk_batch("s", chunks, include_headers=False)


def test_a_record_shorter_than_its_fields_is_an_error() -> None:
    whole = encode_record(1, record(b""), [])
    for cut in (whole[:20], whole[:-2]):  # shorter than the fixed fields; properties running past the end
        chunks = Chunks(1 << 62)
        chunks.add(encode_chunk([cut]), 0, 1)
        with pytest.raises(BrokerError):
            chunk_batch("s", chunks, include_headers=False)


# names on either side of the 12 bytes an Arrow view holds inline, and bytes that are not UTF-8 (as a record
# holds them: surrogateescape)
NAMES = ["", "amq.fanout", "a-routing-key-longer-than-twelve", "ex\udcff", "caf\udce9-\udcff-out-of-line-name"]
PROPERTIES = [
    PLAIN,
    header_payload(0, delivery_mode=2, priority=3),
    header_payload(0, content_type="application/json", message_id="m-1", correlation_id="c\u00e9"),
    header_payload(0, headers={"kind": "order", "n": 7, "raw": bytearray(b"\x00\xff")}, message_id="m-1"),
]
# what one row may change: fields that keep the records alike, then fields that do not
CHANGES = ["time", "body bytes", "skipped", "body length", "exchange", "routing key", "properties", "expiry", "queues"]
# ... and fields that do not but keep the record's length: its layout is then all that tells them apart
CHANGES += ["exchange bytes", "names split", "properties bytes", "queue id"]


def same_length_names(exchange: str, routing_key: str) -> dict[str, dict[str, object]]:
    """Names of the same length in all (when there are any): the exchange's last character changed, and
    one character moved from the routing key to the exchange (or back); without names, a name."""
    names = exchange + routing_key
    cut = len(exchange) + 1 if routing_key else len(exchange) - 1
    return {
        "exchange bytes": {"exchange": exchange[:-1] + ("y" if exchange[-1:] != "y" else "z")},
        "names split": {"exchange": names[:cut], "routing_key": names[cut:]} if names else {"exchange": "y"},
    }


def alike_payloads(n: int, base: dict[str, object], change: str, row: int) -> list[bytes | None]:
    """n records with `base`'s fields and bodies of one length, their own bytes and times; row `row`
    differs in `change`."""
    out: list[bytes | None] = []
    for i in range(n):
        fields = dict(base, body=bytes((i + j) % 256 for j in range(int(base["size"]))))  # type: ignore[call-overload]
        queues = [3]
        if i == row:
            other = {
                "time": {"time": 1_800_000_000_000},
                "body bytes": {"body": b"\xee" * len(fields["body"])},  # type: ignore[arg-type]
                "body length": {"body": fields["body"] + b"!"},  # type: ignore[operator]
                "exchange": {"exchange": str(base["exchange"]) + "x"},
                "routing key": {"routing_key": "x" + str(base["routing_key"])},
                "properties": {"properties": PROPERTIES[(PROPERTIES.index(base["properties"]) + 1) % len(PROPERTIES)]},  # type: ignore[arg-type]
                "expiry": {"expires_at_ms": None if base["expires_at_ms"] else 1_900_000_000_000},
                "properties bytes": {"properties": fields["properties"][:-1] + bytes([fields["properties"][-1] ^ 1])},  # type: ignore[index]
                **same_length_names(str(base["exchange"]), str(base["routing_key"])),
            }.get(change, {})
            fields.update(other)
            queues = {"queues": [3, 4], "queue id": [4]}.get(change, queues)
            if change == "skipped":
                out.append(None)
                continue
        record = MessageRecord(
            fields["exchange"],  # type: ignore[arg-type]
            fields["routing_key"],  # type: ignore[arg-type]
            fields["properties"],  # type: ignore[arg-type]
            fields["body"],  # type: ignore[arg-type]
            fields.get("time", 1_700_000_000_000 + i),  # type: ignore[arg-type]
            expires_at_ms=fields["expires_at_ms"],  # type: ignore[arg-type]
        )
        out.append(encode_record(i, record, queues))
    return out


def one_by_one(payloads: list[bytes | None], first: int, stop: int, with_headers: bool) -> pa.RecordBatch:
    """The rows as the per-message path builds its batches (rows.record_batch), each record decoded on its
    own (names as a delivery's: bytes that are not UTF-8 replaced)."""
    cols = Columns()
    for offset, payload in enumerate(payloads, first):
        if payload is None or offset >= stop:
            continue
        _, _, record = decode_record(payload)
        props = record.properties
        content_type, table, end, correlation_id, message_id = scan_properties(props, 14, props[12] << 8 | props[13])
        cols.offset.append(offset)
        cols.timestamp.append(record.timestamp_ms)
        for names, name in ((cols.exchange, record.exchange), (cols.routing_key, record.routing_key)):
            names.append(name.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        cols.content_type.append(content_type)
        cols.correlation_id.append(correlation_id)
        cols.message_id.append(message_id)
        cols.headers.append((table_headers(props[table:end]) if table else {}) if with_headers else None)
        cols.body.append(record.body)
    return record_batch("s", cols, with_headers)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 40),
    base=st.fixed_dictionaries(
        {
            "exchange": st.sampled_from(NAMES),
            "routing_key": st.sampled_from(NAMES),
            "properties": st.sampled_from(PROPERTIES),
            "size": st.sampled_from([0, 1, 12, 13, 100]),
            "expires_at_ms": st.sampled_from([None, 1_800_000_000_000]),
        }
    ),
    change=st.sampled_from([None, *CHANGES]),
    data=st.data(),
    chunk=st.integers(1, 9),
    block=st.sampled_from([1, 3, 4096]),
    with_headers=st.booleans(),
)
def test_alike_records_read_as_one_by_one_by_either_path(
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    base: dict[str, object],
    change: str | None,
    data: st.DataObject,
    chunk: int,
    block: int,
    with_headers: bool,
) -> None:
    row = data.draw(st.integers(0, n - 1))
    first = data.draw(st.integers(0, 1000))
    stop = first + data.draw(st.integers(1, n))  # a last chunk may run past the range's end
    payloads = alike_payloads(n, base, change or "", row)
    chunks = Chunks(stop)
    for at in range(0, n, chunk):  # several chunks: their length tables lie between the records
        chunks.add(encode_chunk(payloads[at : at + chunk]), first + at, len(payloads[at : at + chunk]))
    used: list[bool] = []
    real_of = chunk_rows._Alike.of

    def spied(at: chunk_rows.Located) -> chunk_rows._Alike | None:
        found = real_of(at)
        used.append(found is not None)
        return found

    with monkeypatch.context() as patched:  # undone per example: hypothesis runs them all in one call
        patched.setattr(chunk_rows._Alike, "of", spied)
        patched.setattr(chunk_rows, "_BLOCK", block)  # the records' heads compared this many at a time
        fast = chunk_batch("s", chunks, with_headers)
    with monkeypatch.context() as patched:
        patched.setattr(chunk_rows._Alike, "of", lambda at: None)
        general = chunk_batch("s", chunks, with_headers)
    expected = one_by_one(payloads, first, stop, with_headers)
    assert fast.schema == general.schema == expected.schema == arrow_schema(with_headers)
    assert fast.to_pydict() == general.to_pydict() == expected.to_pydict()
    assert fast.equals(expected)
    assert general.equals(expected)
    kept = fast.num_rows
    if kept and change in (None, "time", "body bytes", "skipped"):
        assert used == [True]  # the rows were alike: the fast path read them
    elif kept > 1 and first + row < stop:
        assert used == [False]  # the changed row is among them: they were not alike


def test_what_came_of_a_body_before_the_next_delivery_began_is_not_read() -> None:
    """A delivery cut short (its content header's size not reached) is dropped when the next one begins, as
    the reader always dropped it: the batch holds the whole chunks, and zeros after them."""
    whole = [encode_record(i, record(b"body%d" % i), [1]) for i in range(3)]
    chunks = Chunks(1 << 62)
    chunks.add(encode_chunk(whole[:2]), 0, 2)
    chunks.extend(b"\xff" * 300)  # a body that never became whole
    chunks.add(encode_chunk(whole[2:]), 2, 1)
    assert chunk_batch("s", chunks, include_headers=False).to_pydict()["body"] == [b"body0", b"body1", b"body2"]
    assert chunks.bodies == [encode_chunk(whole[:2]), encode_chunk(whole[2:])]
    assert not any(chunks.data[chunks.size :])


# every basic property, so that the vectorised walk (chunk_rows._Walk) must step over the ones it does not show
short_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
header_tables = st.dictionaries(
    st.text(alphabet="abcdefgh-", min_size=1, max_size=8), st.integers(-5, 5) | short_text | st.booleans(), max_size=3
)
ANY_PROPERTIES = st.fixed_dictionaries(
    {},
    optional={
        "content_type": short_text,
        "content_encoding": short_text,
        "headers": header_tables,
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 9),
        "correlation_id": short_text,
        "reply_to": short_text,
        "expiration": st.sampled_from(["1000", "60000"]),
        "message_id": short_text,
        "timestamp": st.datetimes(
            min_value=__import__("datetime").datetime(2000, 1, 1), max_value=__import__("datetime").datetime(2030, 1, 1)
        ),
        "message_type": short_text,
        "user_id": short_text,
        "app_id": short_text,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(
        st.tuples(ANY_PROPERTIES, st.binary(max_size=400), st.sampled_from(NAMES), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    chunk=st.integers(1, 9),
    with_headers=st.booleans(),
    not_utf8=st.booleans(),
)
def test_rows_each_with_properties_of_their_own_read_as_one_by_one(
    messages: list[tuple[dict[str, object], bytes, str, bool]], chunk: int, with_headers: bool, not_utf8: bool
) -> None:
    """Real traffic: every row its own properties (any of them, in any combination), bodies of any length;
    the property columns come from one walk over all rows at once, and must equal each row decoded alone."""
    payloads: list[bytes | None] = []
    for i, (properties, body, name, skipped) in enumerate(messages):
        if skipped and i:
            payloads.append(None)  # a damaged record: its offset is skipped
            continue
        props = header_payload(0, **properties)
        if not_utf8:  # é in a short string's bytes becomes two bytes that are not UTF-8 (the length is kept)
            props = props.replace("é".encode(), b"\xff\xfe")
        rec = MessageRecord("", name, props, body, 1_700_000_000_000 + i)
        payloads.append(encode_record(i, rec, []))
    chunks = Chunks(1 << 62)
    for at in range(0, len(payloads), chunk):
        chunks.add(encode_chunk(payloads[at : at + chunk]), at, len(payloads[at : at + chunk]))
    got = chunk_batch("s", chunks, with_headers)
    expected = one_by_one(payloads, 0, 1 << 62, with_headers)
    assert got.to_pydict() == expected.to_pydict()
    assert got.equals(expected)


def test_a_property_list_that_runs_past_its_record_is_an_error() -> None:
    props = bytearray(header_payload(0, content_type="text/plain", message_id="m-1"))
    props[14] = 200  # the content type's length now runs past the message id and the record's end
    chunks = Chunks(1 << 62)
    chunks.add(encode_chunk([encode_record(1, MessageRecord("", "s", bytes(props), b"x", 1), [])]), 0, 1)
    with pytest.raises(BrokerError, match="properties run past"):
        chunk_batch("s", chunks, include_headers=False)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.sets(st.sampled_from(["content_type", "headers", "delivery_mode", "correlation_id", "message_id"])),
    rows=st.lists(
        st.tuples(st.sampled_from(["web", "mobile", "batch"]), st.binary(max_size=300), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    prefix=st.sampled_from(["", "msg-", "é-"]),
    ids=st.data(),
    one_value=st.booleans(),
    not_utf8=st.booleans(),
    with_headers=st.booleans(),
)
def test_rows_with_the_same_properties_and_ids_of_one_length_read_as_one_by_one(
    keys: set[str],
    rows: list[tuple[str, bytes, bool]],
    prefix: str,
    ids: st.DataObject,
    one_value: bool,
    not_utf8: bool,
    with_headers: bool,
) -> None:
    """Real traffic from one publisher: every row has the same properties (one walk without per-row steps)
    with ids of one byte length (one fixed-width copy), the same or different values, headers of several
    sizes; each column must equal the rows decoded one by one."""
    width = ids.draw(st.integers(1, 12))
    tail = st.text(alphabet="0123456789abcdef", min_size=width, max_size=width)
    message_ids = [prefix + t for t in ids.draw(st.lists(tail, min_size=len(rows), max_size=len(rows)))]
    if one_value:
        message_ids = [message_ids[0]] * len(rows)
    payloads: list[bytes | None] = []
    for i, ((source, body, skipped), message_id) in enumerate(zip(rows, message_ids, strict=True)):
        if skipped and i:
            payloads.append(None)  # a damaged record: its offset is skipped
            continue
        values = {
            "content_type": "application/json",
            "headers": {"source": source},
            "delivery_mode": 2,
            "correlation_id": message_id[::-1],
            "message_id": message_id,
        }
        props = header_payload(0, **{k: v for k, v in values.items() if k in keys})
        if not_utf8:  # é becomes two bytes that are not UTF-8 (the length is kept)
            props = props.replace("é".encode(), b"\xff\xfe")
        payloads.append(encode_record(i, MessageRecord("", "s", props, body, 1_700_000_000_000 + i), []))
    chunks = Chunks(1 << 62)
    chunks.add(encode_chunk(payloads), 0, len(payloads))
    got = chunk_batch("s", chunks, with_headers)
    expected = one_by_one(payloads, 0, 1 << 62, with_headers)
    assert got.to_pydict() == expected.to_pydict()
    assert got.equals(expected)


def test_a_property_list_that_runs_past_its_record_among_rows_of_other_properties_is_an_error() -> None:
    plain = header_payload(0, content_type="text/plain")
    props = bytearray(header_payload(0, content_type="text/plain", message_id="m-1"))
    props[14] = 200  # the content type's length now runs past the message id and the record's end
    records = [encode_record(i, MessageRecord("", "s", p, b"x", 1), []) for i, p in enumerate([plain, bytes(props)])]
    chunks = Chunks(1 << 62)
    chunks.add(encode_chunk(records), 0, 2)
    with pytest.raises(BrokerError, match="properties run past"):
        chunk_batch("s", chunks, include_headers=False)
