"""Acks held back after a failed batch (FORMAT.md, Disk faults).

A batch can move a message: dead-lettering (or a delayed message's release) acks it in the queue that held
it and appends a new record for the target, in one batch. When that batch fails, the new record is kept
only in memory (`SegmentLog.volatile`) and is gone after a restart; had the ack still been written (by the
next batch, or as a checkpoint that no longer lists the message), a confirmed message would be in neither
queue. So the acks of a failed batch, for records that are on disk, are held back: their messages stay
referenced (their segments are kept) and listed in checkpoints under the queue that acked them, and the
acks are written only once no queue holds a record of that failure any more (nor of a later failure that
acked one of its records: the message may have moved on, again in a batch that failed). A restart before
that brings the message back in the queue it was moved from: at-least-once, as for any ack a crash takes
back.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from store import ack_log


@dataclass
class Failure:
    start: int  # the records [start, end) of the failed batch and of the batch filled behind it
    end: int
    volatile: list[int]  # those a queue still held then, in order (read from memory since)
    acks: list[tuple[int, int]]  # (queue id, offset): acks of on-disk records, held back
    seen: int = 0  # volatile[:seen] are known to be held no more
    released_in: int | None = None  # the batch its acks were handed to (the failure is kept until it is durable)


@dataclass
class HeldAcks:
    failures: list[Failure] = field(default_factory=list)

    def hold(self, entries: bytes, start: int, end: int, volatile: list[int]) -> tuple[list[tuple[int, int]], bytes]:
        """A batch failed: of its ack-log entries (and those of the batch behind it), hold back the acks of
        records that are on disk. Returns them, and the delivery marks to carry to the next batch."""
        failed = [(f.start, f.end) for f in self.failures]
        failed.append((start, end))
        held: list[tuple[int, int]] = []
        carried = bytearray()
        moved: set[int] = set()  # records of earlier failures that these entries ack
        for kind, queue_id, offset in ack_log.ENTRY.iter_unpack(entries):
            if any(s <= offset < e for s, e in failed):
                if kind == ack_log.ACKED:
                    moved.add(offset)
                continue  # a record that never reached the disk: nothing to ack or mark there
            if kind == ack_log.ACKED:
                held.append((queue_id, offset))
            elif kind == ack_log.DELIVERED:
                carried += ack_log.ENTRY.pack(kind, queue_id, offset)
        # Failures whose acks were handed to the batch that failed: those acks are among `entries`, and
        # their records were held by no queue any more, so no later ack can name them.
        self.failures = [f for f in self.failures if f.released_in is None]
        self._wait_for(moved, volatile)
        self.failures.append(Failure(start, end, volatile, held))
        return held, bytes(carried)

    def _wait_for(self, moved: set[int], volatile: list[int]) -> None:
        """An earlier failure whose records this failed batch acked waits for this one's records too: an
        ack there may have moved its message on (dead-lettered again) into a record that is only in memory
        now, and writing the earlier failure's held acks once its own records are gone would leave that
        confirmed message in no queue after a restart."""
        if not moved:
            return
        for failure in self.failures:
            if not moved.isdisjoint(failure.volatile):
                failure.volatile = failure.volatile + volatile  # later offsets: the list stays in order

    def due(self, volatile: Container[int], batch_number: int) -> list[tuple[int, int]]:
        """The held acks whose failure's records no queue holds any more, handed to batch `batch_number`."""
        due: list[tuple[int, int]] = []
        for failure in self.failures:
            if failure.released_in is not None:
                continue
            offsets = failure.volatile
            while failure.seen < len(offsets) and offsets[failure.seen] not in volatile:
                failure.seen += 1
            if failure.seen == len(offsets):
                due.extend(failure.acks)
                failure.acks = []
                failure.released_in = batch_number
        return due

    def written(self, batch_number: int) -> None:
        """Batch `batch_number` is durable: failures whose acks it carried are done with. (Until then their
        offsets still tell a failed record from one on disk, should that batch fail too.)"""
        self.failures = [f for f in self.failures if f.released_in is None or f.released_in > batch_number]

    def by_queue(self) -> dict[int, list[int]]:
        """The offsets each queue has acked whose acks are held back (for checkpoints)."""
        held: dict[int, list[int]] = {}
        for failure in self.failures:
            for queue_id, offset in failure.acks:
                held.setdefault(queue_id, []).append(offset)
        return held
