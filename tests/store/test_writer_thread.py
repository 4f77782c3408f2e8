"""The store's writer thread (store/writer_thread.py): each batch's write runs there, one at a time and in
order, its result or error comes back to the waiting task, and a cancelled wait still lasts until the write
has returned (the files are the thread's until then)."""

from __future__ import annotations

import threading

import anyio
import pytest

from store.writer_thread import WriterThread

pytestmark = pytest.mark.anyio


async def test_calls_run_in_one_other_thread_in_order_and_their_errors_come_back() -> None:
    writes = WriterThread()
    seen: list[tuple[int, int]] = []

    def write(n: int) -> int:
        seen.append((n, threading.get_ident()))
        if n == 3:
            raise OSError(5, "EIO")
        return n * 10

    try:
        assert [await writes.run(write, n) for n in range(3)] == [0, 10, 20]
        with pytest.raises(OSError, match="EIO"):
            await writes.run(write, 3)
        assert await writes.run(write, 4) == 40  # the thread goes on after a failed call
    finally:
        writes.stop()
    assert [n for n, _ in seen] == [0, 1, 2, 3, 4]
    threads = {ident for _, ident in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_a_cancelled_wait_returns_only_once_the_write_has() -> None:
    writes = WriterThread()
    started, release = threading.Event(), threading.Event()
    done: list[str] = []
    seen_on_return: list[list[str]] = []

    def write(_: None) -> None:
        started.set()
        release.wait(30)
        done.append("written")

    async def commit(scope: anyio.CancelScope) -> None:
        with scope:
            await writes.run(write, None)
        seen_on_return.append(list(done))

    scope = anyio.CancelScope()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(commit, scope)
            assert await anyio.to_thread.run_sync(started.wait, 30)
            scope.cancel()
            await anyio.wait_all_tasks_blocked()  # a wait that gave way to the cancellation has returned by now
            release.set()
    finally:
        release.set()
        writes.stop()
    assert seen_on_return == [["written"]]
