"""The running store's side of retention (the policy itself: retention.py): when to look, which unneeded
segments the next commit deletes, rolling the active segment by age, and counting and logging deletions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from store.commit import Batch
from store.retention import AGE, RetentionPolicy, select_for_deletion
from store.segment import FILE_HEADER_SIZE
from store.segment_log import SegmentLog

log = logging.getLogger(__name__)

# With a retention policy: how often (store clock, ms) the policy is applied even if no segment changed.
RETENTION_CHECK_MS = 1000


class RetentionKeeper:
    def __init__(self, policy: RetentionPolicy, segments: SegmentLog, now_ms: Callable[[], int]) -> None:
        self.policy = policy
        self._segments = segments
        self._now_ms = now_ms
        # Unneeded segments chosen for deletion (base -> AGE/SIZE) until a commit deletes them; whether
        # something changed that the policy should look at; when it last did.
        self._doomed: dict[int, str] = {}
        self.due = False
        self._checked_ms = 0
        self.stats = {"retention_deleted_age": 0, "retention_deleted_size": 0}

    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    def apply(self, batch: Batch, force: bool = False) -> bool:
        """Roll the active segment if it is too old, and choose the unneeded segments the policy no longer
        keeps, for `batch` to delete once committed. Cheap unless something changed or RETENTION_CHECK_MS
        has passed (it runs on every commit). Whether it chose any."""
        if not self.policy.enabled:
            return False
        now = self._now_ms()
        if not (force or self.due or now - self._checked_ms >= RETENTION_CHECK_MS):
            return False
        self.due = False
        self._checked_ms = now
        self._roll_by_age(now, batch)
        segments = self._segments
        infos = [segments.info(base) for base in segments.bases if base not in self._doomed]
        chosen = select_for_deletion(infos, self.policy, now)
        for base, reason in chosen:
            self._doomed[base] = reason
            batch.delete_segments.append(base)
        return bool(chosen)

    def _roll_by_age(self, now: int, batch: Batch) -> None:
        """A segment is deleted by age only once sealed, so a slow log must roll on time too. The clock starts
        at the later of the segment's creation and its first record: a record published long ago (a
        dead-lettered one keeps its timestamp) must not roll every new segment at once."""
        max_age = self.policy.max_age_ms
        segments = self._segments
        active = segments.active
        if max_age is None or active is None or segments.tail <= FILE_HEADER_SIZE:
            return
        index = segments.indexes[active]
        if index.max_timestamps and now - max(index.max_timestamps[0], segments.active_created_ms) > max_age:
            segments.roll(segments.next_offset, batch)

    def forget(self, base: int) -> None:
        """A segment chosen for deletion went another way (a failed batch dropped it)."""
        self._doomed.pop(base, None)

    def count_deletion(self, base: int) -> None:
        """Segment `base` is about to be deleted: count and log it if the policy chose it."""
        reason = self._doomed.pop(base, None)
        if reason is None:
            return
        self.stats[f"retention_deleted_{reason}"] += 1
        size = self._segments.sizes.get(base, 0)
        if reason == AGE:
            age_s = (self._now_ms() - self._segments.indexes[base].max_timestamp) / 1000
            log.info("retention: deleted segment %d (%d bytes, newest record %.0f s old)", base, size, age_s)
        else:
            log.info("retention: deleted segment %d (%d bytes) to keep the log under max_bytes", base, size)

    def log_recovered(self, stats: dict[str, Any]) -> None:
        if not self.policy.enabled:
            return
        for reason in ("age", "size"):
            self.stats[f"retention_deleted_{reason}"] += stats[f"retention_deleted_{reason}"]
        log.info(
            "retention at open: %d unneeded segments kept, %d deleted by age, %d by size",
            stats["segments_retained"],
            stats["retention_deleted_age"],
            stats["retention_deleted_size"],
        )
