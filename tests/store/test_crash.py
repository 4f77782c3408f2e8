"""kill -9 at random moments: every record whose on_durable fired must come back, exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from store import MessageStore, Recovered

ROUNDS = 6
WRITER = Path(__file__).with_name("crash_writer.py")
REPO = Path(__file__).resolve().parents[2]


def run_and_kill(data_dir: Path, round_: int, delay: float) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), str(round_)], stdout=subprocess.PIPE, env=env, text=True
    )
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, "the writer died before it was killed"
    return out.splitlines()


def recover(data_dir: Path) -> Recovered:
    async def reopen() -> Recovered:
        store = MessageStore(data_dir)
        recovered = await store.open()
        await store.close()
        return recovered

    return anyio.run(reopen)


def test_every_durable_record_survives_sigkill_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(20240607)
    durable: dict[int, str] = {}  # offset -> body, for records reported durable and never acked
    acked: set[int] = set()
    marked: set[int] = set()
    total_durable = 0
    for round_ in range(ROUNDS):
        # From just after start-up (maybe mid-recovery) to well into steady appending.
        lines = run_and_kill(tmp_path, round_, rng.uniform(0.15, 1.2))
        for line in lines:
            kind, offset, *rest = line.split()
            if kind == "D":
                durable[int(offset)] = rest[0]
                total_durable += 1
            elif kind == "A":
                acked.add(int(offset))
            else:
                marked.add(int(offset))
        recovered = recover(tmp_path)
        (queue,) = recovered.queues
        found = [m.offset for m in queue.messages]
        assert len(found) == len(set(found)), "a record came back twice"
        bodies = {m.offset: m.record.body.decode() for m in queue.messages}
        missing = [o for o in durable if o not in acked and o not in bodies]
        assert not missing, f"round {round_}: {len(missing)} durable records lost, e.g. {missing[:5]}"
        assert all(bodies[o] == body for o, body in durable.items() if o in bodies)
        assert all(m.offset in marked for m in queue.messages if m.redelivered)
        assert found == sorted(found)
    assert total_durable > 300  # the rounds really exercised the store (kept low: CI machines are slow)
