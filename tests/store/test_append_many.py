"""Records appended together (MessageStore.append_many, a confirmed publish group) land on disk exactly as the
same records appended one by one, and are settled together: one on_durable after the commit, or one on_failed
when the write fails."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from store.queue_state import OffsetRuns
from tests.store.faulty_io import FailingIO

pytestmark = pytest.mark.anyio

RECORDS = [
    MessageRecord("", "q", b"\x00\x00", b"a" * 10, 1_700_000_000_000),
    MessageRecord("", "q", b"\x80\x00\x01", b"b" * 20, 1_700_000_000_001, 4_000_000_000_000),
    MessageRecord("ex", "other key", b"\x00\x00", b"c", 1_700_000_000_002),  # names change mid-group
    MessageRecord("", "q", b"\x00\x00", b"", 1_700_000_000_003),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fixed_clock() -> int:
    return 1_700_000_000_000 * 1_000_000


async def _segments_after(path: Path, together: bool, segment_size: int) -> tuple[list[bytes], list[int]]:
    store = MessageStore(path, clock=fixed_clock, segment_size=segment_size, fsync="none")
    await store.open()
    q1, q2 = store.put_queue("/", "q1", False, {}), store.put_queue("/", "q2", False, {})
    if together:
        first = store.append_many(RECORDS, [q1, q2])
        offsets = list(range(first, first + len(RECORDS)))
    else:
        offsets = [store.append(record, [q1, q2]) for record in RECORDS]
    await store.close()
    return [f.read_bytes() for f in sorted(path.rglob("*.seg"))], offsets


@pytest.mark.parametrize("segment_size", [1 << 20, 100], ids=["one segment", "a new segment mid-group"])
async def test_records_appended_together_are_the_bytes_of_records_appended_one_by_one(
    tmp_path: Path, segment_size: int
) -> None:
    one = await _segments_after(tmp_path / "one", False, segment_size)
    together = await _segments_after(tmp_path / "together", True, segment_size)
    assert together == one
    assert len(one[0]) == (1 if segment_size > 1000 else len(RECORDS))  # a segment per record


async def test_records_appended_together_come_back_held_by_their_queues_after_a_restart(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    queue = store.put_queue("/", "log", False, {})
    store.hold_as_runs(queue)
    store.append(RECORDS[0], [queue])
    store.append_many(RECORDS[1:], [queue])
    await store.close()
    store = MessageStore(tmp_path, fsync="none")
    recovered = await store.open()
    (entry,) = recovered.queues
    assert [(m.offset, m.record) for m in entry.messages] == list(enumerate(RECORDS))
    await store.close()


async def test_a_group_is_settled_once_after_its_commit(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    queue = store.put_queue("/", "q", False, {})
    settled: list[str] = []
    store.append_many(RECORDS, [queue], lambda: settled.append("durable"), lambda: settled.append("failed"))
    assert settled == []
    await store.flush()
    assert settled == ["durable"]
    await store.close()


async def test_a_group_the_store_could_not_write_fails_once(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync="none", io=FailingIO(fail_write=2))  # the file header, then the group
    await store.open()
    queue = store.put_queue("/", "q", False, {})
    settled: list[str] = []
    store.append_many(RECORDS, [queue], lambda: settled.append("durable"), lambda: settled.append("failed"))
    await store.flush()
    assert settled == ["failed"]
    assert [store.read(offset) for offset in range(len(RECORDS))] == RECORDS  # still readable, from memory
    await store.close()


def test_a_range_before_the_last_offset_held_is_refused() -> None:
    runs = OffsetRuns([5])
    with pytest.raises(ValueError):
        runs.append_range(5, 7)


async def _files_after(path: Path, groups: list[list[MessageRecord]], together: bool, segment_size: int) -> dict:
    store = MessageStore(path, clock=fixed_clock, segment_size=segment_size, fsync="none")
    await store.open()
    queue = store.put_queue("/", "q", False, {})
    for group in groups:
        if together:
            store.append_many(group, [queue])
        else:
            for record in group:
                store.append(record, [queue])
    await store.close()
    return {f.name: f.read_bytes() for f in sorted((path / "segments").iterdir())}


@pytest.mark.parametrize("segment_size", [1 << 20, 20_000], ids=["one segment", "new segments mid-group"])
async def test_groups_of_many_records_leave_the_segments_and_their_indexes_of_records_appended_one_by_one(
    tmp_path: Path, segment_size: int
) -> None:
    """Groups that fit in the active segment are laid out in one step (append_frames, observe_run): the
    frames and the offset and time index entries (every 4 KiB, with the newest timestamp up to each, the
    timestamps here out of order) must be those of one append at a time."""
    rng = random.Random(16)
    groups = [
        [
            MessageRecord("", "q", b"\x00\x00", b"x" * rng.randrange(0, 700), 1_700_000_000_000 + rng.randrange(10**6))
            for _ in range(rng.randrange(1, 120))
        ]
        for _ in range(12)
    ]
    one = await _files_after(tmp_path / "one", groups, False, segment_size)
    together = await _files_after(tmp_path / "together", groups, True, segment_size)
    assert together == one
    assert max(len(data) for name, data in one.items() if name.endswith(".idx")) >= 24 + 3 * 8  # 3+ entries
