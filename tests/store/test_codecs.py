"""Codecs under the store: argument tables, offset runs, records, frames."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import MessageRecord, MessageStore, MissingCatalogue
from store.arguments_codec import decode_arguments, encode_arguments
from store.frame import ScanReport, append_frame, scan_frames
from store.queue_state import decode_runs, encode_runs
from store.record_codec import decode_record, encode_record, encode_records

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.datetimes()
    | st.datetimes(timezones=st.timezones())
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20
)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type all the way down (1 == 1.0 == True would hide a lossy codec)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, datetime):
        # The codec keeps a wall time and its UTC offset, not the zone's name; and a time in a zone's DST
        # fold or gap never equals one in another zone (PEP 495), so compare what it keeps.
        return (a.replace(tzinfo=None), a.utcoffset()) == (b.replace(tzinfo=None), b.utcoffset())
    return bool(a == b)


@given(st.dictionaries(st.text(), values, max_size=6))
def test_argument_tables_round_trip_with_their_types(table: dict[str, Any]) -> None:
    assert same(decode_arguments(encode_arguments(table)), table)


def test_times_in_a_zones_dst_fold_or_gap_keep_their_wall_time_and_offset() -> None:
    new_york = ZoneInfo("America/New_York")
    for time in (datetime(2021, 11, 7, 1, 30, fold=1, tzinfo=new_york), datetime(2021, 3, 14, 2, 30, tzinfo=new_york)):
        assert same(decode_arguments(encode_arguments({"at": time})), {"at": time})


def test_special_floats_round_trip() -> None:
    decoded = decode_arguments(encode_arguments({"nan": math.nan, "inf": -math.inf, "tiny": 5e-324}))
    assert math.isnan(decoded["nan"]) and decoded["inf"] == -math.inf and decoded["tiny"] == 5e-324


def test_equal_tables_encode_equally_whatever_the_key_order() -> None:
    assert encode_arguments({"a": 1, "b": {"y": 2, "x": 3}}) == encode_arguments({"b": {"x": 3, "y": 2}, "a": 1})


def test_unknown_argument_types_are_refused() -> None:
    with pytest.raises(TypeError):
        encode_arguments({"x": object()})


@given(st.sets(st.integers(0, 10_000)))
def test_offset_runs_round_trip(offsets: set[int]) -> None:
    ordered = sorted(offsets)
    assert list(decode_runs(encode_runs(ordered))) == ordered


@given(
    st.text(max_size=50),
    st.text(max_size=50),
    st.binary(max_size=40),
    st.binary(max_size=300),
    st.integers(0, 2**63),
    st.none() | st.integers(0, 2**63),
    st.lists(st.integers(0, 2**32 - 1), max_size=5),
)
def test_records_round_trip(
    exchange: str, key: str, props: bytes, body: bytes, ts: int, expires: int | None, queues: list[int]
) -> None:
    record = MessageRecord(exchange, key, props, body, ts, expires)
    assert decode_record(encode_record(12345, record, queues)) == (12345, tuple(queues), record)


records = st.builds(
    MessageRecord,
    st.sampled_from(["", "amq.direct", "ex\u00e9"]),
    st.sampled_from(["", "k", "route"]),
    st.binary(max_size=40),
    st.binary(max_size=100),
    st.integers(0, 2**63),
    st.none() | st.integers(0, 2**63),
)


@given(st.lists(records, max_size=8), st.integers(0, 2**40), st.lists(st.integers(0, 2**32 - 1), max_size=4))
def test_records_encoded_together_are_those_encoded_one_by_one(
    group: list[MessageRecord], first: int, queues: list[int]
) -> None:
    """encode_records (a confirmed group's path) against encode_record of each: the same bytes, whatever
    mix of expiries and names the group holds."""
    assert encode_records(first, group, queues) == [encode_record(first + i, r, queues) for i, r in enumerate(group)]


def test_routing_keys_longer_than_a_short_string_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_record(1, MessageRecord("", "k" * 256, b"", b"", 0), [])


def test_scan_resyncs_after_a_damaged_header_and_counts_it() -> None:
    data = bytearray()
    starts = []
    for seq in range(5):
        starts.append(len(data))
        append_frame(data, seq, b"payload-%d" % seq)
    data[starts[2] + 1] ^= 0xFF  # the length field of frame 2
    report = ScanReport()
    assert [seq for _, seq, _ in scan_frames(bytes(data), 0, len(data), report)] == [0, 1, 3, 4]
    assert (report.corrupt_frames, report.corrupt_bytes, report.torn_bytes) == (1, starts[3] - starts[2], 0)


@pytest.mark.anyio
async def test_segments_without_their_catalogue_are_refused_not_deleted(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    store.append(MessageRecord("", "q", b"", b"body", 1), [qid])
    await store.close()
    (tmp_path / "catalog.sqlite").unlink()
    store = MessageStore(tmp_path, fsync="none")
    with pytest.raises(MissingCatalogue):
        await store.open()
    assert list((tmp_path / "segments").glob("*.seg"))
