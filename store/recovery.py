"""Rebuilding the store's state from disk after a restart or a crash.

Order matters: (1) per-queue state from the last checkpoint; (2) segments: records below the checkpoint's
next_offset are read only if a queue still needs them, records at or after it (the tail) are scanned and
enqueued to the queues they name; a torn tail of the last segment is truncated; (3) the ack log written
since the checkpoint is replayed; (4) records that were lost or have expired are dropped. Runs in a worker
thread: it is all blocking file I/O.

The phases, one module each, share the state they rebuild (recovered_state.py): the segment scan
(segment_scan.py, which also checks or rebuilds each segment's index), the ack-log replay (ack_replay.py),
the reconciliation with what is on disk (lost_records.py), and the deletion of unneeded segments
(segment_pruning.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from store.ack_replay import replay_ack_log
from store.catalog import CatalogSnapshot, Checkpoint
from store.file_io import FileIO
from store.lost_records import drop_unavailable, missing_ranges, note_missing_segments
from store.queue_state import QueueState
from store.records import MessageRecord
from store.recovered_state import HoldsLog, RecoveredState, holds_no_log
from store.retention import RetentionPolicy
from store.segment import Layout
from store.segment_index import SegmentIndex
from store.segment_pruning import SegmentPruning
from store.segment_scan import SegmentScan

__all__ = ["HoldsLog", "MissingCatalogue", "RecoveryResult", "recover_files"]


class MissingCatalogue(Exception):
    """Segment files without the catalogue that describes them: refuse to open rather than lose them."""


@dataclass
class RecoveryResult:
    queues: dict[int, QueueState]
    records: dict[int, MessageRecord]  # every offset some queue still holds (lazy: only the tail's)
    indexes: dict[int, SegmentIndex]  # base offset -> index, for the segments kept
    sizes: dict[int, int]  # base offset -> file size, for the segments kept
    next_offset: int
    last_message_id: int
    stats: dict[str, Any]
    stale_ack_files: list[int] = field(default_factory=list)


def recover_files(
    layout: Layout,
    snap: CatalogSnapshot,
    index_interval: int,
    now_ms: int,
    retention: RetentionPolicy | None = None,
    load_checkpointed: bool = True,
    holds_log: HoldsLog = holds_no_log,
    io: FileIO | None = None,
) -> RecoveryResult:
    """load_checkpointed=False (a lazy open): records held since before the last checkpoint are not read;
        the caller reads them when it needs them (`MessageStore.read_many`). holds_log: which queues are logs
        (their offsets are kept as runs, never one by one: MessageStore.hold_as_runs). io: the store's I/O seam, for
    every change recovery makes to a file (a torn tail cut, a header rewritten, indexes replaced, files deleted)."""
    started = time.perf_counter()
    io = io if io is not None else FileIO()
    cp = snap.checkpoint or Checkpoint()
    bases = layout.segment_bases()
    if bases and snap.checkpoint is None:
        # Every store writes a checkpoint before its first segment exists, so the catalogue here is not
        # the one these segments belong to. Guessing would mean deleting them all as unneeded.
        raise MissingCatalogue(f"{layout.segments} holds segments but {layout.catalog} has no checkpoint")
    state = RecoveredState.from_snapshot(snap, holds_log, cp.next_offset, cp.last_message_id)
    on_disk = set(bases)
    note_missing_segments(snap, on_disk, state)
    SegmentScan(layout, io, index_interval, cp.next_offset, load_checkpointed, state).all(bases)
    stale = replay_ack_log(layout, cp.ack_number, state)
    drop_unavailable(state, missing_ranges(snap, on_disk), cp.next_offset, now_ms, load_checkpointed)
    next_offset = max(state.max_offset + 1, bases[-1] if bases else 0)
    pruning = SegmentPruning(layout, io, index_interval, retention or RetentionPolicy(), now_ms)
    pruning.delete_unneeded(bases, state)
    state.stats["seconds"] = round(time.perf_counter() - started, 4)
    return RecoveryResult(
        state.queues,
        state.records,
        state.indexes,
        state.sizes,
        next_offset,
        state.last_message_id,
        state.stats,
        stale,
    )
