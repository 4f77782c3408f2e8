"""The free-space floor and the reserve file (store/disk_space.py): new message data never takes the disk
below the floor, what frees space is still written, and the reserve is given up when the disk runs out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from store.disk_space import RESERVE_NAME

pytestmark = pytest.mark.anyio


def record(body: bytes) -> MessageRecord:
    return MessageRecord("", "q", b"", body, 1_700_000_000_000)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


async def test_a_message_that_would_cross_the_floor_is_refused_and_acks_are_still_written(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, reserve_bytes=64 * 1024)
    await store.open()
    assert (tmp_path / RESERVE_NAME).stat().st_size == 64 * 1024  # taken once the store is open
    qid = store.put_queue("/", "q", False, {})
    durable: list[int] = []
    failed: list[int] = []
    first = store.append(record(b"kept"), [qid], lambda: durable.append(0), lambda: failed.append(0))
    await store.flush()
    # Now the floor is just above what is free: the next message is refused, not written.
    store._space.min_free = free_bytes(tmp_path) - 4096  # noqa: SLF001 - the floor moved, not the disk
    segments_before = sorted(os.listdir(tmp_path / "segments"))
    store.append(record(b"x" * 8192), [qid], lambda: durable.append(1), lambda: failed.append(1))
    await store.flush()
    assert durable == [0] and failed == [1]
    assert store.out_of_space
    assert not (tmp_path / RESERVE_NAME).exists(), "the reserve was kept while out of space"
    assert sorted(os.listdir(tmp_path / "segments")) == segments_before  # nothing written for the refused one
    # An ack frees space: it is written while new data is refused, and holds after a crash.
    store.ack(qid, first)
    await store.flush()
    await store.abort()
    reopened = MessageStore(tmp_path)
    recovered = await reopened.open()
    await reopened.close()
    (queue,) = recovered.queues
    assert queue.messages == [] and queue.unloaded == []


async def test_the_reserve_comes_back_once_there_is_room_again(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, reserve_bytes=64 * 1024)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    store._space.min_free = free_bytes(tmp_path)  # noqa: SLF001 - no room above the floor
    store.append(record(b"x" * 8192), [qid])
    await store.flush()
    assert store.out_of_space and not (tmp_path / RESERVE_NAME).exists()
    store._space.min_free = 0  # noqa: SLF001 - room again
    assert not store.check_space()
    assert (tmp_path / RESERVE_NAME).exists()
    await store.close()
