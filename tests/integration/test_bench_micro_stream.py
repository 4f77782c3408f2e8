"""The in-process stream replay bench (bench/micro_stream.py) in miniature: every consumer gets every message
through the store's read thread and the replay's slices (it once stopped with "the replay stalled" when reads
moved off the loop, and nothing ran it). The full run is `python -m bench.micro_stream`."""

from __future__ import annotations

import anyio

from bench.micro_stream import measure


def test_a_small_replay_to_two_consumers_completes_and_costs_some_cpu() -> None:
    per_message_us = anyio.run(measure, 2_000, 2, False)
    assert per_message_us > 0
