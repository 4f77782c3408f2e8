"""Disk faults at the store's I/O seam: a failed write or fsync never confirms, is never retried, never stops
the store, and leaves the files as they were; unwritten bytes are bounded (backpressure)."""

from __future__ import annotations

import errno
from pathlib import Path

import anyio
import pytest

from store import MessageRecord, MessageStore
from tests.store.faulty_io import ArmedIO, FailingIO

pytestmark = pytest.mark.anyio


def record(body: bytes) -> MessageRecord:
    return MessageRecord("", "q", b"", body, 1_700_000_000_000)


class Outcomes:
    def __init__(self) -> None:
        self.durable: list[int] = []
        self.failed: list[int] = []

    def append(self, store: MessageStore, qid: int, n: int) -> int:
        body = b"m%d" % n
        return store.append(record(body), [qid], lambda: self.durable.append(n), lambda: self.failed.append(n))


async def live_bodies(path: Path) -> list[bytes]:
    store = MessageStore(path)
    recovered = await store.open()
    await store.close()
    (queue,) = recovered.queues
    return [m.record.body for m in queue.messages]


async def test_a_failed_segment_write_fails_its_batch_and_the_next_batch_is_stored(tmp_path: Path) -> None:
    io = FailingIO(fail_write=3)  # the header of the first segment, then one batch, then this one fails
    store = MessageStore(tmp_path, io=io)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    seen = Outcomes()
    seen.append(store, qid, 0)
    await store.flush()
    offsets = [seen.append(store, qid, n) for n in (1, 2)]
    full: list[bool] = []
    store.on_disk_full = full.append
    await store.flush()
    assert io.failed == ["write 3"]
    assert seen.failed == [1, 2] and seen.durable == [0]
    assert store.out_of_space and full == [True]
    # The queue still holds them, from memory: consumers get them, acks work.
    assert [store.read(o).body for o in offsets] == [b"m1", b"m2"]
    store.ack(qid, offsets[0])
    seen.append(store, qid, 3)
    await store.flush()
    assert seen.durable == [0, 3]
    await store.close()
    assert await live_bodies(tmp_path) == [b"m0", b"m3"]  # m2 was nacked: not stored, not half-stored


async def test_a_failed_fsync_is_not_retried_and_the_next_record_starts_a_new_segment(tmp_path: Path) -> None:
    io = FailingIO(fail_fsync=2, error=errno.EIO)
    store = MessageStore(tmp_path, io=io)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    seen = Outcomes()
    seen.append(store, qid, 0)
    await store.flush()
    segments_before = sorted(p.name for p in (tmp_path / "segments").glob("*.seg"))
    seen.append(store, qid, 1)
    await store.flush()
    assert io.failed == ["fsync 2"] and seen.failed == [1]
    assert not store.out_of_space  # EIO is not a full disk
    writes = io.segment_writes
    seen.append(store, qid, 2)
    await store.flush()
    assert seen.durable == [0, 2]
    # One new segment (its header, then m2): m1's bytes were not written again.
    assert io.segment_writes == writes + 2
    segments_after = sorted(p.name for p in (tmp_path / "segments").glob("*.seg"))
    assert len(segments_after) == len(segments_before) + 1
    await store.close()
    assert await live_bodies(tmp_path) == [b"m0", b"m2"]


async def test_records_of_a_failed_batch_can_be_acked_and_are_not_in_the_next_checkpoint(tmp_path: Path) -> None:
    io = FailingIO(fail_write=2)
    store = MessageStore(tmp_path, io=io)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    seen = Outcomes()
    failed = [seen.append(store, qid, n) for n in range(3)]
    await store.flush()
    assert seen.failed == [0, 1, 2]
    store.ack(qid, failed[1])
    with pytest.raises(KeyError):
        store.read(failed[1])
    assert store.read(failed[2]).body == b"m2"
    seen.append(store, qid, 3)
    await store.close()  # a checkpoint: the failed records it still holds in memory are not in it
    assert await live_bodies(tmp_path) == [b"m3"]
    reopened = MessageStore(tmp_path)
    recovered = await reopened.open()
    await reopened.close()
    assert recovered.stats["lost_records"] == 0


async def test_the_commit_loop_survives_a_full_disk_and_resumes_when_space_is_back(tmp_path: Path) -> None:
    io = FailingIO()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    seen = Outcomes()
    events: list[bool] = []
    store.on_disk_full = events.append
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        seen.append(store, qid, 0)
        await store.flush()
        io.space = io.written  # the disk is full from now on
        for n in range(1, 4):
            seen.append(store, qid, n)
        await store.flush()
        assert seen.failed == [1, 2, 3] and events == [True]
        assert store.out_of_space
        io.space = None  # room again: the next check says so
        assert not store.check_space() and events == [True, False]
        seen.append(store, qid, 4)
        await store.flush()
        assert seen.durable == [0, 4]
        tg.cancel_scope.cancel()
    await store.close()
    assert await live_bodies(tmp_path) == [b"m0", b"m4"]


async def test_unwritten_bytes_past_the_bound_signal_pressure_until_half_is_written(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, max_unwritten_bytes=4096)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    signals: list[bool] = []
    store.on_pressure = signals.append
    for _ in range(20):
        store.append(record(b"x" * 100), [qid])
    assert signals == []
    for _ in range(30):
        store.append(record(b"x" * 100), [qid])
    assert signals == [True] and store.pressure
    await store.flush()
    assert signals == [True, False] and not store.pressure
    await store.close()


async def test_a_nacked_record_does_not_come_back_after_a_crash(tmp_path: Path) -> None:
    # The failed fsync's bytes may still reach the disk later; the store cuts them off, so a crash right
    # after the failure cannot resurrect a message its publisher was told was not stored.
    io = FailingIO(fail_fsync=2, error=errno.EIO)
    store = MessageStore(tmp_path, io=io)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    seen = Outcomes()
    seen.append(store, qid, 0)
    await store.flush()
    seen.append(store, qid, 1)
    await store.flush()
    assert seen.failed == [1]
    await store.abort()
    assert await live_bodies(tmp_path) == [b"m0"]


async def dead_lettered_in_a_failed_batch(path: Path) -> tuple[MessageStore, int, int, int]:
    """A confirmed message, then moved to a second queue (the holder's ack and the new record in one batch,
    as dead-lettering does it) by a batch whose segment write fails. Returns the store still open."""
    io = ArmedIO()
    store = MessageStore(path, io=io)
    await store.open()
    source, target = store.put_queue("/", "q", False, {}), store.put_queue("/", "dlq", False, {})
    seen = Outcomes()
    offset = seen.append(store, source, 0)
    await store.flush()
    assert seen.durable == [0]
    store.ack(source, offset)
    moved = store.append(record(b"m0"), [target])
    io.arm(".seg", "write", errno.EIO)
    await store.flush()
    assert io.fired == 1
    return store, source, target, moved


async def held_bodies(path: Path) -> dict[str, list[bytes]]:
    store = MessageStore(path)
    recovered = await store.open()
    await store.close()
    return {q.name: [m.record.body for m in q.messages] for q in recovered.queues}


async def test_a_message_dead_lettered_by_a_failed_batch_stays_in_its_queue_across_a_restart(tmp_path: Path) -> None:
    # Found by test_fault_model.py: the holder's ack went out with the next checkpoint while the new record
    # existed only in memory, so after a restart the confirmed message was in neither queue.
    store, *_ = await dead_lettered_in_a_failed_batch(tmp_path)
    await store.flush()
    await store.close()
    assert await held_bodies(tmp_path) == {"q": [b"m0"], "dlq": []}


async def test_once_the_moved_copy_is_acked_the_held_back_ack_is_written(tmp_path: Path) -> None:
    store, _, target, moved = await dead_lettered_in_a_failed_batch(tmp_path)
    store.ack(target, moved)  # the dead-letter queue's consumer had it, from memory
    await store.flush()
    await store.abort()  # a crash: only what the ack log and the last checkpoint say
    assert await held_bodies(tmp_path) == {"q": [], "dlq": []}
