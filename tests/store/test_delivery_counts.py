"""Delivery counts (how often a queue's message went back unacked) survive a restart and a crash, and are
forgotten with the message or the queue."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from store import MessageRecord, MessageStore, Recovered

pytestmark = pytest.mark.anyio


def record(i: int) -> MessageRecord:
    return MessageRecord("", "q", b"\x80\x00\x02", b"body-%d" % i, 1_700_000_000_000 + i)


async def run_and(path: Path, work, close: bool = True) -> Recovered:  # type: ignore[no-untyped-def]
    store = MessageStore(path, fsync="none")
    recovered = await store.open()
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        work(store, recovered)
        await store.flush()
        if close:
            await store.close()
        else:
            await store.abort()
    return recovered


def counts(recovered: Recovered, name: str) -> dict[int, int]:
    (queue,) = [q for q in recovered.queues if q.name == name]
    return queue.delivery_counts


@pytest.mark.parametrize("clean", [True, False])
async def test_counts_come_back_for_messages_still_held(tmp_path: Path, clean: bool) -> None:
    offsets: list[int] = []

    def publish(store: MessageStore, _: Recovered) -> None:
        qid = store.put_queue("/", "q", False, {"x-delivery-limit": 3})
        other = store.put_queue("/", "other", False, {})
        offsets.extend(store.append(record(i), [qid, other]) for i in range(3))
        store.set_delivery_count(qid, offsets[0], 1)
        store.set_delivery_count(qid, offsets[0], 2)
        store.set_delivery_count(qid, offsets[1], 1)
        store.set_delivery_count(qid, offsets[2], 1)
        store.ack(qid, offsets[2])  # acked: its count goes with it

    await run_and(tmp_path, publish, close=clean)
    recovered = await run_and(tmp_path, lambda s, r: None)
    assert counts(recovered, "q") == {offsets[0]: 2, offsets[1]: 1}
    assert counts(recovered, "other") == {}


async def test_a_deleted_queue_takes_its_counts_along(tmp_path: Path) -> None:
    def publish(store: MessageStore, _: Recovered) -> None:
        qid = store.put_queue("/", "q", False, {})
        store.set_delivery_count(qid, store.append(record(1), [qid]), 4)
        store.delete_queue(qid)
        qid = store.put_queue("/", "q", False, {})
        store.append(record(2), [qid])

    await run_and(tmp_path, publish)
    recovered = await run_and(tmp_path, lambda s, r: None)
    assert counts(recovered, "q") == {}


async def test_a_count_for_an_offset_the_queue_does_not_hold_is_ignored(tmp_path: Path) -> None:
    def publish(store: MessageStore, _: Recovered) -> None:
        qid = store.put_queue("/", "q", False, {})
        offset = store.append(record(1), [qid])
        store.ack(qid, offset)
        store.set_delivery_count(qid, offset, 1)
        store.set_delivery_count(999, offset, 1)

    await run_and(tmp_path, publish)
    recovered = await run_and(tmp_path, lambda s, r: None)
    assert counts(recovered, "q") == {}


async def test_abort_ends_a_commit_loop_that_waits_for_work(tmp_path: Path) -> None:
    """A crash simulated with abort() while run() sits idle: run() returns (it used to wait for a wake-up
    that nothing sent, and the test around it hung)."""
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    with anyio.fail_after(30):  # a bound on a hang, not a timing assertion
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run)
            await store.flush()
            await anyio.wait_all_tasks_blocked()  # run() is parked, waiting for work
            await store.abort()
