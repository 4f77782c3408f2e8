"""Failed batches, as explicit steps (the fault model in test_fault_model.py finds such sequences at random).

A message moved twice, each move in a batch that failed: the second move's ack of the first move's
record (only in memory since the first failure) is buffered behind a batch that is in its fsync, and that
fsync fails too. The first failure's held-back ack (of the message's record on disk) must wait for the
second failure's records: written as soon as the first failure's own record is acked, it left the
confirmed message in no queue after a restart (found by the fault model with two batches in flight on
branch pipe30c; main's store does the same with one batch in flight and the next one filling).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from store.file_io import FileIO
from tests.store.faulty_io import WorkDuringFsync

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FsyncFailsAfter(WorkDuringFsync):
    """Fails the next fsync of a segment file after `arm(work)`, once; just before failing, runs `work` on
    the event loop: what the broker buffers while the batch is in its fsync (the batch filling behind it)."""

    fails = True


def _record(name: str) -> MessageRecord:
    return MessageRecord("", "rk", b"", name.encode(), 1_700_000_000_000)


async def _bodies(root: Path, io: FileIO) -> Counter[bytes]:
    store = MessageStore(root, io=io)
    recovered = await store.open()
    await store.close()
    return Counter(m.record.body for q in recovered.queues for m in q.messages)


@pytest.mark.parametrize("moves", [2, 3])
async def test_a_message_moved_again_by_failed_batches_is_not_lost(tmp_path: Path, moves: int) -> None:
    """`moves` moves of one confirmed message between two queues, each in a failed batch; from the second
    on, buffered behind a batch in its fsync (three: the first failure waits for the third, through the
    second, whose records the third acked)."""
    io = FsyncFailsAfter()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    queues = [store.put_queue("/", "a", False, {}), store.put_queue("/", "b", False, {})]
    confirmed: list[bool] = []
    offset = store.append(_record("m"), [queues[0]], lambda: confirmed.append(True))
    await store.flush()
    assert confirmed == [True]

    # Move 1 (dead-lettering a -> b) in a batch whose fsync fails: the ack of the record on disk is held back.
    store.ack(queues[0], offset)
    offset = store.append(_record("m"), [queues[1]])
    io.arm(lambda: None)
    await store.flush()
    for move in range(1, moves):
        # The next move, buffered while another batch is in its fsync; that fsync fails too.
        other = store.append(_record(f"other {move}"), [queues[0]])
        holder, target = queues[move % 2], queues[(move + 1) % 2]

        def move_again(holder: int = holder, target: int = target, other: int = other) -> None:
            nonlocal offset
            store.ack(queues[0], other)  # consumed at once: only the moved message's record is left
            store.ack(holder, offset)
            offset = store.append(_record("m"), [target])

        io.arm(move_again)
        await store.flush()
    assert store.fault_stats["fsync_failures"] == moves

    # Writing works again; a batch is written, then the broker restarts.
    store.append(_record("later"), [queues[1]])
    await store.flush()
    await store.close()

    bodies = await _bodies(tmp_path, FileIO())
    assert bodies[b"m"] >= 1, f"a confirmed message is in no queue after the restart: {dict(bodies)}"
    assert bodies[b"later"] == 1


async def test_the_fsync_hook_runs_behind_the_batch(tmp_path: Path) -> None:
    """The seam does what the test above relies on: the work runs while the batch is in its fsync, so it
    lands in the batch behind, which fails with it."""
    io = FsyncFailsAfter()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    a = store.put_queue("/", "a", False, {})
    outcomes: list[str] = []

    def append(name: str) -> None:
        store.append(
            _record(name), [a], lambda: outcomes.append(f"{name} durable"), lambda: outcomes.append(f"{name} failed")
        )

    append("first")
    io.arm(lambda: append("behind"))
    await store.flush()
    assert sorted(outcomes) == ["behind failed", "first failed"]
    await store.close()
