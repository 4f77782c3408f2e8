"""glibc malloc's thresholds, set at start so that large message bodies reuse memory instead of faulting it in.

With glibc's defaults, an allocation above the mmap threshold (128 KiB at first, then rising with the sizes
freed) gets fresh pages of its own, and freed memory at the top of the heap goes back to the OS once it
exceeds the trim threshold (twice the mmap threshold). A large publish allocates its body frames (just over
128 KiB each with the default frame_max), joins them into the body and frees them: the frames' memory went
back to the OS after every message, and the next message faulted it in again, page by page (a 16 MiB body
is 4,096 pages). Page faults, not the copies, were most of the broker's CPU per MiB published.

Fixed thresholds (setting either one also stops glibc from moving them) keep allocations up to
`malloc_mmap_threshold` in the heap and up to `malloc_trim_threshold` of freed memory at its top: the next
body's frames reuse it. RSS after a burst of large messages stays at its peak instead of falling back, by at
most the trim threshold; the memory alarm trims the heap (malloc_trim) before it counts the RSS
(alarms.trimmed_rss), so it is not raised by memory that is merely kept. docs/performance.md has the figures.

Only on glibc; elsewhere, or with a setting of 0, or when MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ are
in the environment (glibc has read them already: the operator's choice), nothing is changed.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("amqpd.broker")

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc(mmap_threshold: int, trim_threshold: int) -> bool:
    """Set both thresholds (bytes); whether they were set."""
    if not (mmap_threshold and trim_threshold) or any(name in os.environ for name in ENVIRONMENT):
        return False
    import ctypes  # here, not with the module: a broker embedded in a test process never calls this

    try:  # among the symbols already loaded: ctypes.util.find_library would run ldconfig at every start
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    done = mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 and mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1
    if done:
        log.info("malloc: mmap threshold %d bytes, trim threshold %d bytes", mmap_threshold, trim_threshold)
    return done
