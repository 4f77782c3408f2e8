"""Per-queue message state kept by the store: which offsets a queue still needs, and which of those were
delivered (for exact redelivered flags after a crash). Saved in checkpoints as runs of offsets."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator


class QueueState:
    __slots__ = ("live", "delivered")

    def __init__(self) -> None:
        # Insertion-ordered dict used as an ordered set: offsets arrive in increasing order, so iteration
        # yields the queue's original order without sorting, and removal is O(1).
        self.live: dict[int, None] = {}
        self.delivered: set[int] = set()


def encode_runs(offsets: Iterable[int]) -> bytes:
    """Increasing offsets -> little-endian u64 pairs [first, last + 1) of consecutive runs."""
    runs = array("Q")
    start = prev = -2
    for offset in offsets:
        if offset != prev + 1:
            if start >= 0:
                runs.extend((start, prev + 1))
            start = offset
        prev = offset
    if start >= 0:
        runs.extend((start, prev + 1))
    if sys.byteorder == "big":
        runs.byteswap()  # the format is little-endian everywhere
    return runs.tobytes()


def decode_runs(data: bytes) -> Iterator[int]:
    runs = array("Q")
    runs.frombytes(data)
    if sys.byteorder == "big":
        runs.byteswap()
    for i in range(0, len(runs), 2):
        yield from range(runs[i], runs[i + 1])
