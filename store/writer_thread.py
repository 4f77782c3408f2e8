"""The thread that writes and fsyncs each batch (commit.py's Writer runs in it), and the hand-off to it.

A batch goes to the thread in one put on a SimpleQueue (a C-level lock, no Condition) and comes back in one
wake-up of the event loop (call_soon_threadsafe). anyio.to_thread.run_sync, which this replaces on the commit
path, costs several times as much per call (a capacity limiter, a Condition-based queue, a cancel scope and
its checks), and the commit path makes one call per batch: at a few dozen messages per batch that was a
large share of a confirmed message's CPU.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")
R = TypeVar("R")

_Job = tuple[Callable[[Any], Any], Any, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class WriterThread:
    """One thread, started on first use, that runs the calls given to run() one at a time, in order."""

    def __init__(self, name: str = "store-write") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[[T], R], arg: T) -> R:
        """fn(arg) in the thread; its result or exception here. A cancellation waits for fn to return, as
        anyio.to_thread.run_sync does by default: the files are the thread's until then."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put((fn, arg, loop, done))
        with anyio.CancelScope(shield=True):
            result = await done
        return result

    def stop(self) -> None:
        """The thread ends once the calls already given have returned (nothing waits for it)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _work(self) -> None:
        get = self._jobs.get
        while (job := get()) is not None:
            fn, arg, loop, done = job
            try:
                result = fn(arg)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting task, whatever it is
                _hand_back(loop, _fail, done, exc)
            else:
                _hand_back(loop, _succeed, done, result)
            del job, fn, arg, done  # a batch is not kept alive until the next one arrives


def _hand_back(loop: asyncio.AbstractEventLoop, settle: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(settle, *args)
    except RuntimeError:  # the loop has closed: nobody is waiting any more
        pass


def _succeed(done: asyncio.Future[Any], result: Any) -> None:
    if not done.done():
        done.set_result(result)


def _fail(done: asyncio.Future[Any], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)
