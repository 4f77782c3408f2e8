"""A checkpoint's snapshot of the running store (FORMAT.md, Commit, durability and the checkpoint): taken on
the loop when a batch is sealed, as cheap copies; its queues' offsets are encoded as runs in a worker thread."""

from __future__ import annotations

from typing import Any

from store.catalog import Checkpoint, CheckpointData
from store.queue_state import OffsetRuns, QueueState, encode_runs
from store.segment_log import SegmentLog


def checkpoint_data(
    segments: SegmentLog,
    queues: dict[int, QueueState],
    ack_number: int,
    now_ms: int,
    held: dict[int, list[int]] | None = None,
) -> CheckpointData:
    """`held`: offsets whose acks are held back after a failed batch (held_acks.py), listed as still held."""
    checkpoint = Checkpoint(
        next_offset=segments.next_offset,
        segment_base=segments.active if segments.active is not None else segments.next_offset,
        segment_position=segments.tail,
        ack_number=ack_number,
        last_message_id=segments.last_message_id,
        created_ms=now_ms,
    )
    # Only copies on the loop (C-speed); the run encoding happens in a worker thread (encode_queue_rows).
    queue_rows = [(qid, _copy_live(state.live), list(state.delivered)) for qid, state in queues.items()]
    if segments.volatile or held:  # volatile: not on disk, recovery would count them lost
        volatile = segments.volatile
        held = held or {}
        queue_rows = [
            (
                qid,
                [o for o in _with(state.live, held.get(qid)) if o not in volatile],
                [o for o in state.delivered if o not in volatile],
            )
            for qid, state in queues.items()
        ]
    return CheckpointData(checkpoint, queue_rows, segments.rows())


def _with(live: Any, held: list[int] | None) -> Any:
    return sorted({*live, *held}) if held else live


def encode_queue_rows(rows: list[tuple[int, Any, Any]]) -> list[tuple[int, Any, Any]]:
    """(queue_id, live offsets in order, delivered offsets) -> (queue_id, live runs, delivered runs)."""
    return [
        (qid, live if isinstance(live, bytes) else encode_runs(live), encode_runs(sorted(delivered)))
        for qid, live, delivered in rows
    ]


def _copy_live(live: Any) -> list[int] | bytes:
    """A queue's held offsets for a checkpoint: a list, or a log's runs already encoded (not one int each)."""
    return live.encoded() if isinstance(live, OffsetRuns) else list(live)
