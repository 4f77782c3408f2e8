"""Records appended together (MessageStore.append_many, a confirmed publish group) land on disk exactly as the
same records appended one by one, and are settled together: one on_durable after the commit, or one on_failed
when the write fails."""

from __future__ import annotations

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
