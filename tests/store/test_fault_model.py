"""Model-based test of the store through its I/O seam under failed batches: publishes with confirms, acks,
dead-letterings (the holder's ack and the new record for the target queue, in one batch, as the broker does
it), write and fsync failures of segment and ack-log files, clean restarts and crashes.

What must hold after every recovery (FORMAT.md, What is guaranteed; Disk faults):
- a confirmed message that no queue has acked for good is there exactly once: in the queue that held it
  last, or, moved (dead-lettered) by a batch that failed, in the queue it was moved from; while that old
  record's ack is held back, a later move of the message that was written may bring it back a second time
  (a duplicate, never a loss);
- a message acked for good is not there once that ack was in a written batch and no ack of it is held back
  (the acks of a failed batch, for records on disk, wait until no queue holds a record that batch appended);
- any other message (never confirmed, or acked in a batch that failed or was never written) is there at
  most once, and a message that was gone after a recovery never comes back.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from store import MessageRecord, MessageStore, Recovered
from tests.store.faulty_io import ArmedIO

T = TypeVar("T")
# A pass takes seconds; a failure's shrinking reopens the store for every candidate and takes minutes.
pytestmark = pytest.mark.timeout(900)
QUEUES = ("a", "b", "dlq")
# Tiny segments and checkpoints: rolls, segment deletions and checkpoints happen every few steps.
OPTIONS: dict[str, Any] = {"segment_size": 600, "checkpoint_bytes": 800, "index_interval": 128}
# On tmpfs where there is one: the fsyncs this test fails are real calls, and cheap there.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None


def record(message: int, hops: int) -> MessageRecord:
    return MessageRecord("ex", "rk", b"", b"%d:%d" % (message, hops), 1_700_000_000_000)


def message_of(body: bytes) -> int:
    return int(body.split(b":")[0])


class Fate:
    """What the test knows of one message."""

    def __init__(self) -> None:
        self.confirmed = False
        self.final_ack = ""  # "", "buffered" (not known to be written), "written"


class Failure:
    """A failed batch: the records it appended that a queue still held, and the messages whose on-disk
    records it acked (those acks are held back until no queue holds any of the records)."""

    def __init__(self, records: set[tuple[int, int]], messages: list[int]) -> None:
        self.records = records
        self.messages = messages


class FaultMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.portal_cm = start_blocking_portal("asyncio")
        self.portal = self.portal_cm.__enter__()
        self.dir = Path(tempfile.mkdtemp(prefix="store-faults-", dir=SCRATCH))
        self.io = ArmedIO()
        self.fates: dict[int, Fate] = {}
        self.held: dict[int, dict[int, int]] = {}  # queue id -> offset -> message, as a broker would track
        self.on_disk: set[tuple[int, int]] = set()  # (queue id, offset) of records in a written batch
        self.batch_records: list[tuple[int, int]] = []  # appended since the last flush
        self.batch_acks: list[tuple[int, bool]] = []  # (message, its record was on disk), since the last flush
        self.final_acks: set[int] = set()  # messages acked for good, the ack not known to be written
        self.failures: list[Failure] = []
        self.holds: Counter[int] = Counter()  # message -> failures holding back an ack of it
        self.hops = 0
        self.next_message = 0
        self.store = self.open()
        self.qids = [self.store.put_queue("/", name, False, {}) for name in QUEUES]
        self.call(self.store.flush)
        self.held = {qid: {} for qid in self.qids}

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self.portal.call(fn, *args)

    def open(self) -> MessageStore:
        store = MessageStore(self.dir, io=self.io, **OPTIONS)
        self.check(self.call(store.open))
        return store

    def pairs(self) -> list[tuple[int, int]]:
        return [(qid, offset) for qid, held in self.held.items() for offset in held]

    def append(self, qid: int, message: int, hops: int, on_durable: Callable[[], None] | None = None) -> None:
        offset = self.store.append(record(message, hops), [qid], on_durable)
        self.held[qid][offset] = message
        self.batch_records.append((qid, offset))

    def take(self, qid: int, offset: int) -> int:
        message = self.held[qid].pop(offset)
        self.store.ack(qid, offset)
        self.batch_acks.append((message, (qid, offset) in self.on_disk))
        return message

    @rule(queue=st.sampled_from(range(len(QUEUES))))
    def publish(self, queue: int) -> None:
        message, self.next_message = self.next_message, self.next_message + 1
        fate = self.fates[message] = Fate()

        def confirmed() -> None:
            fate.confirmed = True

        self.append(self.qids[queue], message, 0, confirmed)

    @precondition(lambda self: self.pairs())
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        message = self.take(*data.draw(st.sampled_from(self.pairs())))
        self.fates[message].final_ack = "buffered"
        self.final_acks.add(message)

    @precondition(lambda self: self.pairs())
    @rule(data=st.data())
    def ack_several(self, data: st.DataObject) -> None:
        """A multiple-ack (or a purge): one queue's messages acked in one call."""
        qid = data.draw(st.sampled_from([qid for qid, held in self.held.items() if held]))
        offsets = data.draw(st.lists(st.sampled_from(sorted(self.held[qid])), min_size=1, unique=True))
        self.store.ack_many(qid, sorted(offsets))
        for offset in sorted(offsets):
            message = self.held[qid].pop(offset)
            self.batch_acks.append((message, (qid, offset) in self.on_disk))
            self.fates[message].final_ack = "buffered"
            self.final_acks.add(message)

    @precondition(lambda self: self.pairs())
    @rule(data=st.data(), to_queue=st.sampled_from(range(len(QUEUES))))
    def dead_letter(self, data: st.DataObject, to_queue: int) -> None:
        """As the broker does it: the holder acks, and a new record goes to the target, no callback."""
        message = self.take(*data.draw(st.sampled_from(self.pairs())))
        self.hops += 1
        self.append(self.qids[to_queue], message, self.hops)

    @rule(
        suffix=st.sampled_from([".seg", ".ack"]),
        stage=st.sampled_from(["write", "fsync"]),
        error=st.sampled_from([errno.EIO, errno.ENOSPC]),
        then=st.sampled_from([None, "restart", "crash"]),
    )
    def failing_flush(self, suffix: str, stage: str, error: int, then: str | None) -> None:
        """A flush during which the next write or fsync of that kind of file fails (if there is one); then,
        often, a restart or a crash, which is where a failure's consequences show."""
        before = self.failed_batches()
        number = self.sealing()
        self.io.arm(suffix, stage, error)
        try:
            self.call(self.store.flush)
        finally:
            self.io.disarm()
        if self.sealing() != number:
            self.flushed(written=self.failed_batches() == before)
        if then == "restart":
            self.restart()
        elif then == "crash":
            self.crash()

    @precondition(lambda self: self.pairs())
    @rule(
        data=st.data(),
        to_queue=st.sampled_from(range(len(QUEUES))),
        stage=st.sampled_from(["write", "fsync"]),
        then=st.sampled_from([None, "restart", "crash"]),
    )
    def dead_letter_in_a_failing_batch(self, data: st.DataObject, to_queue: int, stage: str, then: str | None) -> None:
        """The case this test is about, made common: a batch that moves a message fails."""
        self.dead_letter(data, to_queue)
        self.failing_flush(".seg", stage, errno.EIO, then)

    def failed_batches(self) -> int:
        stats = self.store.fault_stats
        return stats["write_failures"] + stats["fsync_failures"]

    @rule()
    def flush(self) -> None:
        number = self.sealing()
        self.call(self.store.flush)
        if self.sealing() != number:
            self.flushed(written=True)

    def sealing(self) -> int:
        """The number of the batch pending: flush() with nothing pending seals and writes no batch, so held
        acks that became due are not written by it."""
        return self.store._commit.pending.number  # noqa: SLF001

    @rule()
    def restart(self) -> None:
        self.call(self.store.close)
        self.flushed(written=True)
        self.store = self.open()

    @rule()
    def crash(self) -> None:
        self.call(self.store.abort)
        self.store = self.open()

    def flushed(self, written: bool) -> None:
        """One batch: all the work since the last flush (nothing commits between two flushes here)."""
        held = set(self.pairs())
        done = [f for f in self.failures if not f.records & held]  # their held acks go in this batch
        self.failures = [f for f in self.failures if f.records & held]
        if written:
            self.on_disk.update(self.batch_records)
            for failure in done:
                self.holds.subtract(failure.messages)
            for message in [m for m in self.final_acks if self.holds[m] <= 0]:
                self.fates[message].final_ack = "written"
                self.final_acks.discard(message)
        else:  # held back: the acks of on-disk records, with those handed to this batch
            messages = [m for f in done for m in f.messages] + [m for m, on_disk in self.batch_acks if on_disk]
            for failure in done:
                self.holds.subtract(failure.messages)
            self.failures.append(Failure(set(self.batch_records) & held, messages))
            self.holds.update(messages)
        self.batch_records.clear()
        self.batch_acks.clear()

    def check(self, recovered: Recovered) -> None:
        where = {(q.queue_id, m.offset): message_of(m.record.body) for q in recovered.queues for m in q.messages}
        counts = Counter(where.values())
        assert set(counts) <= set(self.fates), "a message that was gone came back"
        for message, fate in self.fates.items():
            if fate.final_ack == "written":
                assert counts[message] == 0, f"message {message}: acked in a written batch, came back"
            elif fate.confirmed and not fate.final_ack:
                most = self.most_copies(message)
                assert 1 <= counts[message] <= most, f"message {message}: confirmed, found {counts[message]} times"
            else:
                assert counts[message] <= self.most_copies(message), f"message {message}: found {counts[message]} times"
        assert recovered.stats["lost_records"] == 0
        # Carry on from what the store holds now: a message back from an unwritten ack is live again, one
        # that is gone is gone for good; nothing is held back or buffered any more.
        for message in [m for m in self.fates if counts[m] == 0]:
            del self.fates[message]
        for message in counts:
            self.fates[message].final_ack = ""
        self.held = {q.queue_id: {} for q in recovered.queues}
        for (qid, offset), message in where.items():
            self.held[qid][offset] = message
        self.on_disk = set(where)
        self.batch_records, self.batch_acks, self.final_acks, self.failures = [], [], set(), []
        self.holds = Counter()

    def most_copies(self, message: int) -> int:
        """A message whose old record's ack is held back may also be back from a later, written move: the
        store cannot tell which of a failure's records an ack belongs to (FORMAT.md, Disk faults)."""
        return 2 if self.holds[message] > 0 else 1

    def teardown(self) -> None:
        try:
            self.call(self.store.close)
        finally:
            self.portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.dir, ignore_errors=True)


FaultMachine.TestCase.settings = settings(
    # Bounded so that it runs in seconds; STORE_FAULT_EXAMPLES=500 for a deeper run.
    max_examples=int(os.environ.get("STORE_FAULT_EXAMPLES", "30")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreUnderFailedBatches = FaultMachine.TestCase
