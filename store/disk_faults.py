"""What the store knows of disk faults: counts of failed writes and fsyncs, whether the disk ran out of space
and how much room the failed work needs, and the rate-limited log line (the rules: FORMAT.md, Disk faults)."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from collections.abc import Callable

from store.commit import WriteFailed
from store.disk_space import DiskSpace
from store.frame import HEADER_SIZE

log = logging.getLogger(__name__)

FAILURE_LOG_S = 10.0  # a run of failures logs its first, then at most one summary per this many seconds


class DiskFaults:
    def __init__(self, root: os.PathLike[str], space: DiskSpace) -> None:
        self._root = root
        self.space = space
        self.stats = {"write_failures": 0, "fsync_failures": 0, "records_failed": 0}
        self.out_of_space = False
        self.on_disk_full: Callable[[bool], None] | None = None
        self._space_needed = 0
        self._logged_at = 0.0
        self._unlogged = 0

    def batch_failed(self, exc: Exception, records: int, size: int) -> None:
        """A batch (and the one filling behind it: `records` records, `size` bytes of frames) failed."""
        self._count(exc, records)
        if isinstance(exc, WriteFailed) and exc.out_of_space:
            self._space_needed = max(self._space_needed, size)
            self.space.release()  # what frees space (acks, deletions, checkpoints) must find room
            if not self.out_of_space:
                self.out_of_space = True
                if self.on_disk_full is not None:
                    self.on_disk_full(True)

    def cleanup_failed(self, exc: OSError | sqlite3.Error) -> None:
        """A checkpoint or cleanup after a durable batch failed (logged in one line). Out of space: the reserve
        is released for the next attempt, and the store is out of space as after a failed batch."""
        log.error("store: checkpoint or cleanup after a durable batch failed: %s (tried again later)", exc)
        if _out_of_space(exc):
            self.space.release()
            if not self.out_of_space:
                self.out_of_space = True
                if self.on_disk_full is not None:
                    self.on_disk_full(True)

    def check_space(self) -> bool:
        """While out of space: whether there is room again for what failed above the floor and the
        reserve (then the reserve is taken again and the state cleared). Returns the current out_of_space."""
        if not self.out_of_space:
            return False
        try:
            free = _free_bytes(self._root)
        except OSError:
            return True
        space = self.space
        if free > self._space_needed + 2 * HEADER_SIZE + space.min_free + space.reserve:
            space.take()
            log.warning("store: disk space is available again (%d bytes free)", free)
            self.out_of_space, self._space_needed = False, 0
            if self.on_disk_full is not None:
                self.on_disk_full(False)
        return self.out_of_space

    def _count(self, exc: Exception, failed: int) -> None:
        stage = exc.stage if isinstance(exc, WriteFailed) else "catalogue"
        self.stats["fsync_failures" if stage == "fsync" else "write_failures"] += 1
        self.stats["records_failed"] += failed
        now = time.monotonic()
        if now - self._logged_at < FAILURE_LOG_S:
            self._unlogged += 1
            return
        log.error(
            "STORE %s FAILED: %s. %d records were not stored and their publishers get nacks; the next record "
            "starts a new segment (%d more failed batches since the last report; totals %s)",
            stage.upper(),
            exc,
            failed,
            self._unlogged,
            self.stats,
        )
        self._logged_at, self._unlogged = now, 0


def _out_of_space(exc: OSError | sqlite3.Error) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)  # SQLITE_FULL has no errno


def _free_bytes(path: os.PathLike[str]) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
