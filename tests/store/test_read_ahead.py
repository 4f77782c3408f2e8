"""Reading ahead (store/read_ahead.py): a worker reads the file stretches that hold a queue's next records,
and read_many then decodes them on the loop without reading the file again, even from a segment shared with
a busy queue (the stretches are the index intervals around each wanted record, not the whole span)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import MessageRecord, MessageStore
from store.commit import FileIO

pytestmark = pytest.mark.anyio


class CountingIO(FileIO):
    def __init__(self) -> None:
        self.read_bytes = 0
        self.preads = 0

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        data = super().pread(fd, size, pos)
        self.preads += 1
        self.read_bytes += len(data)
        return data


async def test_records_read_ahead_are_decoded_without_reading_the_file_again(tmp_path: Path) -> None:
    io = CountingIO()
    store = MessageStore(tmp_path, fsync="none", io=io, segment_size=4 << 20)
    await store.open()
    quiet, busy = store.put_queue("/", "quiet", False, {}), store.put_queue("/", "busy", False, {})
    wanted = []
    for n in range(3000):  # several segments, the quiet queue's records far apart in them
        if n % 50 == 0:
            wanted.append(store.append(MessageRecord("", "quiet", b"", b"q%d" % n, 1), [quiet]))
        else:
            store.append(MessageRecord("", "busy", b"", b"b" * 5_000, 1), [busy])
    await store.flush()
    late = store.append(MessageRecord("", "quiet", b"", b"late", 1), [quiet])  # not written when planned
    read = store.read_ahead([*wanted, late])  # planned on the loop...
    ahead = read()  # ...run (here, in this thread) as the worker would
    await store.flush()
    segments = len(list((tmp_path / "segments").glob("*.seg")))
    size = sum(p.stat().st_size for p in (tmp_path / "segments").glob("*.seg"))
    assert segments > 1
    assert 0 < io.read_bytes < size // 10  # only the intervals around the wanted records
    before = io.preads
    records = store.read_many(wanted, ahead)
    assert [r.body for r in records if r is not None] == [b"q%d" % (i * 50) for i in range(60)]
    assert io.preads == before  # all of it from memory
    assert [r.body for r in store.read_many([late], ahead) if r is not None] == [b"late"]  # from the file
    await store.close()
