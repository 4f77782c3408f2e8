"""The load generator's hand-rolled frames must be exactly what pamqp would send, and its scanner must count
deliveries and confirms however TCP happens to split or coalesce the stream."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pamqp import body, commands, frame, header

from bench.codec import (
    APP_CONTENT_TYPE,
    APP_HEADER,
    STAMP,
    AppPublish,
    BrokerClosed,
    ConfirmTracker,
    FrameScanner,
    StampedPublish,
    basic_ack,
    body_frames,
    content_header,
    publish_frames,
    publish_method,
)
from bench.stats import weighted_percentiles


def _pamqp_publish(channel: int, exchange: str, key: str, payload: bytes, frame_max: int, mode: int | None) -> bytes:
    props = commands.Basic.Properties(delivery_mode=mode)
    out = frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=key), channel)
    out += frame.marshal(header.ContentHeader(0, len(payload), props), channel)
    step = frame_max - 8
    for i in range(0, len(payload), step):
        out += frame.marshal(body.ContentBody(payload[i : i + step]), channel)
    return out


def _pamqp_app_publish(key: str, size: int, mode: int | None, tag: str, seq: int, now_s: int) -> bytes:
    props = commands.Basic.Properties(
        content_type=APP_CONTENT_TYPE,
        headers={APP_HEADER: f"req-{tag}-{seq:016d}"},
        delivery_mode=mode,
        correlation_id=f"corr-{tag}-{seq:016d}",
        message_id=f"msg-{tag}-{seq:016d}",
        timestamp=datetime.fromtimestamp(now_s, tz=UTC),
    )
    out = frame.marshal(commands.Basic.Publish(exchange="ex", routing_key=key), 1)
    out += frame.marshal(header.ContentHeader(0, size, props), 1)
    return out + (frame.marshal(body.ContentBody(bytes(size)), 1) if size else b"")


def _deliver(tag: int, payload: bytes, channel: int = 1, ctag: str = "ctag-1") -> bytes:
    out = frame.marshal(
        commands.Basic.Deliver(consumer_tag=ctag, delivery_tag=tag, exchange="ex", routing_key="rk"), channel
    )
    out += frame.marshal(header.ContentHeader(0, len(payload), commands.Basic.Properties()), channel)
    return out + (frame.marshal(body.ContentBody(payload), channel) if payload else b"")


def _confirm(tag: int, multiple: bool, nack: bool = False) -> bytes:
    method = commands.Basic.Nack if nack else commands.Basic.Ack
    return frame.marshal(method(delivery_tag=tag, multiple=multiple), 1)


@pytest.mark.parametrize("mode", [None, 1, 2])
@pytest.mark.parametrize("size", [0, 1, 100, 1024])
def test_publish_frames_match_pamqp_byte_for_byte(mode: int | None, size: int) -> None:
    payload = bytes(range(256)) * 4
    payload = payload[:size]
    assert publish_frames(3, "amq.topic", "a.b.c", payload, 131072, mode) == _pamqp_publish(
        3, "amq.topic", "a.b.c", payload, 131072, mode
    )


@pytest.mark.parametrize("mode", [None, 2])
@pytest.mark.parametrize("size", [0, 100])
def test_app_publishes_carry_their_own_properties_byte_for_byte_as_pamqp(mode: int | None, size: int) -> None:
    keys = ("k1", "k.2", "key-three")
    pub = AppPublish(1, "ex", keys, size, 131072, mode, tag="7f3a")
    first = pub.batch(4, 1_790_000_000)
    second = pub.batch(3, 1_790_000_001)
    expected = b"".join(_pamqp_app_publish(keys[i % 3], size, mode, "7f3a", i + 1, 1_790_000_000) for i in range(4))
    assert first == expected
    # Numbering goes on across batches; routing keys restart with each batch (one rotation per batch).
    assert second == b"".join(
        _pamqp_app_publish(keys[i % 3], size, mode, "7f3a", 5 + i, 1_790_000_001) for i in range(3)
    )


def test_app_publish_stamps_each_body_for_latency_runs() -> None:
    pub = AppPublish(1, "", ("q",), 16, tag="1")
    raw = pub.batch(2, 1_790_000_000, stamp_ns=123_456_789)
    result = FrameScanner(want_stamps=True).feed(_as_deliveries(raw))
    assert result.stamps == [123_456_789, 123_456_789]


def _as_deliveries(publishes: bytes) -> bytes:
    """The broker's view turned around: each publish method replaced by a deliver, header and body kept."""
    out, pos, tag = b"", 0, 0
    while pos < len(publishes):
        size, channel, payload = frame.unmarshal(publishes[pos:])
        raw = publishes[pos : pos + size]
        pos += size
        if isinstance(payload, commands.Basic.Publish):
            tag += 1
            deliver = commands.Basic.Deliver("c", tag, False, payload.exchange, payload.routing_key)
            raw = frame.marshal(deliver, channel)
        out += raw
    return out


def test_body_larger_than_frame_max_is_split_like_pamqp() -> None:
    payload = b"x" * 10_000
    ours = body_frames(1, payload, 4096)
    step = 4096 - 8
    theirs = b"".join(frame.marshal(body.ContentBody(payload[i : i + step]), 1) for i in range(0, 10_000, step))
    assert ours == theirs
    assert publish_frames(1, "", "q", payload, 4096) == _pamqp_publish(1, "", "q", payload, 4096, None)


def test_method_and_header_frames_match_pamqp_separately() -> None:
    assert publish_method(7, "", "queue-name") == frame.marshal(commands.Basic.Publish(routing_key="queue-name"), 7)
    props = commands.Basic.Properties(delivery_mode=2)
    assert content_header(7, 100, 2) == frame.marshal(header.ContentHeader(0, 100, props), 7)


@pytest.mark.parametrize("multiple", [True, False])
def test_basic_ack_matches_pamqp(multiple: bool) -> None:
    expected = frame.marshal(commands.Basic.Ack(delivery_tag=2**40 + 5, multiple=multiple), 2)
    assert basic_ack(2, 2**40 + 5, multiple) == expected


def test_stamped_publish_matches_pamqp_and_carries_the_stamp() -> None:
    stamp = 123_456_789_012_345
    expected_body = STAMP.pack(stamp) + bytes(92)
    encoded = StampedPublish(1, "", "lat-q", 100).encode(stamp)
    assert encoded == _pamqp_publish(1, "", "lat-q", expected_body, 131072, None)


def test_scanner_counts_coalesced_deliveries_and_extracts_tags() -> None:
    stream = b"".join(_deliver(tag, b"p" * 100) for tag in range(1, 51))
    found = FrameScanner().feed(stream)
    assert found.delivery_tags == list(range(1, 51))


def test_scanner_handles_every_split_point() -> None:
    stream = _deliver(1, b"a" * 10, ctag="x") + _deliver(2, b"", ctag="longer-tag") + _deliver(2**63 - 1, b"c" * 300)
    for cut in range(len(stream) + 1):
        scanner = FrameScanner()
        tags = scanner.feed(stream[:cut]).delivery_tags + scanner.feed(stream[cut:]).delivery_tags
        assert tags == [1, 2, 2**63 - 1], cut
        assert scanner.buffered == 0


def test_scanner_survives_byte_by_byte_input() -> None:
    stream = b"".join(_deliver(tag, STAMP.pack(tag * 1000) + bytes(92)) for tag in range(1, 6))
    scanner = FrameScanner(want_stamps=True)
    tags: list[int] = []
    stamps: list[int] = []
    for i in range(len(stream)):
        found = scanner.feed(stream[i : i + 1])
        tags += found.delivery_tags
        stamps += found.stamps
    assert tags == [1, 2, 3, 4, 5]
    assert stamps == [1000, 2000, 3000, 4000, 5000]


def test_stamp_is_read_only_from_the_first_body_frame_of_a_delivery() -> None:
    two_frames = _deliver(9, b"") + frame.marshal(body.ContentBody(STAMP.pack(42)), 1)
    two_frames += frame.marshal(body.ContentBody(STAMP.pack(99)), 1)
    assert FrameScanner(want_stamps=True).feed(two_frames).stamps == [42]


def test_scanner_reports_publisher_confirms() -> None:
    found = FrameScanner().feed(_confirm(5, True) + _confirm(6, False) + _confirm(7, False, nack=True))
    assert found.acks == [(5, True), (6, False)]
    assert found.nacks == [(7, False)]


def test_scanner_raises_on_channel_close_with_the_reply_text() -> None:
    close = frame.marshal(
        commands.Channel.Close(reply_code=404, reply_text="NOT_FOUND - no queue 'q'", class_id=60, method_id=20),
        1,
    )
    with pytest.raises(BrokerClosed, match="404 NOT_FOUND - no queue"):
        FrameScanner().feed(_deliver(1, b"x") + close)


def test_scanner_rejects_a_stream_out_of_sync() -> None:
    corrupt = bytearray(_deliver(1, b"x"))
    corrupt[-1] = 0
    with pytest.raises(BrokerClosed, match="frame end"):
        FrameScanner().feed(bytes(corrupt))


def test_heartbeats_are_skipped() -> None:
    heartbeat = b"\x08\x00\x00\x00\x00\x00\x00\xce"
    assert FrameScanner().feed(heartbeat + _deliver(3, b"x") + heartbeat).delivery_tags == [3]


def test_confirm_tracker_counts_multiple_single_and_out_of_order_confirms() -> None:
    tracker = ConfirmTracker()
    tracker.sent(10, now_ns=1_000)
    tracker.on_confirm(3, True, now_ns=2_000)
    tracker.on_confirm(6, False, now_ns=2_500)
    assert (tracker.confirmed, tracker.outstanding) == (4, 6)
    tracker.on_confirm(7, True, now_ns=3_000)  # covers 4, 5, 7 (6 already counted)
    tracker.on_confirm(7, True, now_ns=3_000)  # a repeat changes nothing
    tracker.on_confirm(10, False, now_ns=3_500, nack=True)
    assert (tracker.confirmed, tracker.nacked, tracker.outstanding) == (7, 1, 2)
    tracker.on_confirm(9, True, now_ns=4_000)
    assert (tracker.confirmed, tracker.outstanding) == (9, 0)


def test_confirm_tracker_latency_weights_each_batch_by_its_messages() -> None:
    tracker = ConfirmTracker()
    tracker.sent(4, now_ns=100)
    tracker.sent(4, now_ns=200)
    assert tracker.on_confirm(2, True, now_ns=1_100) == [(1_000, 2)]
    assert tracker.on_confirm(6, True, now_ns=1_200) == [(1_100, 2), (1_000, 2)]
    assert tracker.on_confirm(8, True, now_ns=1_500) == [(1_300, 2)]


def test_scanner_grows_for_a_frame_larger_than_its_buffer() -> None:
    stream = _deliver(1, b"b" * 500) + _deliver(2, b"c" * 10)
    scanner = FrameScanner(capacity=64)
    tags: list[int] = []
    for i in range(0, len(stream), 7):
        tags += scanner.feed(stream[i : i + 7]).delivery_tags
    assert tags == [1, 2]


def test_reads_into_free_space_are_scanned_on_commit() -> None:
    stream = b"".join(_deliver(tag, b"p" * 100) for tag in range(1, 11))
    scanner = FrameScanner(capacity=1024)
    tags: list[int] = []
    pos = 0
    while pos < len(stream):
        free = scanner.free()
        n = min(len(free), 333, len(stream) - pos)  # like recv_into filling part of the buffer
        free[:n] = stream[pos : pos + n]
        pos += n
        tags += scanner.commit(n).delivery_tags
    assert tags == list(range(1, 11))


def test_confirm_latency_percentiles_weigh_each_message() -> None:
    # 98 messages confirmed after 1 ms, 2 after 50 ms: p50 is 1 ms, p99 is 50 ms
    assert weighted_percentiles([(1_000_000, 98), (50_000_000, 2)], (50, 99)) == [1_000_000.0, 50_000_000.0]
