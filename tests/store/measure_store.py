"""Store figures for the report (not a test): append+fsync throughput, recovery time, bytes per message.

python tests/store/measure_store.py [--messages 200000] [--dir /path/on/the/disk/to/measure]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import anyio

from store import MessageRecord, MessageStore

BODY = b"x" * 100
PROPS = b"\x10\x00\x02"  # delivery-mode 2, as a client would encode it


def record() -> MessageRecord:
    return MessageRecord("", "bench.queue", PROPS, BODY, int(time.time() * 1000))


async def append_throughput(path: Path, n: int, fsync: str) -> float:
    """Messages per second from first append to last on_durable, publishing in bursts of 500 per loop turn."""
    store = MessageStore(path, fsync=fsync)
    await store.open()
    qid = store.put_queue("/", "bench", False, {})
    done = anyio.Event()
    confirmed = 0

    def on_durable() -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed == n:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        start = time.perf_counter()
        for i in range(n):
            store.append(record(), [qid], on_durable)
            if i % 500 == 499:
                await anyio.sleep(0)
        await done.wait()
        elapsed = time.perf_counter() - start
        await store.close()
    return n / elapsed


async def build(path: Path, n: int, clean_close: bool) -> None:
    store = MessageStore(path, fsync="none")
    await store.open()
    qid = store.put_queue("/", "bench", False, {})
    store.append(record(), [qid])
    await store.flush()  # first segment + its checkpoint; everything after is tail unless closed cleanly
    for i in range(n - 1):
        store.append(record(), [qid])
        if i % 10000 == 0:
            await store.flush()
    await store.flush()
    if clean_close:
        await store.close()
    else:
        await store.abort()


async def recovery_seconds(path: Path) -> tuple[float, float, dict[str, object], int]:
    """Wall and CPU seconds of open() (CPU: the machine may be shared; wall time then overstates)."""
    store = MessageStore(path, fsync="none")
    start, cpu = time.perf_counter(), time.process_time()
    recovered = await store.open()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    count = len(recovered.queues[0].messages)
    await store.close()
    return elapsed, cpu, recovered.stats, count


def dir_bytes(path: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in path.glob(pattern))


async def main(n: int, root: Path) -> None:
    for fsync in ("always-batched", "none"):
        work = root / f"append-{fsync}"
        rate = await append_throughput(work, n, fsync)
        print(f"append + on_durable, fsync={fsync}: {rate:,.0f} msgs/s ({n} x 100-byte bodies)")
        if fsync == "always-batched":
            seg = dir_bytes(work, "segments/*.seg")
            idx = dir_bytes(work, "segments/*.idx") + dir_bytes(work, "segments/*.tix")
            print(f"bytes on disk per 100-byte message: {seg / n:.1f} in segments + {idx / n:.2f} in indexes")
        shutil.rmtree(work)
    for clean in (True, False):
        work = root / f"recover-{clean}"
        await build(work, n, clean)
        elapsed, cpu, stats, count = await recovery_seconds(work)
        how = "after clean close (checkpoint)" if clean else "after crash (whole tail scanned)"
        print(f"open() with {count} live records {how}: {elapsed:.2f} s wall, {cpu:.2f} s CPU; stats {stats}")
        shutil.rmtree(work)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        anyio.run(main, args.messages, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
