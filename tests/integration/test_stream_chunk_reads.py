"""Chunk deliveries (x-amqpd-chunk) from a broker with its store, over a socket: what pika receives, and the
connector's reader getting the same rows in chunks as message by message, with another queue's records in
between, bodies over frame_max, and a record damaged on disk."""

from __future__ import annotations

import itertools
import struct
import time
from pathlib import Path
from typing import Any

import pika

from amqpd.broker.streams.chunks import CHUNK_BYTES
from amqpd.spark.reader import arrow_batches
from amqpd.spark.wire import Endpoint, StreamReader
from amqpd.testing import BrokerProcess

STREAM = {"x-queue-type": "stream"}


def stream_publisher(url: str, *also: str) -> tuple[pika.BlockingConnection, Any]:
    """A connection and a channel in confirm mode, with stream "s" declared (and durable queues `also`)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare("s", durable=True, arguments=STREAM)
    for queue in also:
        ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    return conn, ch


def read_all(url: str, start: int, end: int, chunk_records: int, layout: int = 3) -> dict[str, list[Any]]:
    """The rows as Spark gets them (record batches), column by column; layout 2: as a reader older than
    layout 3 asks."""
    reader = StreamReader(
        Endpoint.parse(url), "s", start, end, with_headers=True, chunk_records=chunk_records, chunk_layout=layout
    )
    out: dict[str, list[Any]] = {}
    for batch in arrow_batches(reader):
        for name, values in batch.to_pydict().items():
            out.setdefault(name, []).extend(values)
    return out


def raw_chunks(url: str, chunk: int, count: int, offset: int = 0, **arguments: Any) -> list[tuple[Any, bytes]]:
    """The first `count` chunk deliveries pika receives from `offset`: (properties, body)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=count)
    got: list[tuple[Any, bytes]] = []
    args = {"x-stream-offset": offset, "x-amqpd-chunk": chunk, **arguments}
    for _method, props, body in ch.consume("s", arguments=args, inactivity_timeout=10):
        assert props is not None, "no chunk delivery within 10 s"
        got.append((props, body))
        if len(got) == count:
            break
    conn.close()
    return got


def entry_lengths(props: Any, body: bytes) -> list[int]:
    """The lengths table at the head of a chunk's body; the records after it fill the rest exactly."""
    count = props.headers["x-amqpd-chunk"]
    lengths = list(struct.unpack_from(f">{count}I", body))
    assert 4 * count + sum(lengths) == len(body)
    return lengths


def test_the_reader_gets_the_same_rows_in_chunks_as_message_by_message(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path)) as broker:
        conn, ch = stream_publisher(broker.url, "other")
        for i in range(300):  # another queue's records in between, and some bodies over frame_max
            body = bytes([i % 256]) * (300_000 if i % 50 == 7 else 20)
            props = pika.BasicProperties(message_id=f"id{i}", headers={"n": i}, content_type="t")
            ch.basic_publish("", "s", body, props)
            ch.basic_publish("", "other", b"x", pika.BasicProperties(delivery_mode=2))
        conn.close()
        chunked = read_all(broker.url, 10, 290, chunk_records=64)
        plain = read_all(broker.url, 10, 290, chunk_records=0)
        assert chunked["offset"] == list(range(10, 290))
        assert chunked == plain
        (props, body), *_ = raw_chunks(broker.url, 64, 1)
        assert props.content_type == "application/vnd.amqpd.stream-chunk.v2"
        assert props.headers == {"x-stream-offset": 0, "x-amqpd-chunk": 64}
        assert len(entry_lengths(props, body)) == 64


def test_a_record_damaged_on_disk_is_an_empty_entry_and_its_offset_is_skipped(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path)) as broker:
        conn, ch = stream_publisher(broker.url)
        for i in range(5):
            ch.basic_publish("", "s", b"DAMAGE-ME" if i == 2 else b"body-%d" % i)
        conn.close()
        broker.stop()  # a broker trusts what it wrote itself until it stops (store/checked_runs.py)
        (segment,) = (tmp_path / "segments").glob("*.seg")
        data = bytearray(segment.read_bytes())
        data[data.index(b"DAMAGE-ME")] ^= 0xFF  # its checksum no longer matches
        segment.write_bytes(bytes(data))
        broker.start()
        (props, body), *_ = raw_chunks(broker.url, 100, 1)
        assert [n > 0 for n in entry_lengths(props, body)] == [True, True, False, True, True]
        chunked = read_all(broker.url, 0, 5, chunk_records=100)
        assert chunked["offset"] == [0, 1, 3, 4]
        assert chunked == read_all(broker.url, 0, 5, chunk_records=0)


def runs_table(body: bytes) -> list[tuple[int, int, int]]:
    """Layout 3's runs table: (records, bytes before each, record length) of each run."""
    (runs,) = struct.unpack_from(">I", body)
    flat = struct.unpack_from(f">{3 * runs}I", body, 4)
    return list(zip(flat[0::3], flat[1::3], flat[2::3], strict=True))


def test_layout_3_reads_the_same_rows_first_and_again_across_size_changes_and_damage(tmp_path: Path) -> None:
    """Runs of one size broken by another, by another queue's records and by a record damaged on disk; a
    range that ends mid-run: read a first time (records checked as read) and again (stretches of frames as
    they lie on disk), by a reader that asks for layout 3 and by an older one."""
    with BrokerProcess(data_dir=str(tmp_path)) as broker:
        conn, ch = stream_publisher(broker.url, "other")
        for i in range(400):
            size = 300_000 if i == 150 else 20 if i < 150 else 60
            body = (b"DAMAGE-ME" if i == 230 else b"%05d" % i).ljust(size, b".")
            ch.basic_publish("", "s", body, pika.BasicProperties(message_id=f"id{i}" if i % 97 == 0 else None))
            if 300 <= i < 310:
                ch.basic_publish("", "other", b"x", pika.BasicProperties(delivery_mode=2))
        conn.close()
        broker.stop()  # a broker trusts what it wrote itself until it stops (store/checked_runs.py)
        (segment,) = (tmp_path / "segments").glob("*.seg")
        data = bytearray(segment.read_bytes())
        data[data.index(b"DAMAGE-ME")] ^= 0xFF  # its checksum no longer matches
        segment.write_bytes(bytes(data))
        broker.start()
        plain = read_all(broker.url, 5, 350, chunk_records=0)
        assert plain["offset"] == [i for i in range(5, 350) if i != 230]
        for _ in range(2):  # a first read, then one of records read before
            assert read_all(broker.url, 5, 350, chunk_records=64) == plain
            assert read_all(broker.url, 5, 350, chunk_records=64, layout=2) == plain
        for _ in range(2):  # from offset 0: records 0 … 4 not read before the first time
            (props, body), *_ = raw_chunks(broker.url, 64, 1, **{"x-amqpd-chunk-layout": 3})
            assert props.content_type == "application/vnd.amqpd.stream-chunk.v3"
        table = runs_table(body)
        assert sum(count for count, _, _ in table) == 64
        # records read before, as their frames after their 24-byte headers; the first few bare (record 0
        # has a size of its own, and too few of one size were read after it to be remembered as checked)
        assert {gap for _, gap, _ in table} == {0, 24}
        assert sum(count for count, gap, _ in table if gap == 24) >= 58


def test_layout_3_reads_across_segments_and_runs_of_records_over_frame_max(tmp_path: Path) -> None:
    """Small segments (a chunk's records span several), and a run of records of one size over frame_max
    (a chunk of them is several body frames, and it stops past 1 MiB): the same rows read again."""
    with BrokerProcess(data_dir=str(tmp_path), env={"AMQPD_SEGMENT_SIZE": "2500000"}) as broker:
        conn, ch = stream_publisher(broker.url)
        for i in range(600):
            size = 120_000 if 200 <= i < 230 else 30
            ch.basic_publish("", "s", (b"%05d" % i).ljust(size, b"-"))
        conn.close()
        assert len(list((tmp_path / "segments").glob("*.seg"))) >= 2
        plain = read_all(broker.url, 3, 590, chunk_records=500, layout=2)
        assert plain["offset"] == list(range(3, 590))
        for _ in range(2):
            assert read_all(broker.url, 3, 590, chunk_records=500) == plain
        (_, body), *_ = raw_chunks(broker.url, 100, 1, offset=201, **{"x-amqpd-chunk-layout": 3})
        table = runs_table(body)
        assert table[0][1:] == (24, table[0][2]) and table[0][0] >= 2  # big records as frames, one chunk
        # it stops after the record that takes it past CHUNK_BYTES
        last = table[-1][1] + table[-1][2]
        assert len(body) - 4 - 12 * len(table) - last < CHUNK_BYTES < len(body)


def records_of(body: bytes) -> list[bytes]:
    """A layout 3 chunk's records, each as the store keeps it (its frame header skipped)."""
    table = runs_table(body)
    at = 4 + 12 * len(table)
    out = []
    for count, gap, length in table:
        for _ in range(count):
            out.append(body[at + gap : at + gap + length])
            at += gap + length
    assert at == len(body)
    return out


def test_chunks_on_two_channels_to_a_reader_that_stops_reading_arrive_whole_in_small_frames(tmp_path: Path) -> None:
    """A chunk goes out as pieces (frame headers and views of the records read), not joined: over frame_max
    4096 (hundreds of frames a chunk), on two channels of one connection at once, to a client that reads
    nothing for a while (the broker's socket fills and its writes wait): each channel's deliveries arrive
    frame after frame in order (pika refuses a frame out of place) with the records as published, read
    again (one pread of frames as on disk a chunk) after a first read."""
    published = [(b"%05d" % i).ljust(100_000, bytes([65 + i % 26])) for i in range(120)]  # 12 MB
    with BrokerProcess(data_dir=str(tmp_path)) as broker:
        conn, ch = stream_publisher(broker.url)
        for body in published:
            ch.basic_publish("", "s", body)
        conn.close()
        assert read_all(broker.url, 0, 120, chunk_records=100)["offset"] == list(range(120))  # checks them
        conn = pika.BlockingConnection(pika.URLParameters(broker.url + "?frame_max=4096"))
        got: dict[int, list[tuple[int, int, bytes]]] = {1: [], 2: []}
        for number, chunks in got.items():
            channel = conn.channel(number)
            channel.basic_qos(prefetch_count=1000)

            def on_chunk(_c: Any, _m: Any, props: Any, body: bytes, chunks: list = chunks) -> None:
                chunks.append((props.headers["x-stream-offset"], props.headers["x-amqpd-chunk"], body))

            args = {"x-stream-offset": 0, "x-amqpd-chunk": 100, "x-amqpd-chunk-layout": 3}
            channel.basic_consume("s", on_chunk, arguments=args)  # unacked: prefetch leaves room for all
        time.sleep(1)  # reads nothing meanwhile: more than the sockets hold waits in the broker's writes
        deadline = time.monotonic() + 60
        while sum(count for _, count, _ in got[1]) < 120 or sum(count for _, count, _ in got[2]) < 120:
            assert time.monotonic() < deadline, "not every chunk within 60 s"
            conn.process_data_events(time_limit=1)
        conn.close()
    for chunks in got.values():
        assert [first for first, _, _ in chunks] == list(itertools.accumulate([0] + [n for _, n, _ in chunks[:-1]]))
        records = [record for _, _, body in chunks for record in records_of(body)]
        assert len(records) == 120
        assert all(record.endswith(body) for record, body in zip(records, published, strict=True))
        tables = [run for _, _, body in chunks for run in runs_table(body)]
        assert sum(count for count, gap, _ in tables if gap == 24) >= 60  # most as frames as they lie on disk
