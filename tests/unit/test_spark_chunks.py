"""The connector's reader on chunk deliveries, against the broker's own channel and stream in process (the
reader's frames go to the channel as a session would hand them over; what the broker sends comes back as
bytes): the same rows as message by message for any messages and range (a differential test), and the
fallback to per-message deliveries when the broker ignores x-amqpd-chunk."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from fakes import ClientChannel, new_broker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pamqp_frame

import amqpd.broker.streams.chunks as chunks_module
import amqpd.broker.streams.stream as stream_module
from amqpd.spark import wire
from amqpd.spark.reader import arrow_batches
from amqpd.spark.rows import arrow_schema
from amqpd.spark.wire import Endpoint, StreamReader

_FRAME_HEADER = struct.Struct(">BHI")
LINK = wire.Link


class InProcessSocket:
    """The reader's socket, wired to a broker channel in this process."""

    def __init__(self, client: ClientChannel, pieces: list[int] | None = None) -> None:
        self.client = client
        self.consumes: list[dict[str, Any]] = []  # each basic.consume's arguments
        self.pending = b""  # sent by the broker, not yet received
        self.pieces = pieces or [1 << 30]  # bytes a recv gives at most, in turn, as TCP may cut them
        self.recvs = 0

    def sendall(self, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            _, _, size = _FRAME_HEADER.unpack_from(data, pos)
            raw = data[pos : pos + 8 + size]
            pos += 8 + size
            if raw[7:11] == b"\x00\x3c\x00\x50":  # basic.ack, as the session hands it over
                self.client.ch.on_ack(raw[7:-1])
                continue
            _, _, method = pamqp_frame.unmarshal(raw)
            self._method(method)

    def _method(self, method: Any) -> None:
        conn = self.client.conn
        if isinstance(method, commands.Channel.Close):
            self.client.ch.shutdown()
            self.client = ClientChannel(self.client.broker, conn=conn)
            conn.send(pamqp_frame.marshal(commands.Channel.CloseOk(), 1))
        elif isinstance(method, commands.Channel.Open):
            conn.send(pamqp_frame.marshal(commands.Channel.OpenOk(), 1))
        elif isinstance(method, commands.Connection.Close):
            self.client.ch.shutdown()
        else:
            if isinstance(method, commands.Basic.Consume):
                self.consumes.append(dict(method.arguments))
            self.client.ch.handle(method)

    def recv_into(self, room: memoryview) -> int:
        self.pending += b"".join(self.client.conn.sent)
        self.client.conn.sent.clear()
        if not self.pending:
            raise TimeoutError  # the reader waits for what the broker will never send
        got = min(len(room), len(self.pending), self.pieces[self.recvs % len(self.pieces)])
        room[:got], self.pending = self.pending[:got], self.pending[got:]
        self.recvs += 1
        return got

    def gettimeout(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


def in_process_reader(
    client: ClientChannel,
    monkeypatch: pytest.MonkeyPatch,
    start: int,
    end: int,
    link_bytes: int = wire.RECV_BYTES,
    pieces: list[int] | None = None,
    frame_max: int = 131072,
    **options: Any,
) -> tuple[StreamReader, InProcessSocket]:
    """A StreamReader for [start, end) of stream "s" whose link is a channel of the in-process broker (with
    a receive buffer of link_bytes; each recv giving at most pieces[i] bytes, in turn; the broker sending
    frames of frame_max bytes at most)."""
    sock = InProcessSocket(ClientChannel(client.broker), pieces)  # a channel of its own, as a connection has
    sock.client.conn.frame_max = frame_max

    def link(endpoint: Endpoint) -> wire.Link:
        made = object.__new__(LINK)
        made.sock, made.buf, made.frame_max = sock, bytearray(link_bytes), 131072  # type: ignore[assignment]
        made.pos = made.end = 0
        made.most = wire.RECV_BYTES
        return made

    monkeypatch.setattr(wire, "Link", link)
    monkeypatch.setattr(wire._parked, "by_endpoint", {})  # no link kept from an earlier test's reader
    return StreamReader(Endpoint.parse("amqp://localhost/"), "s", start, end, **options), sock


def read(
    client: ClientChannel, monkeypatch: pytest.MonkeyPatch, start: int, end: int, **options: Any
) -> tuple[dict[str, list[Any]], InProcessSocket]:
    """Every row a StreamReader gives for [start, end) of stream "s", as Spark gets them (record batches),
    column by column (options: in_process_reader's and StreamReader's)."""
    reader, sock = in_process_reader(client, monkeypatch, start, end, **options)
    schema = arrow_schema(options["with_headers"])
    return pa.Table.from_batches(list(arrow_batches(reader)), schema=schema).to_pydict(), sock


def stream_with(
    messages: list[tuple[bytes, dict[str, Any]]], routes: list[tuple[str, int]] | None = None
) -> ClientChannel:
    """Stream "s" with the messages; routes (exchange, routing key length), one per message, else ("", 1)."""
    client = ClientChannel(new_broker())
    client.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    client.call(commands.Exchange.Declare(exchange="a-fanout-named-at-length", exchange_type="fanout"))
    for exchange in ("amq.fanout", "a-fanout-named-at-length"):
        client.call(commands.Queue.Bind(queue="s", exchange=exchange))
    for i, (body, properties) in enumerate(messages):
        exchange, length = routes[i] if routes else ("", 1)
        client.publish(exchange, "s" if exchange == "" else "k" * length, body, **properties)
    return client


# exchange and routing key names on either side of 12 bytes, what an Arrow view holds inline
routes = st.tuples(st.sampled_from(["", "amq.fanout", "a-fanout-named-at-length"]), st.integers(0, 16))
texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
header_values = st.one_of(texts, st.integers(-(2**31), 2**31 - 1), st.booleans(), st.binary(max_size=4).map(bytearray))
properties = st.fixed_dictionaries(
    {},
    optional={
        "content_type": texts,
        "message_id": texts,
        "correlation_id": texts,
        "reply_to": texts,
        "priority": st.integers(0, 9),
        "headers": st.dictionaries(st.text(min_size=1, max_size=6), header_values, max_size=3),
    },
)
bodies = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"\xff" * 140_000]))  # one over frame_max


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.lists(st.tuples(bodies, properties), min_size=1, max_size=30),
    route=st.lists(routes, min_size=30, max_size=30),
    data=st.data(),
    chunk=st.integers(1, 9),
    batch_rows=st.integers(1, 50),
    with_headers=st.booleans(),
    layout=st.sampled_from([2, 3]),
)
def test_chunk_deliveries_read_as_the_same_rows_as_message_by_message(
    monkeypatch: pytest.MonkeyPatch,
    messages: list[tuple[bytes, dict[str, Any]]],
    route: list[tuple[str, int]],
    data: st.DataObject,
    chunk: int,
    batch_rows: int,
    with_headers: bool,
    layout: int,
) -> None:
    start = data.draw(st.integers(0, len(messages) - 1))
    end = data.draw(st.integers(start + 1, len(messages)))
    options = {"with_headers": with_headers, "batch_rows": batch_rows}
    client = stream_with(messages, route)
    plain, _ = read(client, monkeypatch, start, end, chunk_records=0, **options)
    chunked, sock = read(client, monkeypatch, start, end, chunk_records=chunk, chunk_layout=layout, **options)
    assert sock.consumes[0]["x-amqpd-chunk"] == min(chunk, end - start)  # chunks were asked for and used
    assert sock.consumes[0].get("x-amqpd-chunk-layout") == (3 if layout == 3 else None)  # 2: an older reader
    assert len(sock.consumes) == 1
    assert plain["offset"] == list(range(start, end))
    assert chunked == plain


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(2, 30),
    size=st.sampled_from([0, 5, 13, 100]),
    shared=properties,
    route=routes,
    odd=st.tuples(st.integers(0, 29), st.sampled_from(["none", "body", "route", "message_id"])),
    chunk=st.integers(1, 9),
    with_headers=st.booleans(),
)
def test_alike_messages_read_as_the_same_rows_as_message_by_message(
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    size: int,
    shared: dict[str, Any],
    route: tuple[str, int],
    odd: tuple[int, str],
    chunk: int,
    with_headers: bool,
) -> None:
    """One publisher's messages: one route, the same properties, bodies of one size (chunk_rows reads them
    as alike); one message may differ in its body's length, its route or its message id."""
    messages = [(bytes([i]) * size, shared) for i in range(count)]
    routes_of = [route] * count
    at, change = odd[0] % count, odd[1]
    if change == "body":
        messages[at] = (b"+" * (size + 1), shared)
    elif change == "route":
        routes_of[at] = (route[0], route[1] + 1)
    elif change == "message_id":
        messages[at] = (messages[at][0], {**shared, "message_id": "another"})
    client = stream_with(messages, routes_of)
    options = {"with_headers": with_headers, "batch_rows": 50}
    plain, _ = read(client, monkeypatch, 0, count, chunk_records=0, **options)
    chunked, _ = read(client, monkeypatch, 0, count, chunk_records=chunk, **options)
    assert plain["offset"] == list(range(count))
    assert chunked == plain


def test_a_broker_that_ignores_the_chunk_argument_is_read_message_by_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # RabbitMQ ignores consumer arguments it does not know: the broker here, told another name, does the same
    monkeypatch.setattr(stream_module, "CHUNK_ARG", "x-not-this")
    monkeypatch.setattr(chunks_module, "CHUNK_ARG", "x-not-this")
    client = stream_with([(f"m{i}".encode(), {"message_id": f"id{i}"}) for i in range(50)])
    out, sock = read(client, monkeypatch, 5, 45, with_headers=False, chunk_records=8)
    assert out["offset"] == list(range(5, 45))
    assert out["body"] == [f"m{i}".encode() for i in range(5, 45)]
    assert out["message_id"] == [f"id{i}" for i in range(5, 45)]
    assert [a.get("x-amqpd-chunk") for a in sock.consumes] == [8, None]  # asked once, then per message


def test_a_record_batch_holds_no_more_than_batch_bytes_of_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "BATCH_BYTES", 1)  # every chunk is then a batch of its own
    client = stream_with([(b"m%d" % i, {}) for i in range(20)])
    reader, _ = in_process_reader(client, monkeypatch, 0, 18, with_headers=False, chunk_records=4, batch_rows=1000)
    batches = [b.column("offset").to_pylist() for b in arrow_batches(reader)]
    assert batches == [list(range(k, min(k + 4, 18))) for k in range(0, 18, 4)]


@pytest.mark.parametrize("chunk_records", [4, 0])
def test_a_read_starts_with_a_small_batch_and_doubles_it_up_to_batch_rows(
    monkeypatch: pytest.MonkeyPatch, chunk_records: int
) -> None:
    """Spark starts on a read's first rows once they are in, not once a whole batch is: the first batch holds
    FIRST_BATCH_ROWS (whole chunks), each next twice as many, up to batch_rows; chunks or message by message."""
    monkeypatch.setattr(wire, "FIRST_BATCH_ROWS", 4)
    client = stream_with([(b"m%d" % i, {}) for i in range(100)])
    options = {"with_headers": False, "chunk_records": chunk_records, "batch_rows": 32}
    reader, _ = in_process_reader(client, monkeypatch, 0, 100, **options)
    batches = [b.column("offset").to_pylist() for b in arrow_batches(reader)]
    assert [len(b) for b in batches] == [4, 8, 16, 32, 32, 8]
    assert sum(batches, []) == list(range(100))


def test_chunks_shorter_than_asked_for_still_bring_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker stops a chunk at a size in bytes: with chunks of 2 records where 10 were asked for, the
    reader's estimate of when its acks reach the range's end is wrong by far; once it holds all its credit it
    acks anyway, so the broker goes on sending."""
    monkeypatch.setattr(chunks_module, "CHUNK_BYTES", 1)  # a chunk stops at the read step past 1 byte
    monkeypatch.setattr(chunks_module, "FIRST_STEP", 2)
    monkeypatch.setattr(chunks_module, "READ_STEP", 2)
    client = stream_with([(b"m%d" % i, {}) for i in range(100)])
    out, sock = read(client, monkeypatch, 0, 100, with_headers=False, chunk_records=10)
    assert sock.consumes[0]["x-amqpd-chunk"] == 10
    assert out["offset"] == list(range(100))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.lists(st.tuples(st.binary(max_size=60), properties), min_size=1, max_size=25),
    frame_max=st.integers(9, 120),
    link_bytes=st.integers(1, 300),
    pieces=st.lists(st.integers(1, 400), min_size=1, max_size=6),
    chunk=st.integers(1, 9),
    layout=st.sampled_from([2, 3]),
)
def test_chunk_bodies_split_over_many_frames_and_recvs_read_as_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
    messages: list[tuple[bytes, dict[str, Any]]],
    frame_max: int,
    link_bytes: int,
    pieces: list[int],
    chunk: int,
    layout: int,
) -> None:
    """A chunk's body in body frames of 1-112 bytes, received in pieces of 1-400 bytes into a link buffer of
    1-300 bytes (grown when a frame is larger): frames and recvs cut at every place, a frame ending where
    a recv or the buffer does, and still the same rows as message by message."""
    client = stream_with(messages)
    options: dict[str, Any] = {"with_headers": True, "batch_rows": 7}
    plain, _ = read(client, monkeypatch, 0, len(messages), chunk_records=0, **options)
    options.update(chunk_records=chunk, chunk_layout=layout, link_bytes=link_bytes, pieces=pieces)
    chunked, sock = read(client, monkeypatch, 0, len(messages), frame_max=frame_max, **options)
    assert sock.consumes[0]["x-amqpd-chunk"] == min(chunk, len(messages)) and len(sock.consumes) == 1
    assert plain["offset"] == list(range(len(messages)))
    assert chunked == plain


def test_a_batch_buffer_is_sized_by_batch_bytes_not_by_batch_rows_of_the_largest_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's buffer is allocated from the last chunk's size, times the chunks a batch of batch_rows takes:
    a chunk of one large record must not make it batch_rows of them (here 10,000 × 2 KB)."""
    monkeypatch.setattr(wire, "BATCH_BYTES", 5_000)
    client = stream_with([(b"x" * 2_000, {}) for _ in range(12)])
    reader, _ = in_process_reader(client, monkeypatch, 0, 12, with_headers=False, chunk_records=1, batch_rows=10_000)
    batches = list(reader.batches())
    assert [len(b) for b in batches] == [3, 3, 3, 3]  # BATCH_BYTES, each 2 KB records over
    assert all(isinstance(b, wire.Chunks) and len(b.data) <= 2 * (wire.BATCH_BYTES + wire.PAD) for b in batches)


def test_a_last_batch_buffer_is_sized_by_what_is_left_of_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "BATCH_BYTES", 50_000)
    client = stream_with([(b"x" * 2_000, {}) for _ in range(30)])
    options = {"with_headers": False, "chunk_records": 1, "batch_rows": 1_000}
    monkeypatch.setattr(wire, "FIRST_BATCH_ROWS", 1)
    reader, _ = in_process_reader(client, monkeypatch, 0, 4, **options)
    batches = list(reader.batches())
    assert [len(b) for b in batches] == [1, 2, 1]
    last = batches[-1]
    assert isinstance(last, wire.Chunks) and len(last.data) < 2 * (last.size + wire.PAD)
