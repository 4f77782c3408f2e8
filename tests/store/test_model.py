"""Model-based test: random appends, acks, delivery marks, commits, clean restarts and crashes (buffered work
dropped without close) checked against a plain-Python model of what must be durable."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from store import MessageRecord, MessageStore, Recovered, RecoveredMessage

T = TypeVar("T")
QUEUES = ("a", "b", "c")
PAST, FUTURE = 1, 2**62


class Model:
    """What the store must hold: per queue, offset -> delivered flag, in offset order."""

    def __init__(self) -> None:
        self.records: dict[int, MessageRecord] = {}
        self.queues: dict[int, dict[int, bool]] = {}

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "append":
            _, offset, record, qids = op
            self.records[offset] = record
            for qid in qids:
                self.queues[qid][offset] = False
        elif kind == "ack":
            self.queues[op[1]].pop(op[2], None)
        elif kind == "deliver" and op[2] in self.queues[op[1]]:
            self.queues[op[1]][op[2]] = True

    def drop_expired(self) -> None:
        for held in self.queues.values():
            for offset in [o for o in held if self.records[o].expires_at_ms == PAST]:
                del held[offset]


class StoreMachine(RuleBasedStateMachine):
    # Tiny segments: rolls, deletions and the checkpoints taken at each roll happen every few steps.
    options: dict[str, Any] = {"segment_size": 700, "checkpoint_bytes": 900}

    def __init__(self) -> None:
        super().__init__()
        self.portal_cm = start_blocking_portal("asyncio")
        self.portal = self.portal_cm.__enter__()
        self.dir = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.durable = Model()  # state as of the last commit
        self.current = Model()  # state including buffered operations
        self.pending: list[tuple[Any, ...]] = []
        self.store = self._open_checked()
        qids = [self.store.put_queue("/", name, False, {}) for name in QUEUES]
        self.call(self.store.flush)
        for model in (self.durable, self.current):
            model.queues = {qid: {} for qid in qids}
        self.qids = qids
        self.counter = 0

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self.portal.call(fn, *args)

    def _open_checked(self) -> MessageStore:
        store = MessageStore(self.dir, fsync="none", index_interval=128, **self._store_options())
        recovered = self.call(store.open)
        self._check_recovered(recovered)
        return store

    def _store_options(self) -> dict[str, Any]:
        return self.options

    def _timestamp(self) -> int:
        return self.counter

    def _check_recovered(self, recovered: Recovered) -> None:
        got = {q.queue_id: [(m.offset, m.redelivered, m.record) for m in q.messages] for q in recovered.queues}
        want = {
            qid: [(o, delivered, self.durable.records[o]) for o, delivered in held.items()]
            for qid, held in self.durable.queues.items()
        }
        assert got == want
        assert recovered.stats["corrupt_records_skipped"] == 0 and recovered.stats["lost_records"] == 0

    def _live_pairs(self) -> list[tuple[int, int]]:
        return [(qid, o) for qid, held in self.current.queues.items() for o in held]

    def _do(self, op: tuple[Any, ...]) -> None:
        self.pending.append(op)
        self.current.apply(op)

    @rule(
        chosen=st.sets(st.sampled_from(range(len(QUEUES))), max_size=3),
        size=st.integers(0, 300),
        expiry=st.sampled_from([None, None, PAST, FUTURE]),
    )
    def append(self, chosen: set[int], size: int, expiry: int | None) -> None:
        self.counter += 1
        body = f"{self.counter}:".encode().ljust(size, b"x")
        record = MessageRecord("ex", f"rk{self.counter}", b"\x01\x02", body, self._timestamp(), expiry)
        qids = [self.qids[i] for i in sorted(chosen)]
        offset = self.store.append(record, qids)
        assert offset not in self.current.records
        self._do(("append", offset, record, qids))

    @precondition(lambda self: self._live_pairs())
    @rule(data=st.data(), deliver_first=st.booleans())
    def ack(self, data: st.DataObject, deliver_first: bool) -> None:
        qid, offset = data.draw(st.sampled_from(self._live_pairs()))
        if deliver_first:
            self.store.mark_delivered(qid, offset)
            self._do(("deliver", qid, offset))
        self.store.ack(qid, offset)
        self._do(("ack", qid, offset))

    @precondition(lambda self: self._live_pairs())
    @rule(data=st.data())
    def mark_delivered(self, data: st.DataObject) -> None:
        qid, offset = data.draw(st.sampled_from(self._live_pairs()))
        self.store.mark_delivered(qid, offset)
        self._do(("deliver", qid, offset))

    @rule()
    def commit(self) -> None:
        self.call(self.store.flush)
        self._commit_model()
        self._check_segments_on_disk()

    @rule()
    def reopen(self) -> None:
        self.call(self.store.close)
        self._commit_model()
        self._restart()

    @rule()
    def crash(self) -> None:
        self.call(self.store.abort)
        self.pending.clear()  # buffered work that was never committed is gone
        self._restart()

    def _commit_model(self) -> None:
        for op in self.pending:
            self.durable.apply(op)
        self.pending.clear()

    def _restart(self) -> None:
        self.durable.drop_expired()
        self.store = self._open_checked()
        self.current = Model()
        self.current.records = dict(self.durable.records)
        self.current.queues = {qid: dict(held) for qid, held in self.durable.queues.items()}

    def _check_segments_on_disk(self) -> None:
        """A segment file exists only while some queue holds a record in it (or it is the one being
        appended to)."""
        bases = sorted(int(p.stem) for p in (self.dir / "segments").glob("*.seg"))
        held = {o for h in self.current.queues.values() for o in h}
        for base, upper in zip(bases, bases[1:], strict=False):
            assert any(base <= o < upper for o in held), f"segment {base} should have been deleted"

    @invariant()
    def reads_match(self) -> None:
        for offset in {o for held in self.current.queues.values() for o in held}:
            assert self.store.read(offset) == self.current.records[offset]

    def teardown(self) -> None:
        try:
            self.call(self.store.close)
        finally:
            self.portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.dir, ignore_errors=True)


class LongTailMachine(StoreMachine):
    """Rare checkpoints: restarts rebuild most state from the tail scan and the ack-log replay."""

    options = {"segment_size": 1 << 20, "checkpoint_bytes": 1 << 30}


class RetentionMachine(StoreMachine):
    """With a retention policy, queues see exactly the same store (the model checks above), segments no queue
    needs stay only within the policy, and a log reader sees every durable record still on disk, in order."""

    MAX_AGE, MAX_BYTES = 40, 1500
    options = {"segment_size": 400, "checkpoint_bytes": 900, "retention_max_age_ms": MAX_AGE}
    options["retention_max_bytes"] = MAX_BYTES

    def __init__(self) -> None:
        self.clock_ms = 1000  # past PAST: the store's clock decides expiry at recovery too
        super().__init__()

    def _store_options(self) -> dict[str, Any]:
        return {**self.options, "clock": lambda: self.clock_ms * 1_000_000}

    def _timestamp(self) -> int:
        return self.clock_ms

    @rule(ms=st.integers(0, 30))
    def advance_clock(self, ms: int) -> None:
        self.clock_ms += ms

    def _check_segments_on_disk(self) -> None:
        self.call(self.store.enforce_retention)
        bases = sorted(int(p.stem) for p in (self.dir / "segments").glob("*.seg"))
        held = {o for h in self.current.queues.values() for o in h}
        unneeded = [b for b, upper in zip(bases, bases[1:], strict=False) if not any(b <= o < upper for o in held)]
        indexes = self.store._segments.indexes
        for base in unneeded:
            assert self.clock_ms - indexes[base].max_timestamp <= self.MAX_AGE, f"{base} is too old"
        if unneeded:
            assert sum((self.dir / "segments" / f"{b:020d}.seg").stat().st_size for b in bases) <= self.MAX_BYTES

    @invariant()
    def reader_sees_durable_records_in_order(self) -> None:
        read = list(self.store.records_from(0))
        offsets = [o for o, _ in read]
        assert offsets == sorted(set(offsets))
        assert {o for h in self.durable.queues.values() for o in h} <= set(offsets)
        for offset, record in read:
            assert record == self.durable.records[offset]


MODEL_SETTINGS = settings(
    # Bounded so the suite stays fast; STORE_MODEL_EXAMPLES=500 for a deeper run.
    max_examples=int(os.environ.get("STORE_MODEL_EXAMPLES", "20")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class LazyOpenMachine(StoreMachine):
    """The broker's way of opening: records from before the checkpoint are not read at open; reading them
    back with read_many must give exactly what an eager open holds. Records that expired stay held until
    read; then they are acked, as the broker's queue drops them at the head."""

    def _open_checked(self) -> MessageStore:
        store = MessageStore(self.dir, fsync="none", index_interval=128, **self._store_options())
        recovered = self.call(functools.partial(store.open, load_records=False))
        for q in recovered.queues:
            records = store.read_many(q.unloaded)
            assert None not in records
            early = [
                RecoveredMessage(o, r, o in q.unloaded_delivered)
                for o, r in zip(q.unloaded, records, strict=True)
                if r is not None and r.expires_at_ms != PAST
            ]
            q.messages = early + q.messages
            for o, r in zip(q.unloaded, records, strict=True):
                if r is not None and r.expires_at_ms == PAST:
                    store.ack(q.queue_id, o)
        self._check_recovered(recovered)
        return store


StoreMachine.TestCase.settings = MODEL_SETTINGS
LazyOpenMachine.TestCase.settings = MODEL_SETTINGS
LongTailMachine.TestCase.settings = MODEL_SETTINGS
RetentionMachine.TestCase.settings = MODEL_SETTINGS
TestStoreAgainstModel = StoreMachine.TestCase
TestStoreAgainstModelOpenedLazily = LazyOpenMachine.TestCase
TestStoreAgainstModelWithRareCheckpoints = LongTailMachine.TestCase
TestStoreAgainstModelWithRetention = RetentionMachine.TestCase
