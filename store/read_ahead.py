"""Reading records' bytes ahead of need: in a worker thread, the file stretches that hold a set of records;
on the event loop, frames walked and records decoded from those bytes in memory.

The split is for the GIL: a pread releases it, so a worker doing little but preads leaves the loop alone,
while frame walking and decoding are Python work that would hold it against the loop (measured: decoding
in a worker nearly halved a drain's rate and doubled the loop's lag). The worker's only
Python is finding the stretches: per run of wanted records, the offset-index interval around each, merged.

A stretch starts at an index entry (a frame start) and ends at the next entry past its last wanted record
(a frame start too), or at the file's size when read: a walk from the index entry before any wanted record
to that record stays inside it. Anything asked for outside the stretches (a segment rewritten since, say)
is read from the file then: correct, only not ahead.

Records not written yet when the read-ahead is asked for (on the loop) are taken from the store's memory
then, into `held`: written between the asking and the decoding, they would be in the file but in no stretch,
and the decoding would read them on the loop.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING

from store.frame import HEADER_SIZE
from store.segment import FILE_HEADER_SIZE
from store.segment_index import SegmentIndex

if TYPE_CHECKING:
    from store.records import MessageRecord

Pread = Callable[[int, int, int], bytes]
MAX_STRETCH = 8 << 20  # bytes per pread: a huge merged stretch is read in pieces


def stretches_of(index: SegmentIndex, offsets: list[int], file_size: int) -> list[tuple[int, int]]:
    """Merged (start, stop) file positions of the index intervals holding these ascending offsets."""
    found: list[tuple[int, int]] = []
    rel_offsets, positions, base = index.rel_offsets, index.positions, index.base
    i = 0
    while i < len(offsets):
        k = bisect_right(rel_offsets, offsets[i] - base)  # the entry after the interval holding offsets[i]
        start = positions[k - 1] if k > 0 else FILE_HEADER_SIZE
        if k < len(positions):
            stop = positions[k]
            i = bisect_left(offsets, base + rel_offsets[k], i + 1)  # every wanted offset in this interval
        else:
            stop, i = file_size, len(offsets)
        if found and found[-1][1] >= start:
            found[-1] = (found[-1][0], max(stop, found[-1][1]))
        else:
            found.append((start, stop))
    return found


class SegmentBytes:
    """Stretches of one segment file read into memory; `pread` serves from them, the file otherwise."""

    __slots__ = ("starts", "blocks", "fallback", "open_end")

    def __init__(self, fallback: Pread) -> None:
        self.starts: list[int] = []
        self.blocks: list[bytes] = []
        self.fallback = fallback
        self.open_end = -1  # the piece that ends where the file ended: maybe mid-frame, if it was growing

    def read(self, fd: int, stretches: list[tuple[int, int]], file_size: int) -> None:
        """In the worker thread: read the stretches (in pieces of at most MAX_STRETCH)."""
        for start, stop in stretches:
            pos = start
            while pos < stop:
                block = self.fallback(fd, min(stop - pos, MAX_STRETCH), pos)
                if not block:
                    break
                self.starts.append(pos)
                self.blocks.append(block)
                pos += len(block)
            if stop >= file_size or pos < stop:
                self.open_end = len(self.blocks) - 1

    def pread(self, fd: int, size: int, pos: int) -> bytes:
        """Up to `size` bytes at `pos`: from a stretch holding `pos` (ending where the stretch ends, a frame
        boundary), else from the file."""
        starts, blocks = self.starts, self.blocks
        i = bisect_right(starts, pos) - 1
        if i < 0 or pos - starts[i] >= len(blocks[i]):
            return self.fallback(fd, size, pos)
        rel = pos - starts[i]
        data = blocks[i][rel : rel + size]
        # A stretch read in pieces: a piece's end is no frame boundary, so carry on into the next piece.
        while len(data) < size and i + 1 < len(starts) and starts[i + 1] == starts[i] + len(blocks[i]):
            i += 1
            data += blocks[i][: size - len(data)]
        if len(data) < HEADER_SIZE < size and i == self.open_end:
            # Where the file ended when it was read (it may have been growing): a walk needing a frame past
            # it reads the file. A payload cut there fails its checksum and read_many reads it alone.
            return self.fallback(fd, size, pos)
        return data


class ReadAhead:
    """What a worker read for a set of records: per segment base, its stretches in memory; and the records
    that were still only in memory when it was asked for."""

    __slots__ = ("segments", "held")

    def __init__(self, held: dict[int, MessageRecord] | None = None) -> None:
        self.segments: dict[int, SegmentBytes] = {}
        self.held: dict[int, MessageRecord] = held or {}

    def pread_for(self, base: int, fallback: Pread) -> Pread:
        found = self.segments.get(base)
        return found.pread if found is not None else fallback
