"""Small fsyncs while a file is read through from a cold page cache, per way of reading it, without a broker:
`python -m bench.fsync_under_reads [--mb 2048] [--piece-kib 1024] [--seconds 12] [--rounds 2]`.

The disk side of issue 26's figure (bench.loop_reads): a commit's fsync waits behind the reads queued on the
device. One thread appends 512 bytes and fsyncs, 200 times a second at most; another reads a --mb MiB file (made
in the system's temp dir, removed at the end) in --piece-kib preads, after the page cache was dropped (needs
root). Modes, alternated in each round: `none` (fsyncs alone), `normal` (the kernel's read-ahead on), `random`
(POSIX_FADV_RANDOM: read-ahead off, as the store's segment reads are, store/file_io.py) and `direct`
(O_DIRECT into an aligned buffer). Prints one line per mode and round: the fsyncs' p50/p99 while the read ran
and the read's MiB/s, with the load average."""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import threading
import time

from bench.loop_reads import drop_page_cache, percentile

MODES = ("none", "normal", "random", "direct")


def make_file(path: str, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(block)


def read_through(path: str, mode: str, piece: int, until: float) -> float:
    """Read the file from its start in `piece` preads until its end or `until`; MiB/s."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0))
    if mode == "random":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    buffer = mmap.mmap(-1, piece)  # page-aligned, as O_DIRECT needs
    size, pos, started = os.fstat(fd).st_size, 0, time.perf_counter()
    try:
        while pos < size and time.perf_counter() < until:
            got = os.preadv(fd, [buffer], pos) if mode == "direct" else len(os.pread(fd, piece, pos))
            if got <= 0:
                break
            pos += got
    finally:
        os.close(fd)
    return pos / (1 << 20) / (time.perf_counter() - started)


def fsyncs(path: str, stop: threading.Event, latencies: list[float]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while not stop.is_set():
            os.write(fd, b"x" * 512)
            t0 = time.perf_counter()
            os.fsync(fd)
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.005)
    finally:
        os.close(fd)
        os.unlink(path)


def one(path: str, mode: str, piece: int, seconds: float) -> str:
    cold = drop_page_cache()
    latencies: list[float] = []
    stop = threading.Event()
    writer = threading.Thread(target=fsyncs, args=(path + ".fsyncs", stop, latencies))
    writer.start()
    try:
        if mode == "none":
            time.sleep(seconds)
            rate = 0.0
        else:
            rate = read_through(path, mode, piece, time.perf_counter() + seconds)
    finally:
        stop.set()
        writer.join()
    ms = 1000.0
    return (
        f"{mode:7s} fsyncs {len(latencies):5d}  p50 {percentile(latencies, 0.5) * ms:6.1f} ms"
        f"  p99 {percentile(latencies, 0.99) * ms:6.1f} ms  read {rate:6.1f} MiB/s"
        f"  load {os.getloadavg()[0]:.1f}{'' if cold else '  (page cache NOT dropped)'}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=2048, help="MiB in the file read (default 2048)")
    p.add_argument("--piece-kib", type=int, default=1024, help="KiB per pread (default 1024)")
    p.add_argument("--seconds", type=float, default=12.0, help="longest read per mode (default 12)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of every mode (default 2)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    a = p.parse_args(argv)
    path = os.path.join(tempfile.gettempdir(), f"fsync_under_reads.{a.mb}")
    make_file(path, a.mb << 20)
    try:
        for _ in range(a.rounds):
            for mode in a.modes.split(","):
                print(one(path, mode, a.piece_kib << 10, a.seconds), flush=True)
    finally:
        os.unlink(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
