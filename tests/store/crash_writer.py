"""Child process for test_crash: appends forever with fsync "always-batched" and prints one line per event,
flushed at once, so that whatever the parent read before SIGKILL really happened:

    D <offset> <body>   on_durable fired for that record
    A <offset>          about to ack it (the ack may or may not be durable when the kill lands)
    M <offset>          about to mark it delivered

Usage: python crash_writer.py DATA_DIR ROUND
"""

from __future__ import annotations

import functools
import sys
import time

import anyio

from store import MessageRecord, MessageStore


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: str, round_: int) -> None:
    store = MessageStore(data_dir, segment_size=64 * 1024, checkpoint_bytes=128 * 1024)
    await store.open()
    qid = store.put_queue("/", "crash", False, {"x-round-declared": round_})
    offsets: dict[int, int] = {}

    def durable(seq: int) -> None:
        offset = offsets[seq]
        emit(f"D {offset} {round_}:{seq}")
        if seq % 5 == 0:
            emit(f"A {offset}")
            store.ack(qid, offset)
        elif seq % 7 == 0:
            emit(f"M {offset}")
            store.mark_delivered(qid, offset)

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        seq = 0
        while True:
            for _ in range(20):
                body = f"{round_}:{seq}".encode()
                record = MessageRecord("", "crash", b"", body, int(time.time() * 1000))
                offsets[seq] = store.append(record, [qid], functools.partial(durable, seq))
                seq += 1
            await anyio.sleep(0.001)  # publishers pause; the commit loop batches what accumulated


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]))
