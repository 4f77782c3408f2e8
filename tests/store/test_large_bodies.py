"""Large bodies in the store: written to the segment as the record holds them (no copy into the batch), on
disk exactly as FORMAT.md says (the same frame as a joined payload), whole after writes that the kernel cuts
short or spreads over several writev calls, and every confirmed one back intact after a power cut.
(A broker-level kill -9 with 16 MiB bodies: tests/integration/test_durability.py.)"""

from __future__ import annotations

import itertools
import os
import random
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from store import MessageRecord, MessageStore, Recovered, commit
from store.file_io import FileIO
from store.frame import Frames, ScanReport, append_frame, append_frame_apart, scan_frames
from store.segment_log import BODY_APART
from tests.store.faulty_io import RecordingIO
from tests.store.test_power_loss import problems_after_cut, torn_tails

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


def record(body: bytes, stamp: int = 1_700_000_000_000) -> MessageRecord:
    return MessageRecord("amq.direct", "big", b"\x80\x00\x02", body, stamp)


@asynccontextmanager
async def opened(store: MessageStore) -> AsyncIterator[Recovered]:
    """The store open, closed after (aborted if the test failed: its worker threads must not outlive it)."""
    recovered = await store.open()
    try:
        yield recovered
    except BaseException:
        await store.abort()
        raise
    await store.close()


class SegmentWrites(FileIO):
    """The seam, keeping every buffer handed to a write of a segment file (not copies: the objects)."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.written: list[object] = []

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        fd = super().open(path, flags)
        self.paths[fd] = str(path)
        return fd

    def write(self, fd: int, data: memoryview) -> int:
        if self.paths.get(fd, "").endswith(".seg"):
            self.written.append(data.obj)
        return super().write(fd, data)

    def writev(self, fd: int, buffers: list[memoryview]) -> int:
        if self.paths.get(fd, "").endswith(".seg"):
            self.written += [b.obj for b in buffers]
        return super().writev(fd, buffers)


@pytest.mark.parametrize("size", [BODY_APART - 1, BODY_APART, 3 * MIB + 5])
def test_a_frame_with_its_body_apart_is_the_frame_of_the_joined_payload(size: int) -> None:
    head, body = b"head:" * 7, os.urandom(size)
    joined = bytearray()
    append_frame(joined, 42, head + body)
    apart = Frames()
    apart += b"before"
    assert append_frame_apart(apart, 42, head, body) == len(joined)
    apart += b"after"
    assert apart.joined() == b"before" + joined + b"after"
    assert len(apart) == len(apart.joined())
    assert any(buffer is body for buffer in apart.buffers)  # kept, not copied
    (found,) = scan_frames(joined, 0, len(joined), ScanReport())
    assert found[1:] == (42, head + body)


def test_a_body_that_could_change_before_the_write_is_copied_when_kept() -> None:
    body = bytearray(b"b" * BODY_APART)
    frames = Frames()
    # A view of someone's buffer (a bytearray body is kept as it is: the frame reader's, never changed)
    append_frame_apart(frames, 1, b"head", memoryview(body))  # type: ignore[arg-type]
    written = frames.joined()
    body[:4] = b"XXXX"
    assert frames.joined() == written
    (found,) = scan_frames(written, 0, len(written), ScanReport())
    assert found[2] == b"head" + b"b" * BODY_APART


async def test_a_large_body_goes_to_the_segment_file_as_the_record_holds_it(tmp_path: Path) -> None:
    io = SegmentWrites()
    store = MessageStore(tmp_path, io=io)
    async with opened(store):
        qid = store.put_queue("/", "big", False, {})
        body = os.urandom(4 * MIB)
        small = os.urandom(BODY_APART // 2)
        tracemalloc.start()
        try:
            store.append(record(body), [qid])
            buffered = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # Encoding the record and laying it into the batch allocates its other fields, not another body.
        assert buffered < len(body) // 4, f"{buffered} bytes allocated to buffer a {len(body)}-byte body"
        offset = store.append(record(small), [qid])
        await store.flush()
        assert any(buffer is body for buffer in io.written), "the body was copied before it was written"
        copied = sum(len(b) for b in io.written if b is not body)  # type: ignore[arg-type]
        assert len(small) < copied < len(small) + 4096  # the small one is copied into the batch's frames
        assert [r.body for _, r in store.read_range(offset - 1, 2)] == [body, small]


class ShortWrites(FileIO):
    """A kernel that writes at most `most` bytes per call; checks that no writev is given over IOV_MAX buffers."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.widest = 0
        self.calls = 0

    def write(self, fd: int, data: memoryview) -> int:
        return super().write(fd, data[: self.most])

    def writev(self, fd: int, buffers: list[memoryview]) -> int:
        self.widest = max(self.widest, len(buffers))
        self.calls += 1
        taken, room = [], self.most
        for buffer in buffers:
            if room <= 0:
                break
            taken.append(buffer[:room])
            room -= len(taken[-1])
        return super().writev(fd, taken)


async def test_large_bodies_come_back_whole_after_short_writes_and_a_narrow_iov_max(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit, "IOV_MAX", 3)
    io = ShortWrites(most=100_000)
    rng = random.Random(7)
    bodies = [rng.randbytes(rng.choice([10, BODY_APART + n, 300_001 + n])) for n in range(12)]
    store = MessageStore(tmp_path, io=io)
    async with opened(store):
        qid = store.put_queue("/", "big", False, {})
        first = store.append(record(bodies[0]), [qid])
        store.append_many([record(b) for b in bodies[1:6]], [qid])
        for body in bodies[6:]:
            store.append(record(body), [qid])
        await store.flush()
    assert io.widest == 3 and io.calls > 3
    store = MessageStore(tmp_path)
    async with opened(store) as recovered:
        assert [m.record.body for m in recovered.queues[0].messages] == bodies
        assert [r.body for _, r in store.read_range(first, len(bodies))] == bodies


async def test_every_confirmed_large_body_survives_a_power_cut_intact(tmp_path: Path) -> None:
    """Cuts at random I/O events of a workload of large and small bodies (segments rolled, a checkpoint), as
    synced and with torn tails: each confirmed, unacked body comes back byte for byte, once."""
    root = tmp_path / "live"
    rng = random.Random(11)
    io = RecordingIO(root, cut_at=set(rng.sample(range(1, 120), 40)))
    store = MessageStore(root, segment_size=MIB, checkpoint_bytes=MIB + MIB // 2, fsync="always-batched", io=io)
    await store.open()
    qid = store.put_queue("/", "big", False, {})
    confirmed: dict[bytes, int] = {}
    acked: dict[bytes, int] = {}
    offsets: dict[bytes, int] = {}

    def durable(body: bytes) -> None:
        confirmed[body] = io.events
        if len(confirmed) % 4 == 0:
            acked[body] = io.events
            store.ack(qid, offsets[body])

    stamps = itertools.count(1_700_000_000_000)  # the time index is checked: one timestamp per record

    for n in range(14):
        sizes = [rng.choice([100, BODY_APART, 200_000, 400_000]) + n for _ in range(rng.randint(1, 3))]
        burst = [b"%02d" % n + rng.randbytes(size) for size in sizes]
        if n % 3 == 0:
            records = [record(b, next(stamps)) for b in burst]
            first = store.append_many(records, [qid], lambda burst=burst: [durable(b) for b in burst])
            offsets.update((body, first + i) for i, body in enumerate(burst))
        else:
            for body in burst:
                offsets[body] = store.append(record(body, next(stamps)), [qid], lambda body=body: durable(body))
        await store.flush()
    await store.abort()
    assert len(confirmed) > 14 and len(io.snapshots) > 30, io.events
    found: list[str] = []
    for snapshot in io.snapshots:
        found += await problems_after_cut(snapshot, root, tmp_path / "cut", confirmed, acked, None)
        found += await problems_after_cut(snapshot, root, tmp_path / "cut", confirmed, acked, torn_tails(snapshot, rng))
    assert not found, found[:5]
