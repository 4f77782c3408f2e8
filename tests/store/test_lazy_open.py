"""open(load_records=False), as the broker opens the store: records held since before the last checkpoint
are not read at open (restart time and memory stop growing with the backlog); read_many reads them back.
What a queue ends up with must be what an eager open gives, damage included, only discovered later."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from test_damage import N, build, delete_second_segment, flip_byte, frames, only_segment, record

from store import MessageStore, Recovered

pytestmark = pytest.mark.anyio


async def lazy(path: Path, segment_size: int = 1 << 20) -> tuple[MessageStore, Recovered]:
    store = MessageStore(path, fsync="none", segment_size=segment_size)
    return store, await store.open(load_records=False)


def held(recovered: Recovered) -> list[int]:
    q = recovered.queues[0]
    return [*q.unloaded, *(m.offset for m in q.messages)]


async def test_after_a_clean_stop_nothing_is_read_and_everything_reads_back(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=True)
    store, recovered = await lazy(tmp_path)
    q = recovered.queues[0]
    assert q.unloaded == offsets and q.messages == []
    assert recovered.stats["tail_records"] == 0
    assert recovered.stats["records_scanned"] < N // 2  # at most the stretch before the end, for the index
    assert store.read_many(offsets) == [record(i) for i in range(N)]
    await store.close()


async def test_after_a_crash_only_the_tail_is_read(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=False)  # the checkpoint covers the first record only
    store, recovered = await lazy(tmp_path)
    q = recovered.queues[0]
    assert q.unloaded == offsets[:1]
    assert [m.offset for m in q.messages] == offsets[1:]
    assert [m.record for m in q.messages] == [record(i) for i in range(1, N)]
    assert store.read_many(offsets[:1]) == [record(0)]
    await store.close()


async def test_lazy_and_eager_opens_hold_the_same_messages_and_flags(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "a", fsync="none", segment_size=4096)
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(200)]
    await store.flush()
    for o in offsets[::3]:
        store.ack(qid, o)
    for o in offsets[1::3]:
        store.mark_delivered(qid, o)
    await store.flush()
    await store.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    eager = MessageStore(tmp_path / "a", fsync="none", segment_size=4096)
    e = (await eager.open()).queues[0]
    store, recovered = await lazy(tmp_path / "b", segment_size=4096)
    q = recovered.queues[0]
    assert held(recovered) == [m.offset for m in e.messages]
    delivered = {m.offset for m in e.messages if m.redelivered}
    assert q.unloaded_delivered | {m.offset for m in q.messages if m.redelivered} == delivered
    assert store.read_many(held(recovered)) == [m.record for m in e.messages]
    await eager.close()
    await store.close()


async def test_read_many_spans_segments_and_answers_none_for_what_is_not_there(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=True, segment_size=2048)
    assert len(list((tmp_path / "segments").glob("*.seg"))) > 3
    store, _ = await lazy(tmp_path, segment_size=2048)
    wanted = [offsets[0], offsets[5], offsets[6], offsets[-1]]
    assert store.read_many(wanted) == [record(0), record(5), record(6), record(N - 1)]
    assert store.read_many([offsets[-1] + 10]) == [None]
    await store.close()


async def test_read_many_serves_records_not_written_yet(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    written = store.append(record(1), [qid])
    await store.flush()
    buffered = store.append(record(2), [qid])
    assert store.read_many([written, buffered]) == [record(1), record(2)]
    await store.close()


async def test_a_flipped_byte_shows_as_one_unreadable_record(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    offsets = await build(pristine, clean_close=True)
    bounds = frames(only_segment(pristine))
    rng = random.Random(7)
    for trial in range(8):
        k = rng.randrange(N - 1)
        _, start, end = bounds[k]
        where = start + rng.choice([0, 12, 20, rng.randrange(end - start)])
        work = tmp_path / f"trial{trial}"
        shutil.copytree(pristine, work)
        flip_byte(only_segment(work), where)
        store, recovered = await lazy(work)
        assert held(recovered) == offsets  # not read at open: the damage is not known yet
        got = store.read_many(offsets)
        assert got[k] is None, f"record {k}, byte {where}"
        assert got[:k] + got[k + 1 :] == [record(i) for i in range(N) if i != k]
        await store.close()


async def test_a_deleted_segment_loses_its_records_at_open(tmp_path: Path) -> None:
    offsets = await build(tmp_path, clean_close=True, segment_size=2048)
    gone_base, next_base = delete_second_segment(tmp_path)
    store, recovered = await lazy(tmp_path, segment_size=2048)
    assert held(recovered) == [o for o in offsets if not gone_base <= o < next_base]
    assert recovered.stats["lost_records"] == next_base - gone_base
    await store.close()


async def test_expired_tail_records_are_still_dropped_at_open(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "q", False, {})
    first = store.append(record(0), [qid])
    await store.flush()  # the first segment takes a checkpoint: what follows is the tail
    rec = record(1)
    rec.expires_at_ms = 1
    store.append(rec, [qid])
    await store.flush()
    await store.abort()
    store, recovered = await lazy(tmp_path)
    assert held(recovered) == [first]
    assert recovered.stats["expired_dropped"] == 1
    await store.close()
