"""Recovery's last step: delete the segments no queue needs any more (with their indexes), except those the
retention policy keeps for log readers."""

from __future__ import annotations

from bisect import bisect_left

from store.file_io import FileIO
from store.queue_state import OffsetRuns
from store.recovered_state import RecoveredState
from store.retention import RetentionPolicy, SegmentInfo, load_retained, select_for_deletion
from store.segment import Layout


class SegmentPruning:
    def __init__(
        self, layout: Layout, io: FileIO, index_interval: int, retention: RetentionPolicy, now_ms: int
    ) -> None:
        self.layout = layout
        self.io = io
        self.interval = index_interval
        self.retention = retention
        self.now_ms = now_ms

    def delete_unneeded(self, bases: list[int], state: RecoveredState) -> None:
        keep = _needed(bases, state)
        unneeded = [base for base in bases if base not in keep]
        if self.retention.enabled:
            unneeded = self._outside_retention(bases, keep, unneeded, state)
        for base in unneeded:
            for path in (self.layout.segment(base), self.layout.offset_index(base), self.layout.time_index(base)):
                self.io.unlink(path)
            state.stats["segments_deleted"] += 1
            state.indexes.pop(base, None)
            state.sizes.pop(base, None)

    def _outside_retention(
        self, bases: list[int], keep: set[int], unneeded: list[int], state: RecoveredState
    ) -> list[int]:
        """The unneeded segments the retention policy no longer covers. The others stay, with their indexes
        (read now if the scan skipped them), for log readers."""
        for base in bases:
            if base not in state.indexes:
                index, size, rebuilt = load_retained(self.layout, base, self.interval, self.io)
                state.indexes[base], state.sizes[base] = index, size
                state.stats["indexes_rebuilt"] += rebuilt
        infos = [SegmentInfo(b, state.sizes[b], state.indexes[b].max_timestamp, b in keep) for b in bases]
        doomed = select_for_deletion(infos, self.retention, self.now_ms)
        for _, reason in doomed:
            state.stats[f"retention_deleted_{reason}"] += 1
        state.stats["segments_retained"] = len(unneeded) - len(doomed)
        return [base for base, _ in doomed]


def _needed(bases: list[int], state: RecoveredState) -> set[int]:
    """The segments holding an offset some queue holds, and the last one (appended to)."""
    keep = {bases[-1]} if bases else set()
    for queue in state.queues.values():
        live = queue.live
        if isinstance(live, OffsetRuns):
            for start, stop in live.runs():
                # every segment from the one holding the run's first offset to the one holding its last
                keep.update(bases[bisect_left(bases, start + 1) - 1 : bisect_left(bases, stop)])
            continue
        for offset in live:
            keep.add(bases[bisect_left(bases, offset + 1) - 1])
    return keep
