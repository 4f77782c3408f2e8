"""Retention: segments no queue needs stay readable for log readers until the policy (age, size) lets them
go; a segment a queue needs is never deleted; the policy holds across restarts and crashes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from store import MessageRecord, MessageStore, Recovered
from store import message_store as message_store_module
from store.retention import AGE, SIZE, RetentionPolicy, SegmentInfo, select_for_deletion

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000
MINUTE = 60_000


class Clock:
    """The store's clock, moved by hand (nanoseconds, as time.time_ns)."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms * 1_000_000


def record(i: int, timestamp_ms: int = T0) -> MessageRecord:
    return MessageRecord("amq.direct", f"key.{i}", b"\x80\x00\x02", f"body-{i:06d}".encode() * 8, timestamp_ms)


async def reopen(path: Path, clock: Clock, **kwargs: object) -> tuple[MessageStore, Recovered]:
    options: dict[str, object] = {"segment_size": 1024, **kwargs}
    store = MessageStore(path, fsync="none", clock=clock, **options)  # type: ignore[arg-type]
    return store, await store.open()


def bases_on_disk(path: Path) -> list[int]:
    return sorted(int(p.stem) for p in (path / "segments").glob("*.seg"))


def log_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path / "segments").glob("*.seg"))


def offsets_read(store: MessageStore, from_offset: int = 0) -> list[int]:
    return [offset for offset, _ in store.records_from(from_offset)]


async def fill_and_ack(store: MessageStore, count: int, keep: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Append `count` records to one queue and ack all but the indexes in `keep`."""
    qid = store.put_queue("/", "q", False, {})
    offsets = [store.append(record(i), [qid]) for i in range(count)]
    for i, offset in enumerate(offsets):
        if i not in keep:
            store.ack(qid, offset)
    await store.flush()
    return offsets


async def test_without_retention_unneeded_segments_go_at_once(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, Clock())
    offsets = await fill_and_ack(store, 60)
    assert bases_on_disk(tmp_path) == [store._segments.active]  # only the segment being appended to
    assert offsets_read(store) == [o for o in offsets if o >= store._segments.active]  # type: ignore[operator]
    assert store.stats == {"retention_deleted_age": 0, "retention_deleted_size": 0}
    await store.close()


async def test_acked_segments_stay_readable_until_older_than_max_age(tmp_path: Path) -> None:
    clock = Clock()
    store, _ = await reopen(tmp_path, clock, retention_max_age_ms=MINUTE)
    offsets = await fill_and_ack(store, 60)
    segments = bases_on_disk(tmp_path)
    assert len(segments) > 5
    assert offsets_read(store) == offsets
    assert [r.body for _, r in store.read_range(offsets[10], 3)] == [record(i).body for i in (10, 11, 12)]

    clock.ms = T0 + MINUTE  # exactly max_age old: still kept
    await store.enforce_retention()
    assert bases_on_disk(tmp_path) == segments

    clock.ms = T0 + MINUTE + 1
    await store.enforce_retention()
    # Every sealed segment aged out; the active one was rolled by age and went with them.
    assert bases_on_disk(tmp_path) == [offsets[-1] + 1]
    assert offsets_read(store) == []
    assert store.stats["retention_deleted_age"] == len(segments)
    await store.close()


async def test_the_active_segment_rolls_by_age_so_a_slow_log_ages_out(tmp_path: Path) -> None:
    clock = Clock()
    store, _ = await reopen(tmp_path, clock, segment_size=1 << 20, retention_max_age_ms=MINUTE)
    qid = store.put_queue("/", "q", False, {})
    held = store.append(record(0), [qid])
    await store.flush()
    clock.ms = T0 + 2 * MINUTE
    await store.enforce_retention()
    assert bases_on_disk(tmp_path) == [0, 1]  # rolled, and kept: the queue still holds offset 0

    # A record published long ago (a dead-lettered one keeps its timestamp) does not make the new
    # segment roll at once: its age counts from the segment's creation too.
    store.append(record(1, timestamp_ms=T0), [])
    await store.flush()
    await store.enforce_retention()
    assert bases_on_disk(tmp_path) == [0, 1]
    clock.ms = T0 + 3 * MINUTE + 1
    await store.enforce_retention()
    assert bases_on_disk(tmp_path) == [0, 2]  # segment 1 rolled and, unneeded and old, deleted
    assert store.read(held).body == record(0).body
    await store.close()


async def test_max_bytes_deletes_the_oldest_unneeded_segments_first(tmp_path: Path) -> None:
    # The same log without a size bound, for its segment sizes.
    reference, _ = await reopen(tmp_path / "reference", Clock(), retention_max_bytes=1 << 40)
    offsets = await fill_and_ack(reference, 120, keep={20})  # a queue still needs one record, early on
    sizes = {
        base: (tmp_path / "reference" / "segments" / f"{base:020d}.seg").stat().st_size
        for base in bases_on_disk(tmp_path / "reference")
    }
    await reference.close()
    segments = sorted(sizes)
    needed = max(b for b in segments if b <= offsets[20])
    assert segments.index(needed) >= 2

    bound = sum(sizes.values()) // 2
    store, _ = await reopen(tmp_path / "log", Clock(), retention_max_bytes=bound)
    await fill_and_ack(store, 120, keep={20})
    expected, total = list(segments), sum(sizes.values())
    for base in segments:  # oldest first, skipping the needed one
        if total <= bound:
            break
        if base != needed:
            expected.remove(base)
            total -= sizes[base]
    assert bases_on_disk(tmp_path / "log") == expected
    assert expected[0] == needed  # everything older than it went, and it stayed
    assert log_bytes(tmp_path / "log") <= bound
    assert store.stats["retention_deleted_size"] == len(segments) - len(expected)
    # The reader skips the holes: records in order, from what is left.
    read = offsets_read(store)
    assert read == sorted(read) and offsets[20] in read and offsets[0] not in read
    assert read[-1] == offsets[-1]
    await store.close()


async def test_a_segment_a_queue_needs_is_never_deleted_whatever_the_bounds(tmp_path: Path) -> None:
    clock = Clock()
    store, _ = await reopen(tmp_path, clock, retention_max_age_ms=1, retention_max_bytes=1)
    offsets = await fill_and_ack(store, 60, keep={0, 59})
    clock.ms = T0 + 365 * 24 * 60 * MINUTE
    await store.enforce_retention()
    assert bases_on_disk(tmp_path)[0] == 0  # holds offsets[0]
    assert store.read(offsets[0]).body == record(0).body
    await store.close()
    store, recovered = await reopen(tmp_path, clock, retention_max_age_ms=1, retention_max_bytes=1)
    assert [m.offset for m in recovered.queues[0].messages] == [offsets[0], offsets[59]]
    assert 0 in bases_on_disk(tmp_path)
    await store.close()


@pytest.mark.parametrize("stop", ["close", "abort"])
async def test_retention_holds_across_restart_and_crash(tmp_path: Path, stop: str) -> None:
    clock = Clock()
    store, _ = await reopen(tmp_path, clock, retention_max_age_ms=MINUTE)
    offsets = await fill_and_ack(store, 60)
    segments = bases_on_disk(tmp_path)
    await getattr(store, stop)()

    clock.ms = T0 + MINUTE // 2  # inside the policy: open() keeps them all, readable
    store, recovered = await reopen(tmp_path, clock, retention_max_age_ms=MINUTE)
    assert bases_on_disk(tmp_path) == segments
    assert recovered.stats["segments_retained"] == len(segments) - 1  # all but the active one
    assert recovered.stats["retention_deleted_age"] == 0
    assert offsets_read(store) == offsets
    assert store.find_offset_by_time(T0) == 0
    await getattr(store, stop)()

    clock.ms = T0 + MINUTE + 1  # outside: open() deletes them (all but the last, still the active one)
    store, recovered = await reopen(tmp_path, clock, retention_max_age_ms=MINUTE)
    assert bases_on_disk(tmp_path) == segments[-1:]
    assert recovered.stats["retention_deleted_age"] == len(segments) - 1
    assert store.stats["retention_deleted_age"] == len(segments) - 1
    await store.enforce_retention()  # ... which then rolls by age and goes too
    assert bases_on_disk(tmp_path) == [offsets[-1] + 1]
    await store.close()


async def test_open_applies_max_bytes_and_turning_retention_off_frees_everything(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, Clock(), retention_max_bytes=1 << 30)
    await fill_and_ack(store, 60)
    await store.abort()
    full = log_bytes(tmp_path)
    store, recovered = await reopen(tmp_path, Clock(), retention_max_bytes=full // 2)
    assert recovered.stats["retention_deleted_size"] > 0
    assert log_bytes(tmp_path) <= full // 2
    await store.close()
    store, recovered = await reopen(tmp_path, Clock())  # no policy: delete as soon as unneeded
    assert len(bases_on_disk(tmp_path)) == 1
    assert recovered.stats["segments_retained"] == 0
    await store.close()


async def test_retained_segment_with_a_missing_index_is_read_after_rebuilding_it(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, Clock(), retention_max_age_ms=MINUTE, index_interval=128)
    offsets = await fill_and_ack(store, 60)
    await store.close()
    for path in (tmp_path / "segments").glob("*.idx"):
        path.unlink()
    store, recovered = await reopen(tmp_path, Clock(), retention_max_age_ms=MINUTE, index_interval=128)
    assert recovered.stats["indexes_rebuilt"] == len(bases_on_disk(tmp_path))
    assert offsets_read(store, offsets[25]) == offsets[25:]
    await store.close()


async def test_readers_never_see_records_that_are_not_durable(tmp_path: Path) -> None:
    store, _ = await reopen(tmp_path, Clock(), retention_max_age_ms=MINUTE)
    first = await fill_and_ack(store, 30)
    later = [store.append(record(i), []) for i in range(30, 35)]  # buffered, not yet written
    assert store.durable_end() == later[0]
    assert offsets_read(store) == first
    assert [(o, bytes(r.body)) for o, r in store.read_range(first[-1], 10)] == [(first[-1], record(29).body)]
    await store.flush()
    assert store.durable_end() == later[-1] + 1
    assert offsets_read(store, first[-1]) == [first[-1], *later]
    assert [o for o, _ in store.read_range(0, 7)] == first[:7]
    await store.close()


async def test_the_commit_loop_applies_retention_by_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(message_store_module, "RETENTION_IDLE_SECONDS", 0.01)
    clock = Clock()
    store, _ = await reopen(tmp_path, clock, retention_max_age_ms=MINUTE)
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        await fill_and_ack(store, 60)
        assert len(bases_on_disk(tmp_path)) > 5
        clock.ms = T0 + 2 * MINUTE  # nothing else happens: the idle loop notices by itself
        with anyio.fail_after(5):
            while len(bases_on_disk(tmp_path)) > 1:
                await anyio.sleep(0.01)
        await store.close()
    assert store.stats["retention_deleted_age"] > 5


def test_policy_counts_needed_segments_towards_max_bytes_but_never_chooses_them() -> None:
    segments = [
        SegmentInfo(0, 100, T0, needed=True),
        SegmentInfo(10, 100, T0 + 5, needed=False),
        SegmentInfo(20, 100, T0 + 10, needed=False),
        SegmentInfo(30, 100, T0 + 20, needed=True),  # the active one
    ]
    assert select_for_deletion(segments, RetentionPolicy(max_bytes=250), T0) == [(10, SIZE), (20, SIZE)]
    assert select_for_deletion(segments, RetentionPolicy(max_bytes=300), T0) == [(10, SIZE)]
    assert select_for_deletion(segments, RetentionPolicy(max_age_ms=7), T0 + 14) == [(10, AGE)]
    both = RetentionPolicy(max_age_ms=7, max_bytes=200)
    assert select_for_deletion(segments, both, T0 + 14) == [(10, AGE), (20, SIZE)]
    with pytest.raises(ValueError):
        RetentionPolicy(max_age_ms=0)
