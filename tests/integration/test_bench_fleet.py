"""The connection-fleet bench (bench/fleet.py) in miniature, and its accounting: the figures are those of the
messages published in the measured window, every one of them waited for. The full run is
`python -m bench.scale --no-phases --fleet 1000 10000`."""

from __future__ import annotations

import math
import struct

from amqpd.testing import BrokerProcess
from bench.fleet import Window, run_fleet


def _delivery_body(stamp: float) -> bytes:
    """A body frame as the broker sends it to a fleet consumer: the publish time, 8 bytes."""
    return struct.pack(">BHI", 3, 1, 8) + struct.pack(">d", stamp) + b"\xce"


def test_only_messages_published_in_the_window_are_counted_and_a_split_frame_waits() -> None:
    window = Window(10.0, 20.0)
    before, inside, after = _delivery_body(9.5), _delivery_body(12.0), _delivery_body(20.0)
    data = before + inside + after + inside[:5]
    assert window.take(data, now=12.25) == len(data) - 5  # the split frame's start
    assert window.latencies == [0.25]


def test_a_small_fleet_gets_every_message_of_its_window_delivered() -> None:
    with BrokerProcess() as amqpd:
        assert amqpd.proc is not None
        result = run_fleet(amqpd.url, amqpd.proc.pid, connections=6, seconds=1.0, warmup=0.5, workers=2, rate=20)
    assert result.sent > 0
    assert result.delivered == result.sent
    assert 0 < result.p50_ms <= result.p99_ms < math.inf
    assert result.client_cpu_s > 0
