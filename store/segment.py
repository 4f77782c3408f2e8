"""Segment files: where they live, their header, and finding one record in them.

A segment is an append-only file named by the offset of its first record (its base offset), starting with
a 24-byte header (magic, format version, base offset) followed by frames (see frame.py) whose sequence
number is the record's offset and whose payload is an encoded record (record_codec.py).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate, islice
from pathlib import Path

from xxhash import xxh3_64_intdigest, xxh32_intdigest

from store.checked_runs import CheckedRuns
from store.frame import HEADER, HEADER_SIZE
from store.segment_index import SegmentIndex

SEGMENT_HEADER = struct.Struct("<8sHHIQ")  # magic, version, reserved, reserved, base offset
SEGMENT_MAGIC = b"AMQPDSEG"
ACK_MAGIC = b"AMQPDACK"
FORMAT_VERSION = 1
FILE_HEADER_SIZE = SEGMENT_HEADER.size  # 24, for segments and ack logs alike
READ_BLOCK = 16384


class UnsupportedFormat(Exception):
    """A file written by a newer (or unknown) version of the store: refuse rather than misread it."""


class Layout:
    """Paths inside a data directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.segments = self.root / "segments"
        self.acklog = self.root / "acklog"
        self.catalog = self.root / "catalog.sqlite"

    def create_dirs(self) -> None:
        for path in (self.root, self.segments, self.acklog):
            path.mkdir(parents=True, exist_ok=True)

    def segment(self, base: int) -> Path:
        return self.segments / f"{base:020d}.seg"

    def offset_index(self, base: int) -> Path:
        return self.segments / f"{base:020d}.idx"

    def time_index(self, base: int) -> Path:
        return self.segments / f"{base:020d}.tix"

    def ack_file(self, number: int) -> Path:
        return self.acklog / f"{number:020d}.ack"

    def segment_bases(self) -> list[int]:
        return sorted(int(p.stem) for p in self.segments.glob("*.seg") if p.stem.isdigit())

    def ack_numbers(self) -> list[int]:
        return sorted(int(p.stem) for p in self.acklog.glob("*.ack") if p.stem.isdigit())


def file_header(magic: bytes, number: int) -> bytes:
    return SEGMENT_HEADER.pack(magic, FORMAT_VERSION, 0, 0, number)


def header_intact(data: bytes, magic: bytes, number: int) -> bool:
    """Whether `data` starts with a good header for this file. A recognisable header of another version
    raises: reading it as ours could silently lose messages."""
    if len(data) < FILE_HEADER_SIZE:
        return False
    got_magic, version, _, _, got_number = SEGMENT_HEADER.unpack_from(data, 0)
    if got_magic == magic and version != FORMAT_VERSION:
        raise UnsupportedFormat(f"{magic.decode()} format version {version}; this store reads {FORMAT_VERSION}")
    return got_magic == magic and got_number == number


class DamagedFrame(Exception):
    """A frame failed its checks on the way to a record (damage, or a wrong index entry)."""


def read_payload(
    fd: int, index: SegmentIndex, offset: int, pread: Callable[[int, int, int], bytes] = os.pread
) -> bytes | None:
    """The payload of record `offset`, walking from the nearest index entry; None if the segment does not
    hold it. Raises DamagedFrame if a frame on the way fails its checks (the caller may scan instead)."""
    return read_payloads(fd, index, [offset], READ_BLOCK, pread)[0]


READ_RUN_BLOCK = 1 << 20


# Runs of at least ALIKE_MIN wanted frames of one size, one after the other, are checked by _alike_frames, at
# most ALIKE_RUN at a time (a stream of mixed sizes finds out early, at a small cost).
ALIKE_MIN = 8
ALIKE_RUN = 128
_CUTS: dict[tuple[str, int, int], struct.Struct] = {}  # by (kind, payload length, frames)
_CUTS_KEPT = 256


def _cut(kind: str, length: int, count: int) -> struct.Struct:
    """A Struct for `count` frames of `length`-byte payloads at once: "frames", each frame's header bytes
    before its check, the check and the payload; "payloads", the payloads alone; "prefixes", the fields of
    `count` such header bytes joined. Kept by shape: a stream of fixed-size records reads a few shapes."""
    key = (kind, length, count)
    cut = _CUTS.get(key)
    if cut is None:
        if len(_CUTS) >= _CUTS_KEPT:
            _CUTS.clear()
        one = {"frames": f"20sI{length}s", "payloads": f"{HEADER_SIZE}x{length}s", "prefixes": "IQQ"}[kind]
        cut = _CUTS[key] = struct.Struct("<" + one * count)
    return cut


def _walk_next(
    block: bytes,
    at: tuple[int, int],
    offsets: list[int],
    want: Iterator[int],
    target: int,
    found: list[bytes | None],
    checked: CheckedRuns,
) -> tuple[int, int]:
    """read_payloads' inner loop for wanted records that are the next frames of the block (a stream reads
    runs): (where it stopped in the block, the next wanted offset, -1 when all are found). It stops at
    anything else (a gap, a frame past the block, a bad header) for the general walk to take over.
    `at`: (the block's position in the file, where to start in it). `offsets[len(found)]` is `target`, and
    `want` yields the ones after it. Runs of one size are checked many at once and noted in `checked`; a
    run noted there before is cut out without its checks."""
    block_start, rel = at
    size = len(block)
    unpack = HEADER.unpack_from
    while rel + HEADER_SIZE <= size:  # frames of one size (a publisher's fixed-size messages), many at once
        i = len(found)
        run = checked.find(block_start + rel, target)
        length, left = run if run is not None else (unpack(block, rel)[0], ALIKE_RUN)
        stride = HEADER_SIZE + length
        k = min(left, len(offsets) - i, (size - rel) // stride)
        last = target + k - 1
        if run is not None and k and offsets[i + k - 1] == last:
            found += _cut("payloads", length, k).unpack_from(block, rel)
        else:
            if (
                k >= ALIKE_MIN
                and offsets[i + k - 1] == last
                and unpack(block, rel + (k - 1) * stride)[:2] != (length, last)
            ):
                k = _alike_count(block, rel, length, target, k)  # wanted, one after the other: as many of one size
                last = target + k - 1
            if k < ALIKE_MIN or offsets[i + k - 1] != last:
                break
            payloads = _alike_frames(block, rel, length, target, k)
            if payloads is None:
                break  # damage among them: the walk below finds where
            checked.add(block_start + rel, target, k, length)
            found += payloads
        rel += k * stride
        target = next(islice(want, k - 1, None), -1)
        if target != last + 1:
            return rel, target
    rel, target = _cut_stretch(block, (block_start, rel), want, target, found, checked)
    if target < 0 or rel + HEADER_SIZE > size:
        return rel, target
    begin, first, lengths = rel, target, array("I")
    while rel + HEADER_SIZE <= size:
        length, sequence, payload_hash, check = unpack(block, rel)
        stop = rel + HEADER_SIZE + length
        if sequence != target or stop > size or xxh32_intdigest(block[rel : rel + 20]) != check:
            break
        payload = block[rel + HEADER_SIZE : stop]
        if xxh3_64_intdigest(payload) != payload_hash:
            raise DamagedFrame(f"record {sequence} fails its checksum")
        found.append(payload)
        lengths.append(length)
        target = next(want, -1)
        rel = stop
        if target != sequence + 1:
            break
    if lengths:  # frames of many sizes, checked one after the other: a stretch (checked_runs.py)
        checked.add_stretch(block_start + begin, first, lengths)
    return rel, target


def _cut_stretch(
    block: bytes, at: tuple[int, int], want: Iterator[int], target: int, found: list[bytes | None], checked: CheckedRuns
) -> tuple[int, int]:
    """_walk_next's frames of many sizes that an earlier read checked (a stretch, checked_runs.py) from
    block[rel:]: cut out without their checks, up to the block's end or a gap in the wanted offsets. (Where
    it stopped in the block, the next wanted offset.)"""
    block_start, rel = at
    piece = checked.stretch(target, (len(block) - rel) // HEADER_SIZE + 1)  # (no more than the block holds)
    if piece is None or piece[0] != block_start + rel:
        return rel, target
    size = len(block)
    for length in piece[1]:
        stop = rel + HEADER_SIZE + length
        if stop > size:
            break
        found.append(block[rel + HEADER_SIZE : stop])
        rel, sequence, target = stop, target, next(want, -1)
        if target != sequence + 1:
            break
    return rel, target


def _alike_count(block: bytes, rel: int, length: int, first: int, count: int) -> int:
    """How many of `count` frames from block[rel:] look like a run of `length`-byte payloads for records
    first, first + 1, … : the last frame whose header, at its place in such a run, holds that length and
    sequence (a binary search: a run that changes size part way, as where a publisher's sizes change, is
    checked up to there instead of frame by frame). _alike_frames then checks them all."""
    stride = HEADER_SIZE + length
    low, high = 1, count  # the first one is where the run starts
    while low < high:
        mid = (low + high + 1) // 2
        if HEADER.unpack_from(block, rel + (mid - 1) * stride)[:2] == (length, first + mid - 1):
            low = mid
        else:
            high = mid - 1
    return low


def _alike_frames(block: bytes, rel: int, length: int, first: int, count: int) -> tuple[bytes, ...] | None:
    """The payloads of `count` frames of `length` bytes each from block[rel:], for records first, first + 1, …
    — when every one passes the checks the walk makes (its header's own checksum; the length, sequence and
    payload hash in it), else None. The checks are done over all of them together: one Struct cuts the
    frames, another reads the header fields of all of them, and each check compares whole tuples instead
    of taking a Python step per frame."""
    flat = _cut("frames", length, count).unpack_from(block, rel)
    heads, payloads = flat[0::3], flat[2::3]
    if tuple(map(xxh32_intdigest, heads)) != flat[1::3]:
        return None  # damage somewhere among them: the walk finds where
    fields = _cut("prefixes", 0, count).unpack(b"".join(heads))
    if (
        fields[0::3] != (length,) * count
        or fields[1::3] != tuple(range(first, first + count))
        or fields[2::3] != tuple(map(xxh3_64_intdigest, payloads))
    ):
        return None
    return payloads


def read_payloads(
    fd: int,
    index: SegmentIndex,
    offsets: list[int],
    block_size: int = READ_RUN_BLOCK,
    pread: Callable[[int, int, int], bytes] = os.pread,
) -> list[bytes | None]:
    """Payloads of ascending `offsets` of one segment (None for an offset the segment does not hold), reading
    `block_size` bytes at a time and walking forward frame by frame; where the index has an entry between
    the position reached and the next wanted record (other queues' records in between), it jumps there
    instead of walking. Raises DamagedFrame if a frame on the way fails its checks (the caller may scan
    instead). `pread`: os.pread (tests count the bytes read)."""
    found: list[bytes | None] = []
    pos, expected_first = FILE_HEADER_SIZE, None
    block, block_start = b"", pos
    want = iter(offsets)
    target = next(want)
    jump = index.floor(target)
    jumped = False
    # Every wanted record ends before the index entry after the last one: no read goes past it (a stream
    # reads ~100 records per step; a whole block each time copied megabytes for kilobytes).
    stop = index.after(offsets[-1])
    while True:
        if jump is not None and jump[1] > pos:
            pos, expected_first, jumped = jump[1], jump[0], True
        jump = None
        rel = pos - block_start
        if rel < 0 or rel + HEADER_SIZE > len(block):
            # After a jump the target is within an index interval: a small read. Walking: big blocks.
            size = min(READ_BLOCK, block_size) if jumped else block_size
            if stop is not None:  # never under READ_BLOCK: a damaged index must not end a read early
                size = min(size, max(stop - pos, READ_BLOCK))
            block, block_start, rel, jumped = pread(fd, size, pos), pos, 0, False
            if len(block) < HEADER_SIZE:
                break  # end of file: the rest are not here
        length, sequence, payload_hash, check = HEADER.unpack_from(block, rel)
        if xxh32_intdigest(block[rel : rel + 20]) != check:
            raise DamagedFrame(f"bad frame header at {pos} while reading from {offsets[0]}")
        if expected_first is not None and sequence != expected_first:
            raise DamagedFrame(f"index entry for {expected_first} points at record {sequence}")
        expected_first = None
        while sequence > target:  # offsets may have gaps: these are not here
            found.append(None)
            target = next(want, -1)
            if target < 0:
                return found
            jump = index.floor(target)
        if sequence == target:
            start = rel + HEADER_SIZE
            payload = block[start : start + length]
            if len(payload) < length:
                payload = pread(fd, length, pos + HEADER_SIZE)
            if xxh3_64_intdigest(payload) != payload_hash:
                raise DamagedFrame(f"record {sequence} fails its checksum")
            index.checked.add(pos, sequence, 1, length, join_only=True)  # a read's first frame, a block's
            index.checked.add_stretch(pos, sequence, array("I", [length]), join_only=True)
            found.append(payload)
            target = next(want, -1)
            if target < 0:
                return found
            if target != sequence + 1:  # the next one is the next frame: nothing to jump over
                jump = index.floor(target)
            else:
                rel = pos - block_start + HEADER_SIZE + length
                pos, target = _walk_next(block, (block_start, rel), offsets, want, target, found, index.checked)
                pos += block_start
                if target < 0:
                    return found
                jump = index.floor(target)  # past a gap, if it stopped at one
                continue
        pos += HEADER_SIZE + length
    found.extend([None] * (len(offsets) - len(found)))
    return found


_ONE_FRAME = array("I", [1, 0])  # (frames, payload length) of a run of one frame, its length set after


def _stretch_frames(checked: CheckedRuns, offset: int, count: int, budget: int) -> tuple[int, array[int], int] | None:
    """Record `offset` and up to count - 1 after it as frames of a stretch (checked_runs.py), stopping after
    the frame that takes their bytes to `budget` or past it: (where the first starts, a run of one frame for
    each as checked_frames gives them, where the last ends); None when it lies in no stretch. Made in bulk,
    without a Python step or object per frame."""
    count = min(count, budget // HEADER_SIZE + 1)  # (no more frames than the budget can reach)
    found = checked.stretch(offset, count)
    if found is None:
        return None
    position, lengths = found
    ends = list(accumulate(map(HEADER_SIZE.__add__, lengths)))  # the bytes up to each frame's end
    k = min(bisect_left(ends, budget) + 1, len(ends))
    runs = _ONE_FRAME * k
    runs[1::2] = lengths[:k]
    return position, runs, position + ends[k - 1]


def checked_frames(
    fd: int,
    checked: CheckedRuns,
    offset: int,
    count: int,
    budget: int,
    pread: Callable[[int, int, int], bytes] = os.pread,
) -> tuple[array[int], bytes, int]:
    """Records offset … offset + count - 1, or the first of them, as their frames' bytes as they lie in the
    segment (headers and all) with one pread, as far as they lie in runs that a read has checked (see
    checked_runs.py): (frames, payload length of each run in order, one after the other; the bytes; 0). It
    stops at the first record not in a checked run, and after the frame that takes the bytes to `budget` or
    past it. When the first is not in one: (empty, b"", how many of the count from it on are in none)."""
    runs = array("I")
    begin = end = -1
    got = 0
    while got < count and end - begin < budget:
        found = checked.locate(offset + got)
        if found is None:
            piece = _stretch_frames(checked, offset + got, count - got, budget - max(end - begin, 0))
            if piece is None or (runs and piece[0] != end):
                break
            if not runs:
                begin = piece[0]
            runs += piece[1]
            got += len(piece[1]) // 2
            end = piece[2]
            continue
        if runs and found[0] != end:  # not the next frame (never seen)
            break
        position, length, left = found
        stride = HEADER_SIZE + length
        k = min(left, count - got, -(-(budget - max(end - begin, 0)) // stride))
        if not runs:
            begin = position
        runs += array("I", (k, length))
        got += k
        end = position + k * stride
    if not runs:
        return runs, b"", min(count, checked.unchecked(offset) or count)
    data = pread(fd, end - begin, begin)
    if len(data) != end - begin:  # the file is shorter than the runs say: not to be trusted, read as usual
        return array("I"), b"", count
    return runs, data, 0
