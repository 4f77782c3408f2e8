"""FileIO stand-ins for the store's I/O seam: one that fails on the Nth write or fsync of a segment file, and
one that records every write, fsync, truncation, rename and unlink so a test can rebuild what a power cut
keeps; and one that runs work on the loop during a segment fsync (then fails it or not)."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from anyio.from_thread import run_sync
from anyio.lowlevel import EventLoopToken, current_token

from store.file_io import FileIO


class WorkDuringFsync(FileIO):
    """After `arm(work)`, runs `work` on the event loop during the next fsync of a segment file, once: what
    the broker buffers while a batch is in its fsync. `fails`: that fsync then fails (EIO) instead of syncing."""

    fails = False

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.work: Callable[[], None] | None = None
        self.token: EventLoopToken | None = None

    def arm(self, work: Callable[[], None]) -> None:
        self.work, self.token = work, current_token()

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        fd = super().open(path, flags)
        self.paths[fd] = str(path)
        return fd

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)

    def fsync(self, fd: int) -> None:
        work = self.work
        if work is not None and self.paths.get(fd, "").endswith(".seg"):
            self.work = None
            run_sync(work, token=self.token)
            if self.fails:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


class FailingIO(FileIO):
    """Fails the `fail_write`-th write (1-based) and/or the `fail_fsync`-th fsync of a segment file with
    `error`; every other call goes to the real file. `space` (bytes): a segment write past it fails with
    ENOSPC, as a full disk does, until `space` is raised."""

    def __init__(self, fail_write: int = 0, fail_fsync: int = 0, error: int = errno.ENOSPC) -> None:
        self.fail_write, self.fail_fsync, self.error = fail_write, fail_fsync, error
        self.segment_writes = 0
        self.segment_fsyncs = 0
        self.space: int | None = None
        self.written = 0
        self.paths: dict[int, str] = {}
        self.failed: list[str] = []

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        fd = super().open(path, flags)
        self.paths[fd] = str(path)
        return fd

    def _segment(self, fd: int) -> bool:
        return self.paths.get(fd, "").endswith(".seg")

    def write(self, fd: int, data: memoryview) -> int:
        if self._segment(fd):
            self.segment_writes += 1
            if self.segment_writes == self.fail_write:
                self.failed.append(f"write {self.segment_writes}")
                raise OSError(self.error, os.strerror(self.error))
            if self.space is not None and self.written + len(data) > self.space:
                self.failed.append("no space")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
        return super().write(fd, data)

    def writev(self, fd: int, buffers: list[memoryview]) -> int:
        # One call, as one write: the Nth-write and full-disk faults count it the same way.
        if self._segment(fd):
            self.segment_writes += 1
            if self.segment_writes == self.fail_write:
                self.failed.append(f"write {self.segment_writes}")
                raise OSError(self.error, os.strerror(self.error))
            size = sum(map(len, buffers))
            if self.space is not None and self.written + size > self.space:
                self.failed.append("no space")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += size
        return super().writev(fd, buffers)

    def fsync(self, fd: int) -> None:
        if self._segment(fd):
            self.segment_fsyncs += 1
            if self.segment_fsyncs == self.fail_fsync:
                self.failed.append(f"fsync {self.segment_fsyncs}")
                raise OSError(self.error, os.strerror(self.error))
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)


class ArmedIO(FileIO):
    """Fails, once, the next write or fsync of a segment or ack-log file after `arm()`; every other call goes to
    the real file. `fired` counts the failures raised."""

    def __init__(self) -> None:
        self.armed: tuple[str, str, int] | None = None  # (".seg" or ".ack", "write" or "fsync", errno)
        self.fired = 0
        self.paths: dict[int, str] = {}

    def arm(self, suffix: str, stage: str, error: int) -> None:
        self.armed = (suffix, stage, error)

    def disarm(self) -> None:
        self.armed = None

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        fd = super().open(path, flags)
        self.paths[fd] = str(path)
        return fd

    def _fail(self, fd: int, stage: str) -> None:
        armed = self.armed
        if armed is not None and armed[1] == stage and self.paths.get(fd, "").endswith(armed[0]):
            self.armed = None
            self.fired += 1
            raise OSError(armed[2], os.strerror(armed[2]))

    def write(self, fd: int, data: memoryview) -> int:
        self._fail(fd, "write")
        return super().write(fd, data)

    def writev(self, fd: int, buffers: list[memoryview]) -> int:
        self._fail(fd, "write")
        return super().writev(fd, buffers)

    def fsync(self, fd: int) -> None:
        self._fail(fd, "fsync")
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)


@dataclass
class FileImage:
    synced: bytes = b""  # content as of the file's last fsync
    current: bytes = b""  # content now (page cache)
    durable_entry: bool = False  # its directory was fsync'd since it was created (or renamed here)
    # Renamed over another file and the directory not fsync'd since: a power cut leaves that file (as
    # synced) under this name instead.
    replaced: FileImage | None = None


@dataclass
class Snapshot:
    """What a power cut at one point would leave: each file's synced content, the unsynced rest, and the
    SQLite catalogue (which fsyncs its own commits) as committed then."""

    files: dict[str, FileImage]
    catalog: bytes
    events: int  # how many I/O events had happened


@dataclass
class RecordingIO(FileIO):
    """Passes every call through and mirrors each file's synced and current content. At the event numbers
    in `cut_at`, takes a Snapshot (the catalogue is copied with SQLite's backup API)."""

    root: Path
    cut_at: set[int] = field(default_factory=set)
    fsync_enabled: bool = True
    events: int = 0
    files: dict[str, FileImage] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)
    paths: dict[int, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _event(self) -> None:
        self.events += 1
        if self.events in self.cut_at:
            self.snapshots.append(self.snapshot())

    def snapshot(self) -> Snapshot:
        images = {p: FileImage(i.synced, i.current, i.durable_entry, i.replaced) for p, i in self.files.items()}
        return Snapshot(images, _catalog_bytes(self.root / "catalog.sqlite"), self.events)

    def adopt(self) -> None:
        """Take every file already under `root` as durable as it is (a data directory a power cut left,
        about to be opened again), so that snapshots include what this run does not write."""
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and path.name != "catalog.sqlite" and not path.name.startswith("catalog.sqlite"):
                content = path.read_bytes()
                self.files[str(path)] = FileImage(content, content, durable_entry=True)

    def open(self, path: os.PathLike[str] | str, flags: int) -> int:
        with self.lock:
            fd = super().open(path, flags)
            key = str(path)
            self.paths[fd] = key
            if not os.path.isdir(key):
                image = self.files.get(key)
                if image is None:
                    self.files[key] = FileImage()
                elif flags & os.O_TRUNC:
                    image.current = b""
            self._event()
            return fd

    def write(self, fd: int, data: memoryview) -> int:
        with self.lock:
            written = super().write(fd, data)
            image = self.files[self.paths[fd]]
            image.current += bytes(data[:written])
            self._event()
            return written

    def writev(self, fd: int, buffers: list[memoryview]) -> int:
        with self.lock:
            written = super().writev(fd, buffers)
            image = self.files[self.paths[fd]]
            image.current += b"".join(buffers)[:written]
            self._event()
            return written

    def fsync(self, fd: int) -> None:
        with self.lock:
            if self.fsync_enabled:
                super().fsync(fd)
                key = self.paths[fd]
                if os.path.isdir(key):
                    for path, image in self.files.items():
                        if os.path.dirname(path) == key:
                            image.durable_entry, image.replaced = True, None
                else:
                    image = self.files[key]
                    image.synced = image.current
            self._event()

    def pwrite(self, fd: int, data: bytes, pos: int) -> int:
        with self.lock:
            written = super().pwrite(fd, data, pos)
            image = self.files[self.paths[fd]]
            current = image.current.ljust(pos, b"\0")
            image.current = current[:pos] + data[:written] + current[pos + written :]
            self._event()
            return written

    def replace(self, source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> None:
        with self.lock:
            super().replace(source, target)
            image = self.files.pop(str(source))
            old = self.files.get(str(target))
            shown = old if old is None or old.durable_entry else old.replaced
            self.files[str(target)] = FileImage(image.synced, image.current, durable_entry=False, replaced=shown)
            self._event()

    def truncate(self, fd: int, size: int) -> None:
        with self.lock:
            super().truncate(fd, size)
            image = self.files[self.paths[fd]]
            image.current = image.current[:size]
            image.synced = image.synced[:size]  # a cut-back file may keep its old length: the worse case
            self._event()

    def close(self, fd: int) -> None:
        with self.lock:
            self.paths.pop(fd, None)
            super().close(fd)

    def unlink(self, path: os.PathLike[str] | str) -> None:
        with self.lock:
            super().unlink(path)
            self.files.pop(str(path), None)
            self._event()


def _catalog_bytes(path: Path) -> bytes:
    if not path.exists():
        return b""
    source = sqlite3.connect(path)
    target = sqlite3.connect(":memory:")
    try:
        source.backup(target)
        return target.serialize()
    finally:
        source.close()
        target.close()


def restore(
    snapshot: Snapshot, root: Path, layout_root: Path, torn: dict[str, int] | None = None, killed: bool = False
) -> None:
    """Write into `root` the data directory a power cut at the snapshot leaves: each store file with its
    synced content (plus the first `torn[path]` bytes of its unsynced rest), files whose directory entry was
    never fsync'd missing (or, renamed over another file, that file as it was synced), the catalogue as
    committed. killed=True: what a kill -9 leaves instead (the page
    cache survives, so every file holds all that was written to it, synced or not)."""
    for path, image in snapshot.files.items():
        rel = Path(path).relative_to(layout_root)
        content = image.synced
        extra = (torn or {}).get(path, 0)
        if killed:
            content = image.current
        elif extra:
            content = image.current[: len(image.synced) + extra]
        if not (image.durable_entry or killed):
            if image.replaced is None:
                continue
            content = image.replaced.synced  # the rename is lost with its directory's unsynced state
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    for sub in ("segments", "acklog"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    if snapshot.catalog:
        (root / "catalog.sqlite").write_bytes(snapshot.catalog)
