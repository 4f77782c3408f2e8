"""The connector's stream reader against a model broker that honours basic.qos credit as a stream queue
does (it sends while fewer than `prefetch` deliveries are unacked): every offset of the range arrives once,
the reader never stalls waiting for credit it did not return, and the broker is never let to send past the
range's end (it used to send up to a whole prefetch window more, which the reader read and dropped)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.header import ContentHeader

from amqpd.broker.streams.stream import with_offset_header
from amqpd.protocol.frames import frame
from amqpd.spark.wire import Endpoint, StreamReader

_FRAME_HEADER = struct.Struct(">BHI")


def delivery(tag: int, offset: int) -> bytes:
    method = pamqp_frame.marshal(commands.Basic.Deliver("c", tag, False, "", "s"), 1)
    raw = pamqp_frame.marshal(ContentHeader(0, 1, commands.Basic.Properties()), 1)[7:-1]
    header = with_offset_header(raw, offset, 1_700_000_000_000)  # as the broker sends an x-stream-timestamp reader
    return method + frame(2, 1, header) + frame(3, 1, b"x")


class ModelBroker:
    """A stream from offset `first` to `length`, consumed from `start` with a credit of `prefetch`."""

    def __init__(self, start: int, length: int, prefetch: int) -> None:
        self.next_offset, self.length, self.prefetch = start, length, prefetch
        self.sent = self.acked = 0
        self.max_offset_sent = -1

    def sendall(self, data: bytes) -> None:  # the reader's acks (basic.ack, multiple)
        kind, _, _ = _FRAME_HEADER.unpack_from(data)
        assert kind == 1 and data[7:11] == b"\x00\x3c\x00\x50"
        tag, multiple = struct.unpack_from(">QB", data, 11)
        assert multiple == 1
        self.acked = max(self.acked, tag)

    def send_what_credit_allows(self) -> bytes:
        out = b""
        while self.sent - self.acked < self.prefetch and self.next_offset < self.length:
            self.sent += 1
            out += delivery(self.sent, self.next_offset)
            self.max_offset_sent = self.next_offset
            self.next_offset += 1
        assert out, "the reader waits for a delivery the broker has no credit to send: it would hang"
        return out


class ModelLink:
    def __init__(self, broker: ModelBroker) -> None:
        self.sock = broker
        self.buf = bytearray()
        self.pos = 0

    def next_frame(self) -> tuple[int, int, int]:
        if self.pos >= len(self.buf):
            self.buf += self.sock.send_what_credit_allows()
        kind, _, size = _FRAME_HEADER.unpack_from(self.buf, self.pos)
        start, end = self.pos + 7, self.pos + 7 + size
        self.pos = end + 1
        return kind, start, end


@given(
    start=st.integers(0, 50),
    count=st.integers(1, 400),
    beyond=st.integers(0, 300),
    prefetch=st.integers(1, 120),
)
def test_the_reader_gets_its_range_once_and_the_broker_sends_nothing_past_it(
    start: int, count: int, beyond: int, prefetch: int
) -> None:
    end = start + count
    reader = StreamReader(Endpoint("h", 1, "u", "p", "/"), "s", start, end, with_headers=False, prefetch=prefetch)
    broker = ModelBroker(start, end + beyond, reader._window())
    got = [o for batch in reader._scan(ModelLink(broker)) for o in batch.offset]  # type: ignore[arg-type]
    assert got == list(range(start, end))
    assert broker.max_offset_sent == end - 1
