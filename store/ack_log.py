"""The ack log: per-queue state changes (delivered, acked), appended with the same group commit as records.

An ack-log file starts with a 24-byte header (like a segment's, magic AMQPDACK, the file's number) and
holds one frame per commit batch (sequence = batch number within the file), whose payload is a run of
13-byte entries: u8 kind | u32 queue_id | u64 offset. A checkpoint covers all files numbered below its
`ack_number`; those are deleted once the checkpoint is committed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from store.frame import ScanReport, scan_frames
from store.segment import ACK_MAGIC, FILE_HEADER_SIZE, header_intact

ENTRY = struct.Struct("<BIQ")
DELIVERED = 1
ACKED = 2


def entries(data: bytes, number: int, report: ScanReport) -> Iterator[tuple[int, int, int]]:
    """(kind, queue_id, offset) for every entry of every intact batch in one ack-log file's bytes. A bad
    file header is tolerated: the frames check themselves."""
    header_intact(data, ACK_MAGIC, number)  # raises on a newer format
    for _, _, payload in scan_frames(data, FILE_HEADER_SIZE, len(data), report):
        yield from ENTRY.iter_unpack(payload)
