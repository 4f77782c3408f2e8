"""Checksummed frames: the unit written to segment files and to the ack log.

A frame is a 24-byte header followed by its payload (all integers little-endian):

    u32 payload_length | u64 sequence | u64 xxh3_64(payload) | u32 xxh32(the 20 header bytes before it)

The header carries its own checksum so that a damaged length is caught before it is trusted. With a good
header and a bad payload we skip exactly that frame; with a bad header we search forward, byte by byte, for
the next frame whose header and payload both check out ("resync"). Damage with no good frame after it is a
torn tail: the caller truncates there.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, count
from typing import Protocol, Self

from xxhash import xxh3_64, xxh3_64_intdigest, xxh32_intdigest

PREFIX = struct.Struct("<IQQ")
HEADER = struct.Struct("<IQQI")
HEADER_SIZE = HEADER.size  # 24
_CHECK = struct.Struct("<I")

Buffer = bytes | bytearray | memoryview | mmap.mmap


class FrameOut(Protocol):
    """Where frames are appended: a bytearray, or Frames."""

    def __iadd__(self, data: bytes, /) -> Self: ...


class Frames:
    """Frames for one file, in order, as a list of buffers to write with one writev: small frames packed into
    bytearrays, and a large payload's tail (a message body) kept as the caller's own immutable buffer instead
    of copied in (`keep`). `+=` appends bytes to the packed part, as to a bytearray."""

    __slots__ = ("buffers", "_packed", "_held")

    def __init__(self) -> None:
        self._packed = bytearray()
        self.buffers: list[bytes | bytearray] = [self._packed]
        self._held = 0  # bytes in the buffers before _packed

    def __iadd__(self, data: bytes | bytearray) -> Frames:
        self._packed += data
        return self

    def __len__(self) -> int:
        return self._held + len(self._packed)

    def keep(self, data: bytes | bytearray) -> None:
        """Append `data` as a buffer of its own, not copied: bytes, or a bytearray (a message body the frame
        reader filled, never changed once published); any other buffer is copied, as it might change before
        the write."""
        if type(data) is not bytes and type(data) is not bytearray:
            data = bytes(data)
        self._held += len(self._packed) + len(data)
        self._packed = bytearray()
        self.buffers += (data, self._packed)

    def joined(self) -> bytes:
        """All of it as one buffer (a copy: for the rare paths, such as reading back a failed batch)."""
        return b"".join(self.buffers)


def append_frame(out: FrameOut, sequence: int, payload: bytes) -> int:
    """Append one frame to `out`; return its size on disk."""
    prefix = PREFIX.pack(len(payload), sequence, xxh3_64_intdigest(payload))
    out += prefix
    out += _CHECK.pack(xxh32_intdigest(prefix))
    out += payload
    return HEADER_SIZE + len(payload)


def append_frame_apart(out: Frames, sequence: int, head: bytes, tail: bytes) -> int:
    """append_frame of the payload head + tail with `tail` kept apart (Frames.keep), never joined: the frame
    on disk is the same, its checksum taken over the same bytes in one streaming pass."""
    digest = xxh3_64(head)
    digest.update(tail)
    prefix = PREFIX.pack(len(head) + len(tail), sequence, digest.intdigest())
    out += prefix
    out += _CHECK.pack(xxh32_intdigest(prefix))
    out += head
    out.keep(tail)
    return HEADER_SIZE + len(head) + len(tail)


def append_frames(out: FrameOut, first_sequence: int, payloads: list[bytes]) -> int:
    """append_frame for each payload, with sequences from first_sequence on, in one step: each part of the
    frames is made by a map over all of them, not a Python step per frame. Their size on disk."""
    prefixes = list(map(PREFIX.pack, map(len, payloads), count(first_sequence), map(xxh3_64_intdigest, payloads)))
    checks = map(_CHECK.pack, map(xxh32_intdigest, prefixes))
    data = b"".join(chain.from_iterable(zip(prefixes, checks, payloads, strict=True)))
    out += data
    return len(data)


def header_at(data: Buffer, pos: int, end: int) -> tuple[int, int, int] | None:
    """(sequence, payload_length, payload_hash) if a self-consistent header that fits before `end` starts
    at `pos`, else None."""
    if pos + HEADER_SIZE > end:
        return None
    length, sequence, payload_hash, check = HEADER.unpack_from(data, pos)
    if pos + HEADER_SIZE + length > end:
        return None
    if xxh32_intdigest(bytes(data[pos : pos + 20])) != check:
        return None
    return sequence, length, payload_hash


@dataclass
class ScanReport:
    """What a scan found, beyond the frames it yielded."""

    valid_end: int = 0  # position just past the last intact frame (where a torn tail starts)
    corrupt_frames: int = 0  # damaged frames or regions that had an intact frame after them
    corrupt_bytes: int = 0
    torn_bytes: int = 0  # bytes after the last intact frame


def scan_frames(data: Buffer, start: int, end: int, report: ScanReport) -> Iterator[tuple[int, int, bytes]]:
    """Yield (position, sequence, payload) for every intact frame in data[start:end], in order.

    Sequences must increase strictly; a frame that does not is treated as damage. Damage followed by an
    intact frame is counted as corrupt; damage with nothing intact after it is counted as torn."""
    unpack = HEADER.unpack_from
    pos = start
    last_sequence = -1
    report.valid_end = start
    while pos < end:
        # The intact case inline: this loop is most of recovery's time.
        if pos + HEADER_SIZE <= end:
            length, sequence, payload_hash, check = unpack(data, pos)
            stop = pos + HEADER_SIZE + length
            if stop <= end and sequence > last_sequence and xxh32_intdigest(data[pos : pos + 20]) == check:
                payload = bytes(data[pos + HEADER_SIZE : stop])
                if xxh3_64_intdigest(payload) == payload_hash:
                    yield pos, sequence, payload
                    last_sequence, pos = sequence, stop
                    report.valid_end = pos
                    continue
                # The header is good, so its length is: skip exactly this frame, if anything intact follows.
                if _resync(data, stop, end, sequence) is None:
                    break
                _count_damage(report, pos, stop)
                last_sequence, pos = sequence, stop
                continue
        found = _resync(data, pos + 1, end, last_sequence)
        if found is None:
            break
        _count_damage(report, pos, found)
        pos = found
    report.torn_bytes = end - report.valid_end


def _count_damage(report: ScanReport, start: int, stop: int) -> None:
    report.corrupt_frames += 1
    report.corrupt_bytes += stop - start


def _frame_at(data: Buffer, pos: int, end: int, last_sequence: int) -> tuple[int, int, bytes, bool] | None:
    """(sequence, length, payload, payload_intact) for a frame with a good header at pos, else None."""
    header = header_at(data, pos, end)
    if header is None or header[0] <= last_sequence:
        return None
    sequence, length, payload_hash = header
    payload = bytes(data[pos + HEADER_SIZE : pos + HEADER_SIZE + length])
    return sequence, length, payload, xxh3_64_intdigest(payload) == payload_hash


def _resync(data: Buffer, pos: int, end: int, last_sequence: int) -> int | None:
    """Position of the next fully intact frame at or after pos, or None."""
    unpack = HEADER.unpack_from
    limit = end - HEADER_SIZE
    while pos <= limit:
        if data[pos] == 0:
            # Torn tails are often zero-filled: an all-zero header can't check out, so jump over the run
            # to the last position whose header would still include a non-zero byte.
            run_end = _zero_run_end(data, pos, end)
            if run_end - pos > HEADER_SIZE:
                pos = run_end - HEADER_SIZE + 1
                continue
        length, sequence, _, _ = unpack(data, pos)
        # Cheap plausibility tests first: most positions inside garbage fail them without hashing.
        if sequence > last_sequence and pos + HEADER_SIZE + length <= end:
            found = _frame_at(data, pos, end, last_sequence)
            if found is not None and found[3]:
                return pos
        pos += 1
    return None


def _zero_run_end(data: Buffer, pos: int, end: int) -> int:
    """First position at or after pos holding a non-zero byte (or end)."""
    while pos < end:
        chunk = bytes(data[pos : min(end, pos + 65536)])
        zeros = len(chunk) - len(chunk.lstrip(b"\0"))
        pos += zeros
        if zeros < len(chunk):
            return pos
    return end
