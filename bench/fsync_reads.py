"""An fsync's latency while another thread reads a file sequentially from a cold page cache, with the reads
through the store's I/O seam (they give way to fsyncs under way: store/sync_gate.py) or bare (os.pread):
`python -m bench.fsync_reads [--mib 512] [--seconds 6] [--rounds 3]`.

bench.loop_reads measures the same contention through a broker, where on a loaded machine CPU starvation
hides it; this takes the broker out. A writer thread appends 4 KiB and fsyncs every 2 ms (a commit's shape);
a reader thread preads 1 MiB at a time (the store's read block) from its own --mib stretch of a file written
first, each phase on a stretch not read before (so that neither the page cache, dropped before each phase,
nor a host's cache under a virtual disk serves it). Each round runs both modes; prints each phase's fsync
p50/p99 and read rate, the medians per mode and the load average as one JSON line. Needs root to drop the
page cache (the report says whether it could).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from bench.loop_reads import drop_page_cache, percentile
from store.file_io import FileIO

READ = 1 << 20
WRITE = b"w" * 4096
SYNC_EVERY = 0.002


def phase(
    io: FileIO, path: str, log_dir: str, start: int, stop: int, seconds: float, through_seam: bool
) -> dict[str, Any]:
    cold = drop_page_cache()
    halt = threading.Event()
    read = [0]

    def reader() -> None:
        fd = os.open(path, os.O_RDONLY)
        pread = io.pread if through_seam else io.read_at
        pos = start
        while not halt.is_set() and pos < stop:
            pos += len(pread(fd, READ, pos))
        read[0] = pos - start
        os.close(fd)

    latencies: list[float] = []
    fd = os.open(os.path.join(log_dir, "log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    thread = threading.Thread(target=reader)
    began = time.perf_counter()
    thread.start()
    while time.perf_counter() - began < seconds and thread.is_alive():
        os.write(fd, WRITE)
        t0 = time.perf_counter()
        io.fsync(fd)
        latencies.append(time.perf_counter() - t0)
        time.sleep(SYNC_EVERY)
    halt.set()
    thread.join()
    took = time.perf_counter() - began
    os.close(fd)
    return {
        "cold_page_cache": cold,
        "fsync_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "fsync_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "read_mib_per_s": round(read[0] / took / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=512, help="MiB each phase may read (default 512)")
    p.add_argument("--seconds", type=float, default=6.0, help="longest phase (default 6)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of both modes (default 3)")
    p.add_argument(
        "--file",
        help="read this file instead of one written first (a file written just before may"
        " still be in a virtual disk's host cache: then nothing waits on the disk)",
    )
    a = p.parse_args(argv)
    modes = {"seam": True, "bare": False}
    stretch = a.mib << 20
    io = FileIO()
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="amqpd-fsync-reads-", dir="/var/tmp") as tmp:
        path = a.file or os.path.join(tmp, "data")
        if not a.file:
            with open(path, "wb") as f:
                for _ in range(a.rounds * len(modes) * a.mib):
                    f.write(os.urandom(READ))
        at = 0
        for _ in range(a.rounds):
            for mode, through_seam in modes.items():
                results[mode].append(phase(io, path, tmp, at, at + stretch, a.seconds, through_seam))
                at += stretch
    summary: dict[str, Any] = {"mib": a.mib, "seconds": a.seconds}
    for mode, found in results.items():
        summary[mode] = {"rounds": found}
        for key in ("fsync_p50_ms", "fsync_p99_ms", "read_mib_per_s"):
            summary[mode]["median_" + key] = round(statistics.median(r[key] for r in found), 2)
    summary["load_average"] = [round(v, 2) for v in os.getloadavg()]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
