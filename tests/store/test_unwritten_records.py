"""Records appended while a batch is in its fsync are read back from memory until their own batch is written,
and the batch's from disk once it is (SegmentLog.drop_unwritten: the batch's records leave the in-memory map,
by clearing it or by copying those appended behind them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from tests.store.faulty_io import WorkDuringFsync

pytestmark = pytest.mark.anyio

BATCH = 8  # records in the batch that is in its fsync


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _record(name: str) -> MessageRecord:
    return MessageRecord("", "rk", b"", name.encode(), 1_700_000_000_000)


@pytest.mark.parametrize("behind", [0, 3, BATCH, 20])
async def test_records_appended_during_an_fsync_read_back_before_and_after_theirs(tmp_path: Path, behind: int) -> None:
    """`behind` records appended, one by one and as a group, while a batch of BATCH is in its fsync: none,
    fewer, as many and more than the batch holds."""
    io = WorkDuringFsync()
    store = MessageStore(tmp_path, io=io)
    await store.open()
    q = store.put_queue("/", "q", False, {})
    first = store.append_many([_record(f"a{i}") for i in range(BATCH)], [q])
    names = [f"a{i}" for i in range(BATCH)]

    def append_behind() -> None:
        ones = behind // 2
        for i in range(ones):
            store.append(_record(f"b{i}"), [q])
        if behind > ones:
            store.append_many([_record(f"b{i}") for i in range(ones, behind)], [q])

    names += [f"b{i}" for i in range(behind)]
    io.arm(append_behind)
    await store.flush()  # the first batch is written; what was appended behind it is not
    offsets = list(range(first, first + len(names)))
    assert store.durable_end() == first + BATCH
    assert [r.body.decode() if r else None for r in store.read_many(offsets)] == names

    store.append(_record("c"), [q])
    await store.flush()
    assert [r.body.decode() if r else None for r in store.read_many([*offsets, offsets[-1] + 1])] == [*names, "c"]
    await store.close()

    reopened = MessageStore(tmp_path)
    recovered = await reopened.open()
    await reopened.close()
    assert [m.record.body.decode() for qe in recovered.queues for m in qe.messages] == [*names, "c"]
