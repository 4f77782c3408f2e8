"""Read a queue's records straight from a data directory, numbered densely, without opening the store: for
readers outside the broker (issue 17's Spark source), while the broker runs or not.

The numbering is the one a stream queue gives its messages: the records whose queue list names the queue,
in log order, counted from a saved first position — (first number, its log offset), kept with the queue as
the value `FIRST_KEY` when retention last dropped a prefix (none: (0, 0)). Retention only ever drops a
prefix, so every record naming the queue at or after that log offset is still the queue's. Read-only: the
catalogue is opened with SQLite's mode=ro and segments are only read; records still being written (a
partial frame at the tail) are not returned yet. A record damaged on disk is skipped without taking a
number, where the broker keeps its number unused: after damage the two may disagree.
"""

from __future__ import annotations

import os
import sqlite3
import struct
from bisect import bisect_right
from collections.abc import Iterator

from store.file_io import FileIO
from store.frame import ScanReport, scan_frames
from store.record_codec import decode_record
from store.records import MessageRecord
from store.segment import FILE_HEADER_SIZE, Layout

FIRST_KEY = "stream.first"
FIRST_POSITION = struct.Struct("<qq")  # first number, its log offset


class QueueNotFound(LookupError):
    pass


class QueueLogReader:
    def __init__(self, data_dir: str | os.PathLike[str], vhost: str, name: str, io: FileIO | None = None) -> None:
        self._layout = Layout(data_dir)
        self._io = io if io is not None else FileIO()
        uri = f"file:{self._layout.catalog}?mode=ro"
        with sqlite3.connect(uri, uri=True) as db:
            row = db.execute("SELECT queue_id FROM queues WHERE vhost = ? AND name = ?", (vhost, name)).fetchone()
            if row is None:
                raise QueueNotFound(f"no queue '{name}' in vhost '{vhost}' in {data_dir}")
            self.queue_id = int(row[0])
            value = db.execute(
                "SELECT value FROM queue_values WHERE queue_id = ? AND key = ?", (self.queue_id, FIRST_KEY)
            ).fetchone()
        self.first, self._first_log_offset = FIRST_POSITION.unpack(value[0]) if value else (0, 0)
        # Positions learned while reading: number -> log offset, at segment starts (a sparse index).
        self._marks: list[int] = [self.first]
        self._mark_offsets: list[int] = [self._first_log_offset]

    def read(self, from_number: int, max_records: int) -> list[tuple[int, MessageRecord]]:
        """Up to `max_records` (number, record) pairs from `from_number` on (or the first kept)."""
        out: list[tuple[int, MessageRecord]] = []
        for number, record in self._scan(max(from_number, self.first)):
            if number >= from_number:
                out.append((number, record))
                if len(out) >= max_records:
                    break
        return out

    def records_from(self, from_number: int) -> Iterator[tuple[int, MessageRecord]]:
        yield from self._scan(max(from_number, self.first))

    def _scan(self, from_number: int) -> Iterator[tuple[int, MessageRecord]]:
        i = bisect_right(self._marks, from_number) - 1
        number, log_offset = self._marks[i], self._mark_offsets[i]
        bases = self._layout.segment_bases()
        start = max(bisect_right(bases, log_offset) - 1, 0)
        for base in bases[start:]:
            if number > self._marks[-1]:
                self._marks.append(number)
                self._mark_offsets.append(base)
            for record, queue_ids in self._segment_records(base, log_offset):
                if self.queue_id in queue_ids:
                    yield number, record
                    number += 1

    def _segment_records(self, base: int, from_log_offset: int) -> Iterator[tuple[MessageRecord, tuple[int, ...]]]:
        io = self._io
        try:
            fd = io.open(self._layout.segment(base), os.O_RDONLY)
        except FileNotFoundError:  # deleted by retention since we listed it
            return
        try:
            size = os.fstat(fd).st_size
            if size <= FILE_HEADER_SIZE:
                return
            with io.map(fd, size) as data:
                for _pos, sequence, payload in scan_frames(data, FILE_HEADER_SIZE, size, ScanReport()):
                    if sequence >= from_log_offset:
                        _id, queue_ids, record = decode_record(payload)
                        yield record, queue_ids
        finally:
            io.close(fd)
