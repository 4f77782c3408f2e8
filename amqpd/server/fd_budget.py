"""How many file descriptors client sockets may take. Past RLIMIT_NOFILE every open() fails, the store's
included (a new segment, the ack log, the catalogue), so a new connection is closed as soon as it is accepted
once the fd it got is within FD_HEADROOM of the soft limit; the accept loop never meets EMFILE and never spins.
The refusals are logged at most once a second.

A standalone broker first raises its soft limit to the hard one (raise_to_hard_limit): many systems start a
process at a soft 1024 under a far higher hard limit, which would cap it near a thousand connections."""

from __future__ import annotations

import logging
import resource
import time

log = logging.getLogger("amqpd.connection")

FD_HEADROOM = 64  # fds kept for the store, the catalogue, management and the alarms' reads
LOG_EVERY_S = 1.0


def raise_to_hard_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one; returns (soft before, soft now). An unprivileged process
    may always do this. RLIM_INFINITY reads as -1; a kernel that caps it lower (nr_open) refuses, and the
    soft limit then stays as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("file descriptors: cannot raise ulimit -n from %d to %d: %s", soft, hard, exc)
        return soft, soft
    return soft, hard


class FdBudget:
    def __init__(self, headroom: int = FD_HEADROOM) -> None:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.limit = None if soft == resource.RLIM_INFINITY else soft
        self.headroom = headroom
        self.refused = 0  # since the last log line
        self._logged_at = -LOG_EVERY_S

    def admit(self, fd: int) -> bool:
        """Whether a socket just accepted as `fd` may stay: the kernel hands out the lowest free number, so
        one this high means few are left."""
        if self.limit is None or fd < self.limit - self.headroom:
            return True
        self.refused += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "refusing new connections: file descriptors nearly exhausted (ulimit -n %d, %d kept for the "
                "store); %d refused since the last such line",
                self.limit,
                self.headroom,
                self.refused,
            )
            self._logged_at, self.refused = now, 0
        return False
