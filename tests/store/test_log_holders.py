"""A queue that is a log (a stream) holds its offsets as runs: the same answers as the per-message dict,
through checkpoints and restarts, with memory that does not grow with the log's length."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import MessageRecord, MessageStore
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


@pytest.mark.anyio
@pytest.mark.parametrize("crash", [False, True])
async def test_a_log_held_as_runs_comes_back_after_a_checkpoint_and_a_restart(tmp_path: Path, crash: bool) -> None:
    store = MessageStore(tmp_path, fsync="none", checkpoint_bytes=4096)
    await store.open()
    log, other = store.put_queue("/", "log", False, {}), store.put_queue("/", "q", False, {})
    store.hold_as_runs(log)
    offsets = [store.append(MessageRecord("", "k", b"", b"m%d" % i, 1), [log, other]) for i in range(3000)]
    for offset in offsets[:1000]:  # retention drops the oldest
        store.ack(log, offset)
    await store.flush()
    for offset in offsets[1000:1500]:  # after the checkpoint: in the ack log
        store.ack(log, offset)
    await store.flush()
    await (store.abort() if crash else store.close())

    store = MessageStore(tmp_path, fsync="none")
    recovered = {q.name: q for q in (await store.open()).queues}
    held = [m.offset for m in recovered["log"].messages] + recovered["log"].unloaded
    assert sorted(held) == offsets[1500:]
    assert len(recovered["q"].messages) + len(recovered["q"].unloaded) == 3000
    await store.close()
