"""Small values kept with a durable queue (a stream's first offset, consumers' tracked offsets, a dedup
window): durable with the next commit, the last write of a batch wins, gone with the queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import MessageRecord, MessageStore

pytestmark = pytest.mark.anyio


async def test_values_come_back_after_a_restart_last_write_wins(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "s", False, {})
    other = store.put_queue("/", "t", False, {})
    store.set_queue_value(qid, "offset:c1", b"1")
    store.set_queue_value(qid, "offset:c1", b"2")
    store.set_queue_value(qid, "gone", b"x")
    await store.flush()
    store.set_queue_value(qid, "gone", None)
    store.set_queue_value(other, "k", b"v")
    await store.close()

    store = MessageStore(tmp_path, fsync="none")
    recovered = await store.open()
    values = {q.name: q.values for q in recovered.queues}
    assert values == {"s": {"offset:c1": b"2"}, "t": {"k": b"v"}}
    await store.close()


async def test_values_are_durable_before_a_record_appended_after_them(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "s", False, {})
    store.set_queue_value(qid, "first", b"7")
    fired: list[int] = []
    store.append(MessageRecord("", "s", b"\x00\x00", b"m", 1), [qid], lambda: fired.append(1))
    await store.flush()
    assert fired == [1]
    await store.abort()  # a crash right after the confirm

    store = MessageStore(tmp_path, fsync="none")
    recovered = await store.open()
    assert recovered.queues[0].values == {"first": b"7"}
    await store.close()


async def test_a_deleted_queue_takes_its_values_even_those_set_in_the_same_batch(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "s", False, {})
    store.set_queue_value(qid, "a", b"1")
    await store.flush()
    store.set_queue_value(qid, "b", b"2")
    store.delete_queue(qid)
    store.set_queue_value(qid, "c", b"3")  # an unknown queue: ignored
    store.put_queue("/", "s", False, {})
    await store.close()

    store = MessageStore(tmp_path, fsync="none")
    recovered = await store.open()
    assert [(q.name, q.values) for q in recovered.queues] == [("s", {})]
    await store.close()
