"""The bounds check that runs before pamqp decodes a method: every valid table passes, every overrun,
unknown type and too-deep nesting is caught with the code RabbitMQ (or our better answer) gives."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp import encode as pencode

from amqpd.errors import AMQPError
from amqpd.protocol.field_tables import BadField, Overrun, check_table
from amqpd.protocol.methods import decode_method

values = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.text(max_size=20),
        st.none(),
        st.floats(-1e6, 1e6),
        st.binary(max_size=20).map(bytearray),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=10), values, max_size=6))
def test_every_table_pamqp_writes_passes(table: dict) -> None:
    raw = pencode.field_table(table)
    assert check_table(raw, 0, len(raw), 1, 64) == len(raw)


def declare_with_table(table_bytes: bytes) -> bytes:
    args = b"\x00\x00" + b"\x01q" + b"\x00" + struct.pack(">I", len(table_bytes)) + table_bytes
    return b"\x00\x32\x00\x0a" + args


def test_longstr_claiming_more_than_its_table_is_501_with_the_method() -> None:
    entry = b"\x01k" + b"S" + struct.pack(">I", 99999) + b"ab"
    with pytest.raises(AMQPError) as info:
        decode_method(declare_with_table(entry))
    assert (info.value.code, info.value.class_id, info.value.method_id) == (501, 50, 10)


def test_unknown_field_type_is_502() -> None:
    with pytest.raises(AMQPError) as info:
        decode_method(declare_with_table(b"\x01kQ\x00\x00\x00\x00"))
    assert info.value.code == 502


def test_tables_nested_past_the_limit_are_refused_without_recursing() -> None:
    table = b""
    for _ in range(10_000):  # far deeper than Python's recursion limit would allow
        table = b"\x01n" + b"F" + struct.pack(">I", len(table)) + table
    with pytest.raises(BadField):
        check_table(struct.pack(">I", len(table)) + table, 0, len(table) + 4, 1, 64)


def test_array_running_past_its_table_is_an_overrun() -> None:
    entry = b"\x01a" + b"A" + struct.pack(">I", 50) + b"t\x01"
    raw = struct.pack(">I", len(entry)) + entry
    with pytest.raises(Overrun):
        check_table(raw, 0, len(raw), 1, 64)


def test_a_valid_declare_still_decodes() -> None:
    payload = frame.marshal(commands.Queue.Declare(queue="q", arguments={"x-message-ttl": 5, "n": {"a": [1]}}), 1)
    method = decode_method(payload[7:-1])
    assert method.arguments == {"x-message-ttl": 5, "n": {"a": [1]}}
