"""The replay CPU bench (bench/replay_cpu.py) in miniature: a real amqpd, a stream of 16 KiB messages replayed
by a consumer in a process of its own, both sides of an A/B (the broker restarted on the same data between
them), each round's figures per replayed MiB. The full run is `python -m bench.replay_cpu`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import replay_cpu

TREE = Path(__file__).resolve().parents[2]


def test_both_trees_replay_the_whole_stream_and_report_cpu_per_mib(capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_cpu.main(["--mb", "8", "--rounds", "1", "--headers", "--versus", os.fspath(TREE)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["stream_mib"], report["messages"], report["headers"]) == (8, 512, True)
    for side in ("this", "versus"):
        (round_,) = report[side]["rounds"]
        assert set(round_) == {
            "broker_cpu_ms_per_mib",
            "broker_loop_cpu_ms_per_mib",
            "consumer_cpu_ms_per_mib",
            "replay_mib_per_s",
        }
        assert round_["consumer_cpu_ms_per_mib"] > 0  # the consumer parsed 512 deliveries
        assert round_["broker_loop_cpu_ms_per_mib"] >= 0 and round_["broker_cpu_ms_per_mib"] >= 0
        assert round_["replay_mib_per_s"] > 0
