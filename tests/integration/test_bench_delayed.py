"""The delayed-delivery bench (bench/delayed.py) in miniature: it runs end to end and its figures add up.
The full run (100k messages, delays up to a minute) is `python -m bench.delayed`."""

from __future__ import annotations

from bench.delayed import run


def test_bench_delayed_small_run_delivers_everything_never_early() -> None:
    report = run(messages=500, max_delay_ms=500)
    assert report["delivered"] == 500
    assert report["early"] == 0
    assert report["publish_msg_s"] > 0 and report["rss_peak_mb"] >= report["rss_before_mb"]
