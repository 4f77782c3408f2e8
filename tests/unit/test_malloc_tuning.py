"""The malloc thresholds set at start (server/malloc_tuning.py) make the body frames of one large publish
reuse the memory of the last one's: counted in page faults (a fresh page costs one), not timed. In a
subprocess, as malloc's settings are the whole process's."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from amqpd.config import Settings

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc thresholds are glibc's")

ROOT = Path(__file__).resolve().parents[2]
BODY = 16 * 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")

# Each message: its body frames sliced out of what was read (as FrameReader slices them, at the default
# frame_max), joined into the body, which stays queued; the frames are freed. Prints whether the thresholds
# were set, then the page faults of the messages after the first.
PUBLISHES = """
import resource, sys
from amqpd.server.malloc_tuning import tune_malloc
print(tune_malloc(int(sys.argv[1]), int(sys.argv[2])))
read = b"\\x01" * (1 << 24)
frame = 131072 - 8
queued = []
def publish():
    frames = [read[i : i + frame] for i in range(0, len(read), frame)]
    queued.append(b"".join(frames))
publish()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    publish()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_per_publish(mmap_threshold: int, trim_threshold: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        env.pop(name, None)
    args = [sys.executable, "-c", PUBLISHES, str(mmap_threshold), str(trim_threshold)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out[0] == "True"  # set
    return int(out[1]) / 3


def test_the_frames_of_a_large_publish_reuse_the_memory_of_the_last_ones() -> None:
    s = Settings()
    # The body itself is fresh memory (it stays queued): its pages are faulted in once; the frames' are not.
    assert faults_per_publish(s.malloc_mmap_threshold, s.malloc_trim_threshold) < 1.25 * BODY / PAGE


def test_tune_malloc_leaves_malloc_alone_when_told_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from amqpd.server.malloc_tuning import tune_malloc

    assert not tune_malloc(0, 0)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert not tune_malloc(Settings().malloc_mmap_threshold, Settings().malloc_trim_threshold)
