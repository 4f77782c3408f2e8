"""How many file descriptors client sockets may take. Past RLIMIT_NOFILE every open() fails, the store's
included (a new segment, the ack log, the catalogue), so a new connection is closed as soon as it is accepted
once the fd it got is within FD_HEADROOM of the soft limit; the accept loop never meets EMFILE and never spins.
The refusals are logged at most once a second."""

from __future__ import annotations

import logging
import resource
import time

log = logging.getLogger("amqpd.connection")

FD_HEADROOM = 64  # fds kept for the store, the catalogue, management and the alarms' reads
LOG_EVERY_S = 1.0


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
