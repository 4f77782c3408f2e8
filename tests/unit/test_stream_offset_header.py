"""The replay's spliced x-stream-offset header against the general path: the header a stream consumer gets
must be byte for byte what appending the fields through split/join properties gives, and pamqp must read
the offset (and append time) back beside every property as published."""

from __future__ import annotations

import struct
from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.header import ContentHeader

from amqpd.broker.streams.stream import _OFFSET_FIELD, _TIMESTAMP_FIELD, with_offset_header
from amqpd.protocol.properties import append_header_field

short = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
maybe = st.none() | short
tables = st.none() | st.dictionaries(
    st.text(min_size=1, max_size=8), st.integers(-1000, 1000) | short | st.booleans(), max_size=4
)


def stored_header(props: commands.Basic.Properties, body_size: int) -> bytes:
    """The content header payload as a publisher sends it (and a stream stores it)."""
    return pamqp_frame.marshal(ContentHeader(0, body_size, props), 1)[7:-1]


def delivered(header: bytes) -> ContentHeader:
    """pamqp's reading of the header frame a consumer gets."""
    frame = struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce"
    read = pamqp_frame.unmarshal(frame)[2]
    assert isinstance(read, ContentHeader)
    return read


@given(
    content_type=maybe,
    content_encoding=maybe,
    headers=tables,
    message_id=maybe,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    timestamp=st.none() | st.datetimes(datetime(1970, 1, 1), datetime(2200, 1, 1)),
    body_size=st.integers(0, 2**40),
    offset=st.integers(0, 2**62),
    stamp=st.none() | st.integers(0, 2**42),
)
def test_the_spliced_offset_header_equals_the_general_rewrite(
    content_type: str | None,
    content_encoding: str | None,
    headers: dict | None,
    message_id: str | None,
    delivery_mode: int | None,
    timestamp: datetime | None,
    body_size: int,
    offset: int,
    stamp: int | None,
) -> None:
    props = commands.Basic.Properties(
        content_type=content_type,
        content_encoding=content_encoding,
        headers=headers,
        delivery_mode=delivery_mode,
        message_id=message_id,
        timestamp=timestamp,
        app_id="app",
    )
    raw = stored_header(props, body_size)
    field = _OFFSET_FIELD + struct.pack(">q", offset)
    if stamp is not None:
        field += _TIMESTAMP_FIELD + struct.pack(">q", stamp)
    spliced = with_offset_header(raw, offset, stamp)
    assert spliced == append_header_field(raw, body_size, field)
    read = delivered(spliced)
    got, sent = read.properties, delivered(raw).properties
    assert got.headers.pop("x-stream-offset") == offset
    if stamp is not None:
        assert got.headers.pop("x-stream-timestamp") == stamp
    assert got.headers == (sent.headers or {})
    got.headers = sent.headers
    assert vars(got) == vars(sent) and read.body_size == body_size


def test_a_header_without_a_table_gains_one_holding_the_offset() -> None:
    raw = stored_header(commands.Basic.Properties(content_type="text/plain", delivery_mode=2), 5)
    spliced = with_offset_header(raw, 7)
    got = delivered(spliced).properties
    assert got.headers == {"x-stream-offset": 7}
    assert (got.content_type, got.delivery_mode) == ("text/plain", 2)
