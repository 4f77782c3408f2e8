"""Memory and disk alarms, as RabbitMQ raises them: while one is on, connections that publish are
blocked (connection.blocked to clients that asked for it, and their socket is not read), so queues
drain through their consumers instead of the broker running out of memory or disk."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.config import Settings

log = logging.getLogger("amqpd.alarms")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_statm: list[int] = []  # /proc/self/statm, opened once: out of file descriptors it must still be readable


def process_rss() -> int:
    try:
        if not _statm:
            _statm.append(os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_statm[0], 256, 0).split()[1]) * _PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the peak: better than nothing


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, where there is one. Looked up among the symbols already loaded (CDLL(None)), not
    with ctypes.util.find_library, which runs ldconfig in a subprocess; ctypes itself is imported on first use,
    not with the broker, whose start is mostly imports."""
    import ctypes

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    except (OSError, AttributeError):
        return None


_trim: list[Callable[[int], int] | None] = []  # looked up on the first trimmed_rss()


def trimmed_rss() -> int:
    """The RSS once freed heap memory has gone back to the OS. Freed message bodies stay in malloc's heap
    (its mmap threshold rises with the sizes it has seen), so a drained queue would otherwise keep the memory
    alarm up for good, as the resident size never falls."""
    if not _trim:
        _trim.append(_malloc_trim())
    if _trim[0] is not None:
        _trim[0](0)
    return process_rss()


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def memory_limit(settings: Settings) -> int:
    w = settings.memory_high_watermark
    return int(w * total_memory()) if w <= 1 else int(w)


class Alarms:
    def __init__(self, broker: Broker, settings: Settings) -> None:
        self.broker = broker
        self.settings = settings
        self.memory_limit = memory_limit(settings)
        self.active: set[str] = set()
        store = broker.store
        if store is not None:
            store.on_disk_full = self.store_full  # a write failed with ENOSPC: raise the alarm at once

    def store_full(self, full: bool) -> None:
        """A write failed with ENOSPC (full) or there is room again. The alarm goes up at once and is only
        lowered by the next regular check: the reserve released at the failure could otherwise make the very
        same check find room and clear it before any publisher was blocked."""
        if full:
            self._set("disk", True)
            self._publish()
        else:
            self.check()

    def check(self) -> None:
        # trimming costs a walk of the heap: only while the plain reading is over the limit
        self._set("memory", process_rss() > self.memory_limit and trimmed_rss() > self.memory_limit)
        data_dir = self.settings.data_dir
        if data_dir and os.path.isdir(data_dir):
            # The store's own verdict counts too: a write that failed with ENOSPC holds the alarm until
            # there is room for what failed, whatever disk_free_limit says.
            store = self.broker.store
            store_full = store is not None and store.check_space()
            self._set("disk", store_full or shutil.disk_usage(data_dir).free < self.settings.disk_free_limit)
        self._publish()

    def _publish(self) -> None:
        """Tell the broker and every connection which alarms are up (a cleared last alarm was told by _set)."""
        self.broker.alarms = frozenset(self.active)
        if self.active:
            for session in list(self.broker.connections):
                session.apply_alarms()

    def _set(self, name: str, on: bool) -> None:
        if on and name not in self.active:
            log.warning("%s alarm set: blocking publishers", name)
            self.active.add(name)
        elif not on and name in self.active:
            log.warning("%s alarm cleared", name)
            self.active.discard(name)
            if not self.active:
                self.broker.alarms = frozenset()
                for session in list(self.broker.connections):
                    session.apply_alarms()

    async def run(self) -> None:
        """Housekeeping once per alarm_interval: the coarse clock, resource alarms, ack timeouts, paused
        publishers put to the test again (Broker.check_flow)."""
        while True:
            now = self.broker.clock = time.monotonic()
            self.check()
            self.broker.check_flow()
            self.check_ack_timeouts(now)
            await asyncio.sleep(self.settings.alarm_interval)

    def check_ack_timeouts(self, now: float) -> None:
        """Only the channels that held unacked deliveries since the last check (Connections.unacked_channels):
        with thousands of idle connections, visiting each one's channels every interval adds up. Not inline
        in run(): its loop variable would hold the last channel (and its connection, closed or not) for as
        long as the broker runs."""
        watched = self.broker.connections.unacked_channels
        timeout_ms = self.settings.consumer_timeout
        for ch in list(watched):
            if not ch.conn.check_ack_timeout(ch, now, timeout_ms):
                del watched[ch]
