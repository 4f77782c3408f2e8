"""Reading records back in the store's read worker, again after a failure, never on the event loop.

A read the worker could not do (an I/O error: a disk that fails for a while, a file that cannot be opened) is
asked of the worker again after RETRY_S, and again, for as long as what waits on it still wants it: the
queue, the dead letter or the delayed message waits longer, and the log says why each time. Reading it on the
loop instead, as a last chance, would stall every client for as long as the failing disk takes to answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("amqpd.broker")

RETRY_S = 1.0  # between a failed read and the next try: a failing disk is not asked in a busy loop


def read_in_worker(
    store: Any,
    what: str,
    done: Callable[[Any], None],
    read: Callable[..., Any],
    *args: Any,
    wanted: Callable[[], bool] = lambda: True,
) -> None:
    """Run `read(*args)` in the store's read worker and call `done(result)` on the loop once it succeeds. A
    failed read is tried again (RETRY_S later) while `wanted()`; a cancelled one (the store closing) ends
    there, as does one no longer wanted. `what` names the read in the log."""
    future = store.in_reader(read, *args)

    def finished(f: asyncio.Future[Any]) -> None:
        if f.cancelled():
            return
        error = f.exception()
        if error is None:
            done(f.result())
            return
        if not wanted():
            return
        log.warning("%s: reading from the store failed (%s); trying again in %.1f s", what, error, RETRY_S)
        asyncio.get_running_loop().call_later(RETRY_S, again)

    def again() -> None:
        if wanted():
            try:
                read_in_worker(store, what, done, read, *args, wanted=wanted)
            except RuntimeError as exc:  # the store's worker has been shut down: the broker is stopping
                log.debug("%s: not read again (%s)", what, exc)

    future.add_done_callback(finished)
