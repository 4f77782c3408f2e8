"""What recovery rebuilds, shared by its phases (segment scan, ack-log replay, lost records, segment pruning):
each queue's held offsets, the records read, each kept segment's index and size, the largest offset and
message id met, and the counters reported at the end."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from store.catalog import CatalogSnapshot
from store.queue_state import OffsetRuns, QueueState, decode_runs
from store.records import MessageRecord
from store.segment_index import SegmentIndex

HoldsLog = Callable[[Mapping[str, Any]], bool]  # from a queue's declared arguments: is it a log?


def holds_no_log(arguments: Mapping[str, Any]) -> bool:
    return False


def new_stats() -> dict[str, Any]:
    return {
        "records_scanned": 0,
        "tail_records": 0,
        "torn_bytes_truncated": 0,
        "corrupt_records_skipped": 0,
        "corrupt_bytes_skipped": 0,
        "expired_dropped": 0,
        "lost_records": 0,
        "indexes_rebuilt": 0,
        "damaged_headers": 0,
        "segments_deleted": 0,
        "segments_retained": 0,  # nobody needs them; kept for log readers by the retention policy
        "retention_deleted_age": 0,  # counted in segments_deleted too
        "retention_deleted_size": 0,
        "segments_missing": 0,
        "ack_entries_replayed": 0,
        "torn_batches": 0,  # a crash cut them between their ack-log frame and their last record: undone
        "torn_batch_records_dropped": 0,
        "seconds": 0.0,
    }


@dataclass
class RecoveredState:
    queues: dict[int, QueueState]
    wanted: Wanted  # what the queues held at the checkpoint, fixed before any phase changes `queues`
    max_offset: int
    last_message_id: int
    stats: dict[str, Any] = field(default_factory=new_stats)
    records: dict[int, MessageRecord] = field(default_factory=dict)  # every offset some queue still holds
    indexes: dict[int, SegmentIndex] = field(default_factory=dict)  # base offset -> index, segments kept
    sizes: dict[int, int] = field(default_factory=dict)  # base offset -> file size, segments kept
    tail_runs: list[list[int]] = field(default_factory=list)  # [start, stop) of the tail's offsets, in order

    @classmethod
    def from_snapshot(
        cls, snap: CatalogSnapshot, holds_log: HoldsLog, next_offset: int, message_id: int
    ) -> RecoveredState:
        """Each catalogued queue's state as of the checkpoint."""
        queues: dict[int, QueueState] = {}
        for qid, _vhost, _name, _auto_delete, arguments in snap.queues:
            state = queues[qid] = QueueState()
            if holds_log(arguments):
                state.live = OffsetRuns()  # a log's offsets stay runs all through recovery, never one per message
        for qid, (live, delivered) in snap.queue_state.items():
            if qid in queues:
                state = queues[qid]
                runs = isinstance(state.live, OffsetRuns)
                state.live = OffsetRuns.from_encoded(live) if runs else dict.fromkeys(decode_runs(live))
                state.delivered = set(decode_runs(delivered))
        return cls(queues, Wanted(list(queues.values())), next_offset - 1, message_id)

    def tail_scanned(self, offset: int) -> bool:
        """Whether the tail scan met this offset's record."""
        runs = self.tail_runs
        i = bisect_left(runs, [offset + 1]) - 1
        return i >= 0 and runs[i][0] <= offset < runs[i][1]

    def logs(self) -> list[OffsetRuns]:
        return [state.live for state in self.queues.values() if isinstance(state.live, OffsetRuns)]


class Wanted:
    """The offsets some queue held at the checkpoint, to know which segments to read: a sorted list for
    queues holding offsets one by one, and a copy of the runs of the queues that hold a log."""

    def __init__(self, states: list[QueueState]) -> None:
        self.runs = [OffsetRuns.from_encoded(s.live.encoded()) for s in states if isinstance(s.live, OffsetRuns)]
        self.sorted = sorted({o for s in states if not isinstance(s.live, OffsetRuns) for o in s.live})
        self._set = set(self.sorted)

    def first_at_or_after(self, offset: int) -> int | None:
        found = [first for runs in self.runs if (first := runs.first_at_or_after(offset)) is not None]
        i = bisect_left(self.sorted, offset)
        if i < len(self.sorted):
            found.append(self.sorted[i])
        return min(found, default=None)

    def __contains__(self, offset: int) -> bool:
        return offset in self._set or any(offset in runs for runs in self.runs)


def newest_from(live: dict[int, None], first: int) -> list[int]:
    """The held offsets >= first: they are the newest, so they sit at the end of the insertion-ordered dict."""
    found = []
    for offset in reversed(live):
        if offset < first:
            break
        found.append(offset)
    return found
