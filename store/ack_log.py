"""The ack log: per-queue state changes (delivered, acked), appended with the same group commit as records.

An ack-log file starts with a 24-byte header (like a segment's, magic AMQPDACK, the file's number) and
holds one frame per commit batch (sequence = batch number within the file), whose payload is a run of
13-byte entries: u8 kind | u32 queue_id | u64 offset. A checkpoint covers all files numbered below its
`ack_number`; those are deleted once the checkpoint is committed.

A batch that also appended records starts with a BATCH entry naming them (offset = the first, queue_id =
how many), and its ack-log frame is written before its records: a batch moves messages (a delayed message's
release, dead-lettering: a new record for the targets, an ack for the old holder), so recovery applies its
entries only if the batch's last record reached the log too. A batch cut by a crash is then undone whole
instead of leaving a message in both places (or, after a power cut, in neither).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from store.frame import ScanReport, scan_frames
from store.segment import ACK_MAGIC, FILE_HEADER_SIZE, header_intact

ENTRY = struct.Struct("<BIQ")
DELIVERED = 1
ACKED = 2
BATCH = 3


def batch_entry(first: int, end: int) -> bytes:
    """The entry that names the records [first, end) a batch appended."""
    return ENTRY.pack(BATCH, end - first, first)


def batches(data: bytes, number: int, report: ScanReport) -> Iterator[tuple[int, int, list[tuple[int, int, int]]]]:
    """(first, end, entries) for every intact batch in one ack-log file's bytes: the records [first, end) the
    batch appended (first == end: none, or a file written before batches named them) and its (kind,
    queue_id, offset) entries. A bad file header is tolerated: the frames check themselves."""
    header_intact(data, ACK_MAGIC, number)  # raises on a newer format
    for _, _, payload in scan_frames(data, FILE_HEADER_SIZE, len(data), report):
        found = list(ENTRY.iter_unpack(payload))
        if found and found[0][0] == BATCH:
            _, count, first = found[0]
            yield first, first + count, found[1:]
        else:
            yield 0, 0, found
