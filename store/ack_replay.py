"""Recovery's replay of the ack log written since the checkpoint: acks and deliveries applied to the queues'
held offsets, and batches a crash cut short undone."""

from __future__ import annotations

from store import ack_log
from store.frame import ScanReport
from store.queue_state import OffsetRuns
from store.recovered_state import RecoveredState, newest_from
from store.segment import Layout


def replay_ack_log(layout: Layout, checkpoint_ack_number: int, state: RecoveredState) -> list[int]:
    """Apply ack-log entries written since the checkpoint; return the numbers of files it covers."""
    stale = []
    for number in layout.ack_numbers():
        if number < checkpoint_ack_number:
            stale.append(number)
            continue
        data = layout.ack_file(number).read_bytes()
        report = ScanReport()
        for first, end, entries in ack_log.batches(data, number, report):
            if end > first and not state.tail_scanned(end - 1):
                _undo_torn_batch(state, first, end)
                continue
            for kind, qid, offset in entries:
                _apply_ack_entry(state, kind, qid, offset)
        state.stats["corrupt_records_skipped"] += report.corrupt_frames
        stale.append(number)  # after recovery's own checkpoint, every existing file is covered
    return stale


def _undo_torn_batch(state: RecoveredState, first: int, end: int) -> None:
    """A batch whose last record never reached the log: its ack-log entries are not applied, and if it was
    the log's last batch (a crash cut it: nothing after it was written) the records of it that did arrive
    are dropped too, so a moved message stays where it was. None of them was confirmed: that waits for
    the whole batch. A batch in the middle of the log lost its end to damage or to a failed write (the
    writer cut its records off): its surviving records stay, they may have been confirmed."""
    state.stats["torn_batches"] += 1
    last_scanned = state.tail_runs[-1][1] - 1 if state.tail_runs else -1
    state.max_offset = max(state.max_offset, end - 1)  # never hand its offsets out again
    if last_scanned >= end:
        return
    dropped: set[int] = set()
    for queue in state.queues.values():
        live = queue.live
        if isinstance(live, OffsetRuns):
            held = list(live.between(first, end))
        else:
            assert isinstance(live, dict)  # recovery's own states
            held = [offset for offset in newest_from(live, first) if offset < end]
        for offset in held:
            live.pop(offset, None)
            queue.delivered.discard(offset)
        dropped.update(held)
    for offset in dropped:
        state.records.pop(offset, None)
    state.stats["torn_batch_records_dropped"] += len(dropped)


def _apply_ack_entry(state: RecoveredState, kind: int, qid: int, offset: int) -> None:
    state.stats["ack_entries_replayed"] += 1
    state.max_offset = max(state.max_offset, offset)  # never hand out an offset an entry mentions
    queue = state.queues.get(qid)
    if queue is None:
        return
    if kind == ack_log.ACKED:
        queue.live.pop(offset, None)
        queue.delivered.discard(offset)
    elif kind == ack_log.DELIVERED and offset in queue.live:
        queue.delivered.add(offset)
