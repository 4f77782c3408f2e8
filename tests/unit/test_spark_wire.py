"""The connector's struct scanner against pamqp: a delivery's properties read from the header frame the
broker sends (offset and append time appended to the headers table) equal what pamqp decodes; the option
rules; the per-trigger cap. No sockets, no Spark session."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.header import ContentHeader

from amqpd.broker.streams.stream import with_offset_header
from amqpd.spark.options import ReadOptions
from amqpd.spark.reader import _capped
from amqpd.spark.rows import header_text
from amqpd.spark.wire import BrokerError, Columns, Endpoint, encode_publish, read_properties

short = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
maybe = st.none() | short


@given(
    content_type=maybe,
    content_encoding=maybe,
    correlation_id=maybe,
    reply_to=maybe,
    message_id=maybe,
    priority=st.none() | st.integers(0, 9),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    headers=st.none()
    | st.dictionaries(
        st.text(min_size=1, max_size=8).filter(lambda k: not k.startswith("x-")),
        st.integers(-1000, 1000) | short,
        max_size=4,
    ),
    offset=st.integers(0, 2**40),
    stamp=st.integers(0, 2**42),
    with_headers=st.booleans(),
)
def test_scanned_properties_match_pamqps_decoding(
    content_type: str | None,
    content_encoding: str | None,
    correlation_id: str | None,
    reply_to: str | None,
    message_id: str | None,
    priority: int | None,
    delivery_mode: int | None,
    headers: dict | None,
    offset: int,
    stamp: int,
    with_headers: bool,
) -> None:
    props = commands.Basic.Properties(
        content_type=content_type,
        content_encoding=content_encoding,
        headers=headers,
        delivery_mode=delivery_mode,
        priority=priority,
        correlation_id=correlation_id,
        reply_to=reply_to,
        message_id=message_id,
        timestamp=None,
        app_id="app",
    )
    marshalled = pamqp_frame.marshal(ContentHeader(0, 3, props), 1)
    sent = pamqp_frame.unmarshal(marshalled)[2].properties  # pamqp's reading (it drops empty strings)
    raw = marshalled[7:-1]
    delivered = bytearray(with_offset_header(raw, offset, stamp))  # what the broker sends a x-stream-timestamp reader
    flags = struct.unpack_from(">H", delivered, 12)[0]
    out = Columns()
    read_properties(delivered, 14, flags, with_headers, out)
    assert out.offset == [offset] and out.timestamp == [stamp]
    assert (out.content_type, out.correlation_id, out.message_id) == (
        [sent.content_type],
        [sent.correlation_id],
        [sent.message_id],
    )
    assert out.headers == [(sent.headers or {}) if with_headers else None]


def test_published_frames_decode_with_pamqp_to_the_same_message() -> None:
    from amqpd.spark.wire import Outgoing

    raw = encode_publish(Outgoing(b"x" * 300, "ex", "rk", "id1", "c1", "text/plain", {"a": "b"}), frame_max=136)
    frames = []
    while raw:
        used, _, f = pamqp_frame.unmarshal(raw)
        frames.append(f)
        raw = raw[used:]
    method, header, *bodies = frames
    assert (method.exchange, method.routing_key, method.mandatory) == ("ex", "rk", True)
    p = header.properties
    assert (p.message_id, p.correlation_id, p.content_type, p.headers, p.delivery_mode) == (
        "id1",
        "c1",
        "text/plain",
        {"a": "b"},
        2,
    )
    assert b"".join(b.value for b in bodies) == b"x" * 300 and len(bodies) == 3  # split at frame_max


def test_header_values_other_than_strings_are_json_and_bytes_base64() -> None:
    assert [header_text(v) for v in ("s", 5, True, b"\x01", {"k": [1, 2.5]}, None)] == [
        "s",
        "5",
        "true",
        "AQ==",
        '{"k":[1,2.5]}',
        None,
    ]


def test_the_uri_names_the_vhost_as_rabbitmq_reads_it() -> None:
    assert Endpoint.parse("amqp://u:p%40@h:1/%2F") == Endpoint("h", 1, "u", "p@", "/")
    assert Endpoint.parse("amqp://h").vhost == "/"
    assert Endpoint.parse("amqp://h/prod").vhost == "prod"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"queue": "s"}, "option uri is required"),
        ({"uri": "amqp://h"}, "option queue is required"),
        ({"uri": "amqp://h", "queue": "s", "startingOffsets": "latest"}, "not allowed for a batch read"),
        ({"uri": "amqp://h", "queue": "s", "endingOffsets": '{"s": -2}'}, "not allowed for a batch read"),
        ({"uri": "amqp://h", "queue": "a,b", "startingOffsets": '{"a": 1}'}, r"missing \['b'\]"),
        ({"uri": "amqp://h", "queue": "s", "failOnDataLoss": "maybe"}, "'true' or 'false'"),
        ({"uri": "amqp://h", "queue": "s", "maxOffsetsPerTrigger": "0"}, "at least 1"),
        ({"uri": "amqp://h", "queue": "s", "startingOffset": "earliest"}, "option startingOffset is not known"),
        ({"uri": "amqp://h", "queue": "s", "routing_key": "x"}, "option routing_key is not known"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ReadOptions.parse(options, streaming=False)


def test_max_records_per_trigger_is_accepted_as_kafkas_max_offsets_per_trigger() -> None:
    opts = ReadOptions.parse({"uri": "amqp://h", "queue": "s", "maxRecordsPerTrigger": "7"}, streaming=True)
    assert opts.max_per_trigger == 7 and opts.starting == "latest"


def test_the_per_trigger_cap_is_shared_among_streams_by_backlog() -> None:
    assert _capped({"a": 0, "b": 0}, {"a": 900, "b": 100}, 100) == {"a": 90, "b": 10}
    assert _capped({"a": 5, "b": 0}, {"a": 10, "b": 3}, 100) == {"a": 10, "b": 3}
    capped = _capped({"a": 0, "b": 0, "c": 0}, {"a": 1000, "b": 1, "c": 0}, 10)
    assert sum(capped.values()) <= 10 and capped["b"] == 1 and capped["c"] == 0


def test_a_delivery_without_the_append_time_is_an_error_not_a_1970_timestamp() -> None:
    props = commands.Basic.Properties(headers={"a": "b"})
    raw = pamqp_frame.marshal(ContentHeader(0, 3, props), 1)[7:-1]
    delivered = bytearray(with_offset_header(raw, 5))
    with pytest.raises(BrokerError, match="no x-stream-timestamp"):
        read_properties(delivered, 14, struct.unpack_from(">H", delivered, 12)[0], False, Columns())
