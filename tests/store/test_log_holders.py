"""A queue that is a log (a stream) holds its offsets as runs: the same answers as the per-message dict,
through checkpoints and restarts, with memory that does not grow with the log's length."""

from __future__ import annotations

import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import MessageRecord, MessageStore, QueueEntry
from store.queue_state import OffsetRuns, encode_runs

ops = st.lists(st.tuples(st.sampled_from(["add", "next", "range", "del", "pop"]), st.integers(0, 60)), max_size=120)


@given(ops)
def test_runs_answer_like_an_ordered_dict_of_offsets(steps: list[tuple[str, int]]) -> None:
    runs, model = OffsetRuns(), {}
    for op, offset in steps:
        if op == "next":  # what a log does: the next offset
            offset = max(model, default=-1) + 1
        if op == "range":  # what a group of appended records does: the next offsets, maybe after a gap
            start = max(model, default=-1) + 1 + offset % 3
            runs.append_range(start, start + offset % 7)
            model.update(dict.fromkeys(range(start, start + offset % 7)))
        elif op in ("add", "next"):
            runs[offset] = None
            model[offset] = None
        elif op == "del":
            if offset in model:
                del runs[offset], model[offset]
            else:
                with pytest.raises(KeyError):
                    del runs[offset]
        else:
            assert runs.pop(offset, "absent") == model.pop(offset, "absent")
        assert list(runs) == sorted(model) and len(runs) == len(model)
        assert all((o in runs) == (o in model) for o in range(-1, 62))
        assert runs.encoded() == encode_runs(sorted(model))


def test_a_long_log_costs_the_same_memory_as_a_short_one() -> None:
    runs = OffsetRuns()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for offset in range(100_000):
            runs[offset] = None
        for offset in range(50_000):  # retention releases the oldest
            del runs[offset]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(runs) == 50_000
    assert grown < 1024  # a dict of the same offsets: megabytes


def _is_log(arguments: Mapping[str, Any]) -> bool:
    return arguments.get("log") is True


def _held(entry: QueueEntry) -> list[int]:
    older = entry.unloaded if entry.unloaded_runs is None else list(entry.unloaded_runs)
    return sorted([m.offset for m in entry.messages] + older)


@pytest.mark.anyio
@pytest.mark.parametrize("crash", [False, True])
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("told", [False, True], ids=["hold_as_runs-only", "holds_log-at-open"])
async def test_a_log_held_as_runs_comes_back_after_a_checkpoint_and_a_restart(
    tmp_path: Path, crash: bool, lazy: bool, told: bool
) -> None:
    store = MessageStore(tmp_path, fsync="none", checkpoint_bytes=4096)
    await store.open()
    log, other = store.put_queue("/", "log", False, {"log": True}), store.put_queue("/", "q", False, {})
    store.hold_as_runs(log)
    offsets = [store.append(MessageRecord("", "k", b"", b"m%d" % i, 1), [log, other]) for i in range(3000)]
    for offset in offsets[:1000]:  # retention drops the oldest
        store.ack(log, offset)
    await store.flush()
    for offset in offsets[1000:1500]:  # after the checkpoint: in the ack log
        store.ack(log, offset)
    await store.flush()
    await (store.abort() if crash else store.close())

    store = MessageStore(tmp_path, fsync="none", holds_log=_is_log if told else None)
    recovered = {q.name: q for q in (await store.open(load_records=not lazy)).queues}
    assert _held(recovered["log"]) == offsets[1500:]
    assert _held(recovered["q"]) == offsets
    store.hold_as_runs(log)  # as the broker does once it has the stream back
    for offset in offsets[1500:1600]:
        store.ack(log, offset)
    await store.close()
    store = MessageStore(tmp_path, fsync="none", holds_log=_is_log if told else None)
    recovered = {q.name: q for q in (await store.open(load_records=not lazy)).queues}
    assert _held(recovered["log"]) == offsets[1600:]
    await store.close()


@pytest.mark.anyio
async def test_reopening_a_long_log_builds_nothing_per_message(tmp_path: Path) -> None:
    """Told which queues are logs, recovery keeps their offsets as runs from the checkpoint to the queue
    entry: a restart of a long stream needs no more memory than a short one (it used to expand them into a
    dict, a sorted list and a set: ~300 bytes per message at the peak)."""
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    log = store.put_queue("/", "log", False, {"log": True})
    store.hold_as_runs(log)
    for _ in range(100_000):
        store.append(MessageRecord("", "k", b"", b"m", 1), [log])
    await store.close()

    store = MessageStore(tmp_path, fsync="none", holds_log=_is_log)
    tracemalloc.start()
    try:
        recovered = await store.open(load_records=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # per message this would be ~30 MB
    entry = recovered.queues[0]
    assert entry.unloaded_runs is not None and len(entry.unloaded_runs) == 100_000 and not entry.unloaded
    await store.close()


@pytest.mark.anyio
async def test_after_a_crash_an_expired_record_leaves_a_queue_but_stays_in_a_log(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    log, other = store.put_queue("/", "log", False, {"log": True}), store.put_queue("/", "q", False, {})
    store.hold_as_runs(log)
    first = store.append(MessageRecord("", "k", b"", b"first", 1), [log, other])
    await store.flush()  # its new segment made a checkpoint
    offsets = [first] + [
        store.append(MessageRecord("", "k", b"", b"m%d" % i, 1, 2 if i == 1 else None), [log, other]) for i in range(3)
    ]
    await store.flush()
    await store.abort()  # these three are in the tail, after the last checkpoint

    store = MessageStore(tmp_path, fsync="none", holds_log=_is_log)
    recovered = {q.name: q for q in (await store.open(load_records=False)).queues}
    assert _held(recovered["log"]) == offsets  # a stream ignores TTL: its offsets must not renumber
    assert _held(recovered["q"]) == [offsets[0], offsets[1], offsets[3]]
    await store.close()
