"""Recovery's reconciliation of the queues' held offsets with what is on disk: registered segments gone from
disk, records lost to damage, and messages whose TTL has passed are forgotten."""

from __future__ import annotations

from collections.abc import Iterable

from store.catalog import CatalogSnapshot
from store.queue_state import OffsetRuns
from store.recovered_state import RecoveredState, newest_from

Ranges = list[tuple[int, int]]


def missing_ranges(snap: CatalogSnapshot, on_disk: set[int]) -> Ranges:
    """[base, end) of registered segments gone from disk."""
    return [(base, end) for base, (end, _, _) in snap.segments.items() if base not in on_disk]


def note_missing_segments(snap: CatalogSnapshot, on_disk: set[int], state: RecoveredState) -> None:
    """Registered segments that held checkpointed messages but are gone from disk: the usual cause of
    `lost_records`, worth naming in the stats."""
    for base, end_offset in missing_ranges(snap, on_disk):
        first = state.wanted.first_at_or_after(base)
        if first is not None and first < end_offset:
            state.stats["segments_missing"] += 1


def drop_unavailable(state: RecoveredState, gone: Ranges, cp_next: int, now_ms: int, load_checkpointed: bool) -> None:
    """Forget offsets whose record was lost to damage, and messages whose TTL has passed, except in a
    log: a stream keeps every message until retention drops it (RabbitMQ's streams ignore message TTL),
    and dropping one would renumber the offsets after it.

    A lazy open reads no record from before the checkpoint: one of those counts as lost here only when
    its segment is gone (damage inside a segment shows when the record is read)."""
    lost: set[int] = set()
    expired: set[int] = set()
    records = state.records
    for queue in state.queues.values():
        live = queue.live
        if load_checkpointed:
            candidates: Iterable[int] = live
        elif isinstance(live, OffsetRuns):
            candidates = list(live.between(cp_next, state.max_offset + 1))
            for lo, hi in gone:
                lost.update(live.between(lo, min(hi, cp_next)))
        else:
            assert isinstance(live, dict)  # recovery's own states
            candidates = newest_from(live, cp_next)  # the tail; the rest only if a segment is gone
            if gone:
                lost.update(o for o in live if o < cp_next and _in_ranges(o, gone))
        ages = not isinstance(live, OffsetRuns)
        for offset in candidates:
            record = records.get(offset)
            if record is None:
                lost.add(offset)
            elif ages and record.expires_at_ms is not None and record.expires_at_ms <= now_ms:
                expired.add(offset)
    _forget(state, lost, expired)
    state.stats["lost_records"] = len(lost)
    state.stats["expired_dropped"] = len(expired)


def _forget(state: RecoveredState, lost: set[int], expired: set[int]) -> None:
    """Drop the offsets from every queue, except an expired one from the logs that hold it."""
    logs = state.logs()
    for offset in lost | expired:
        kept = offset not in lost and any(offset in log for log in logs)
        if not kept:
            state.records.pop(offset, None)
        for queue in state.queues.values():
            if not (kept and isinstance(queue.live, OffsetRuns)):
                queue.live.pop(offset, None)
                queue.delivered.discard(offset)


def _in_ranges(offset: int, ranges: Ranges) -> bool:
    return any(lo <= offset < hi for lo, hi in ranges)
