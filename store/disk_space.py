"""The free-space floor and the reserve file (FORMAT.md, Free space and the reserve).

New message data is written only while the file system keeps `min_free` bytes free after it, and, while the
reserve file is not held, `reserve` bytes more. The reserve file (`reserve` bytes, allocated with
posix_fallocate) stands for room that only what frees space may use: ack-log entries, segment deletions,
checkpoints, the catalogue and the clean-stop marker. It is released (unlinked) when the store runs out of
space, at open (recovery writes before it knows anything) and at close (the last checkpoint), and taken
again once there is room for it above the floor.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

RESERVE_NAME = "reserve"
NEAR_FACTOR = 4  # within this many times the floor, every commit with new data looks at the free space
RECHECK_S = 1.0  # further away, at most once per this many seconds


class DiskSpace:
    def __init__(self, root: Path, min_free: int, reserve: int) -> None:
        self.path = root / RESERVE_NAME
        self.min_free = min_free
        self.reserve = reserve
        self._free = -1  # the last figure seen; -1: not yet
        self._seen_at = 0.0
        self.held = False  # known from the first release() on (the store's open)

    def floor(self) -> int:
        """Free bytes that new message data must leave: the limit, and the reserve while it is released."""
        return self.min_free + (0 if self.held else self.reserve)

    def free(self) -> int:
        st = os.statvfs(self.path.parent)
        self._free, self._seen_at = st.f_bavail * st.f_frsize, time.monotonic()
        return self._free

    def room_for(self, size: int) -> bool:
        """Whether `size` bytes of new message data keep the floor. statvfs is cheap but not free: it runs
        at every call once the last figure was near the floor, otherwise once per RECHECK_S."""
        floor = self.floor()
        if floor == 0:
            return True
        near = self._free < NEAR_FACTOR * (floor + size)
        if near or time.monotonic() - self._seen_at > RECHECK_S:
            try:
                self.free()
            except OSError:
                return True  # a failing statvfs says nothing; the write itself will tell
        return self._free - size >= floor

    def take(self) -> bool:
        """Allocate the reserve file if it is not held and the floor stays kept after it; whether it is held."""
        if self.reserve <= 0 or self.held:
            return True
        try:
            if self.free() < self.min_free + 2 * self.reserve:
                return False
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.posix_fallocate(fd, 0, self.reserve)  # not fsync'd: a reserve lost to a crash is taken again
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("store: could not allocate the %d-byte disk reserve: %s", self.reserve, exc)
            self.path.unlink(missing_ok=True)
            return False
        self.held = True
        return True

    def release(self) -> None:
        """Give the reserve's room to what frees space (idempotent)."""
        if self.reserve <= 0:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        else:
            if self.held:  # at open and close it goes without a word
                log.warning(
                    "store: disk reserve of %d bytes released for acks, deletions and checkpoints", self.reserve
                )
        self.held = False
