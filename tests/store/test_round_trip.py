"""What the broker sees across a clean restart: durability callbacks, recovered queues, acks, redelivery
flags, segment rolling and deletion, fan-out written once, TTL, the catalogue."""

from __future__ import annotations

import functools
import os
import threading
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import anyio
import pytest

from store import MessageRecord, MessageStore, Recovered

pytestmark = pytest.mark.anyio


def record(i: int, size: int = 100, expires_at_ms: int | None = None) -> MessageRecord:
    body = f"message-{i:08d}-".encode().ljust(size, b".")
    return MessageRecord("amq.direct", f"key.{i}", b"\x80\x00\x02", body, 1_700_000_000_000 + i, expires_at_ms)


async def reopen(path: Path, **kwargs: object) -> tuple[MessageStore, Recovered]:
    store = MessageStore(path, fsync="none", **kwargs)  # type: ignore[arg-type]
    return store, await store.open()


def offsets_of(recovered: Recovered, name: str) -> list[int]:
    (queue,) = [q for q in recovered.queues if q.name == name]
    return [m.offset for m in queue.messages]


async def test_on_durable_fires_only_after_the_covering_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        in_fsync.set()
        release.wait(5)
        real_fsync(fd)
        events.append("fsync " + os.readlink(f"/proc/self/fd/{fd}"))

    store = MessageStore(tmp_path)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    monkeypatch.setattr(os, "fsync", slow_fsync)
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        store.append(record(1), [qid], lambda: events.append("durable"))
        await anyio.to_thread.run_sync(in_fsync.wait, 5)
        await anyio.sleep(0.05)
        assert "durable" not in events  # the write happened, the fsync has not finished
        release.set()
        await store.flush()
        await store.close()
    before = events[: events.index("durable")]
    assert any(e.endswith(".seg") for e in before)  # the record's segment file
    assert any(e.endswith("/segments") for e in before)  # and the new file's directory entry


async def test_appends_during_an_fsync_go_into_the_next_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    store = MessageStore(tmp_path)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    durable: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        for i in range(2000):
            store.append(record(i), [qid], functools.partial(durable.append, i))
            if i % 100 == 0:
                await anyio.sleep(0)
        await store.flush()
        await store.close()
    assert durable == list(range(2000))  # in order, all of them
    assert len(fsyncs) < 200  # batched: far fewer fsyncs than messages


async def test_callbacks_fire_after_write_without_fsync_when_policy_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fsync(fd: int) -> None:
        raise AssertionError("fsync called with policy 'none'")

    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    monkeypatch.setattr(os, "fsync", no_fsync)
    fired: list[int] = []
    store.append(record(1), [qid], lambda: fired.append(1))
    await store.flush()
    assert fired == [1]
    monkeypatch.undo()
    await store.close()


async def test_reopen_recovers_exactly_the_unacked_messages_in_order(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(50)]
    for offset in offsets[::3]:
        store.ack(qid, offset)
    await store.close()

    store, recovered = await reopen(tmp_path)
    expected = [o for i, o in enumerate(offsets) if i % 3]
    assert offsets_of(recovered, "q") == expected
    (queue,) = recovered.queues
    assert [m.record for m in queue.messages] == [record(i) for i in range(50) if i % 3]
    assert not any(m.redelivered for m in queue.messages)
    await store.close()


async def test_acked_messages_stay_gone_across_several_restarts(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(10)]
    await store.close()
    for round_ in range(3):
        store, recovered = await reopen(tmp_path)
        assert offsets_of(recovered, "q") == offsets[round_:]
        store.ack(qid, offsets[round_])
        await store.close()


async def test_only_delivered_messages_come_back_redelivered(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(6)]
    store.mark_delivered(qid, offsets[1])
    store.mark_delivered(qid, offsets[4])
    store.mark_delivered(qid, offsets[5])
    store.ack(qid, offsets[5])
    await store.flush()
    await store.abort()  # a crash: delivered marks must have been logged, not only checkpointed

    store, recovered = await reopen(tmp_path)
    (queue,) = recovered.queues
    assert [(m.offset, m.redelivered) for m in queue.messages] == [
        (offsets[0], False),
        (offsets[1], True),
        (offsets[2], False),
        (offsets[3], False),
        (offsets[4], True),
    ]
    await store.close()
    store, recovered = await reopen(tmp_path)  # still redelivered after a second restart
    assert [m.redelivered for m in recovered.queues[0].messages] == [False, True, False, False, True]
    await store.close()


def segment_files(path: Path) -> list[Path]:
    return sorted((path / "segments").glob("*.seg"))


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path / "segments").iterdir())


async def test_segments_roll_and_fully_acked_ones_are_deleted(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=2048)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(200)]
    await store.flush()
    files = segment_files(tmp_path)
    assert len(files) > 10
    assert all(f.stat().st_size <= 2048 for f in files)
    assert [int(f.stem) for f in files][0] == 0  # named by base offset
    full = disk_bytes(tmp_path)
    for offset in offsets[:150]:
        store.ack(qid, offset)
    await store.flush()
    assert disk_bytes(tmp_path) < full / 3  # disk space comes back
    remaining = segment_files(tmp_path)
    assert int(remaining[0].stem) <= offsets[150] < int(remaining[1].stem)
    await store.close()

    store, recovered = await reopen(tmp_path, segment_size=2048)
    assert offsets_of(recovered, "q") == offsets[150:]
    await store.close()


async def test_a_segment_stays_while_any_queue_still_needs_one_message(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=1024)
    q1 = store.put_queue("/", "q1", False, {})
    q2 = store.put_queue("/", "q2", False, {})
    offsets = [store.append(record(i), [q1, q2]) for i in range(40)]
    for offset in offsets:
        store.ack(q1, offset)
    for offset in offsets[1:]:
        store.ack(q2, offset)
    await store.flush()
    first = segment_files(tmp_path)[0]
    assert int(first.stem) == 0
    store.ack(q2, offsets[0])
    await store.flush()
    assert not first.exists()
    await store.close()


async def test_message_routed_to_several_queues_is_written_once(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    queues = [store.put_queue("/", f"q{i}", False, {}) for i in range(5)]
    body = b"unique-fan-out-body-" * 5
    offset = store.append(MessageRecord("fan", "", b"", body, 1), queues)
    await store.close()
    data = b"".join(p.read_bytes() for p in segment_files(tmp_path))
    assert data.count(body) == 1

    store, recovered = await reopen(tmp_path)
    assert all([m.offset for m in q.messages] == [offset] for q in recovered.queues)
    # One record, shared by every queue that holds it.
    assert len({id(q.messages[0].record) for q in recovered.queues}) == 1
    await store.close()


async def test_expired_messages_are_dropped_on_recovery_and_counted(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    qid = store.put_queue("/", "q", False, {})
    live = store.append(record(0, expires_at_ms=2**62), [qid])
    store.append(record(1, expires_at_ms=1), [qid])
    store.append(record(2, expires_at_ms=5), [qid])
    forever = store.append(record(3), [qid])
    await store.close()

    store, recovered = await reopen(tmp_path)
    assert offsets_of(recovered, "q") == [live, forever]
    assert recovered.stats["expired_dropped"] == 2
    assert recovered.queues[0].messages[0].record.expires_at_ms == 2**62
    await store.close()


async def test_read_returns_records_buffered_written_and_after_restart(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=4096)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i, size=300), [qid]) for i in range(100)]
    assert store.read(offsets[7]) == record(7, size=300)  # still only in memory
    await store.flush()
    assert [store.read(o) for o in offsets] == [record(i, size=300) for i in range(100)]
    await store.close()
    store, _ = await reopen(tmp_path, segment_size=4096)
    assert store.read(offsets[99]) == record(99, size=300)
    with pytest.raises(KeyError):
        store.read(10_000)
    await store.close()


async def test_delete_queue_and_purge_release_their_messages(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=1024)
    q1 = store.put_queue("/", "q1", False, {})
    q2 = store.put_queue("/", "q2", False, {})
    offsets = [store.append(record(i), [q1, q2]) for i in range(30)]
    store.delete_queue(q1)
    store.purge(q2, offsets[:20])
    await store.close()
    store, recovered = await reopen(tmp_path, segment_size=1024)
    assert [q.name for q in recovered.queues] == ["q2"]
    assert offsets_of(recovered, "q2") == offsets[20:]
    assert int(segment_files(tmp_path)[0].stem) > 0  # the purged segments are gone
    await store.close()


async def test_close_without_run_flushes_and_fires_callbacks(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    qid = store.put_queue("/", "q", False, {})
    fired: list[int] = []
    store.append(record(0), [qid], lambda: fired.append(0))
    await store.close()
    assert fired == [0]


TYPED = {
    "x-message-ttl": 60000,
    "x-dead-letter-exchange": "dlx",
    "flag": True,
    "nothing": None,
    "ratio": 0.1,
    "big": 2**63 - 1,
    "negative": -5,
    "raw": b"\x00\xff",
    "price": Decimal("12.345"),
    "when": datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    "naive": datetime(2024, 1, 1, 0, 0),
    "nested": {"a": [1, "two", {"three": 3.0}], "b": {}},
    "empty": [],
}


async def test_catalogue_round_trips_with_typed_arguments(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    store.put_exchange("/", "ex", "topic", False, False, TYPED)
    store.put_exchange("/", "gone", "direct", True, True, {})
    store.delete_exchange("/", "gone")
    store.put_exchange("vh", "ex", "headers", True, True, {"x-match": "all"})
    qid = store.put_queue("/", "q", True, TYPED)
    store.put_binding("/", "ex", "q", "queue", "a.#", TYPED)
    store.put_binding("/", "ex", "q", "queue", "a.#", {"x-match": "any"})  # differs only by arguments
    store.put_binding("/", "ex", "ex2", "exchange", "b", {})
    store.delete_binding("/", "ex", "ex2", "exchange", "b", {})
    await store.close()

    store, recovered = await reopen(tmp_path)
    exchanges = sorted(recovered.exchanges, key=lambda e: (e["vhost"], e["name"]))
    assert exchanges == [
        {"vhost": "/", "name": "ex", "type": "topic", "auto_delete": False, "internal": False, "arguments": TYPED},
        {
            "vhost": "vh",
            "name": "ex",
            "type": "headers",
            "auto_delete": True,
            "internal": True,
            "arguments": {"x-match": "all"},
        },
    ]
    args = exchanges[0]["arguments"]
    assert type(args["flag"]) is bool and type(args["big"]) is int and type(args["ratio"]) is float
    (queue,) = recovered.queues
    assert (queue.queue_id, queue.vhost, queue.name, queue.auto_delete, queue.arguments) == (qid, "/", "q", True, TYPED)
    assert sorted(recovered.bindings, key=lambda b: len(b["arguments"])) == [
        {
            "vhost": "/",
            "source": "ex",
            "destination": "q",
            "destination_kind": "queue",
            "routing_key": "a.#",
            "arguments": {"x-match": "any"},
        },
        {
            "vhost": "/",
            "source": "ex",
            "destination": "q",
            "destination_kind": "queue",
            "routing_key": "a.#",
            "arguments": TYPED,
        },
    ]
    await store.close()


async def test_queue_ids_are_stable_and_never_reused(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    a = store.put_queue("/", "a", False, {})
    b = store.put_queue("/", "b", False, {})
    assert store.put_queue("/", "a", False, {"changed": 1}) == a
    store.delete_queue(b)
    await store.close()
    store, recovered = await reopen(tmp_path)
    assert [(q.queue_id, q.arguments) for q in recovered.queues] == [(a, {"changed": 1})]
    assert store.put_queue("/", "a", False, {}) == a
    c = store.put_queue("/", "b", False, {})
    assert c not in (a, b)
    await store.close()


async def test_messages_for_a_queue_deleted_before_a_crash_are_not_recovered(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path)
    qid = store.put_queue("/", "q", False, {})
    store.append(record(0), [qid])
    await store.flush()
    store.delete_queue(qid)
    await store.flush()
    await store.abort()
    store, recovered = await reopen(tmp_path)
    assert recovered.queues == []
    await store.close()


async def test_find_offset_by_time_uses_the_time_index(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=2048, index_interval=256)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(100)]
    await store.close()
    store, _ = await reopen(tmp_path, segment_size=2048, index_interval=256)
    assert store.find_offset_by_time(1_700_000_000_000 + 57) == offsets[57]
    assert store.find_offset_by_time(0) == offsets[0]
    assert store.find_offset_by_time(2_000_000_000_000) is None
    await store.close()


async def test_a_queue_named_twice_holds_the_message_once(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=1024)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid, qid]) for i in range(30)]
    for offset in offsets:
        store.ack(qid, offset)
    await store.flush()
    assert len(segment_files(tmp_path)) == 1  # every full segment was freed
    await store.close()
    store, recovered = await reopen(tmp_path, segment_size=1024)
    assert offsets_of(recovered, "q") == []
    await store.close()


async def test_restart_reads_only_what_queues_still_hold_and_the_tail(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, segment_size=4096)
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(1000)]
    for offset in offsets[:-10]:
        store.ack(qid, offset)
    await store.close()
    store, recovered = await reopen(tmp_path, segment_size=4096)
    assert offsets_of(recovered, "q") == offsets[-10:]
    assert recovered.stats["records_scanned"] <= 40  # one segment's worth, not 1000
    await store.close()


async def test_a_drained_queue_gives_back_its_disk_before_the_segment_fills(tmp_path: Path) -> None:
    from store.message_store import RECLAIM_ACTIVE_BYTES

    store, _ = await reopen(tmp_path)  # default segment size (1 GiB): never filled by this test
    qid = store.put_queue("/", "q", False, {})
    body = b"x" * 4096
    count = RECLAIM_ACTIVE_BYTES // len(body) + 100
    offsets = [store.append(MessageRecord("", "q", b"", body, 0), [qid]) for _ in range(count)]
    await store.flush()
    assert disk_bytes(tmp_path) > RECLAIM_ACTIVE_BYTES
    for offset in offsets:
        store.ack(qid, offset)
    await store.flush()
    assert disk_bytes(tmp_path) < RECLAIM_ACTIVE_BYTES // 4  # the emptied active segment was rolled and deleted
    await store.close()
    store, recovered = await reopen(tmp_path)
    assert offsets_of(recovered, "q") == []
    await store.close()
