"""Unique names per scenario run, and deletion afterwards of everything a scenario declared.

    with Scope(url) as s:
        q = s.queue("jobs")          # "itp.jobs.<token>", deleted on exit
        ...
        s.track_queue(server_named)  # amq.gen-… names returned by the broker

Every unique name carries the run token `itp<10 hex>`; the normaliser turns it into `<run>`, so the
observation of two runs (and of two brokers) compare equal.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import pika

from interop import pika_tools

TOKEN_RE = re.compile(r"itp[0-9a-f]{10}")


def new_token() -> str:
    return "itp" + secrets.token_hex(5)


class Scope:
    def __init__(self, url: str) -> None:
        self.url = url
        self.token = new_token()
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def name(self, base: str) -> str:
        """A unique name that is not tracked (routing keys, consumer tags, vhost-free things)."""
        return f"itp.{base}.{self.token}"

    def queue(self, base: str) -> str:
        n = self.name(base)
        self.track_queue(n)
        return n

    def exchange(self, base: str) -> str:
        n = self.name(base)
        self.track_exchange(n)
        return n

    def track_queue(self, name: str) -> str:
        if name and name not in self.queues:
            self.queues.append(name)
        return name

    def track_exchange(self, name: str) -> str:
        if name and name not in self.exchanges:
            self.exchanges.append(name)
        return name

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """Delete what was declared; each delete on its own channel so one failure can't stop the rest."""
        if not self.queues and not self.exchanges:
            return
        try:
            conn = pika_tools.connect(self.url)
        except Exception:  # the broker under test may be down (a crash scenario); nothing to clean then
            return
        try:
            for q in self.queues:
                _on_fresh_channel(conn, lambda ch, q=q: ch.queue_delete(q))
            for x in self.exchanges:
                _on_fresh_channel(conn, lambda ch, x=x: ch.exchange_delete(x))
        finally:
            with contextlib.suppress(Exception):
                conn.close()


def _on_fresh_channel(conn: pika.BlockingConnection, op: object) -> None:
    try:
        ch = conn.channel()
        op(ch)  # type: ignore[operator]
        ch.close()
    except pika.exceptions.ChannelClosedByBroker:
        pass  # e.g. an exclusive queue of a connection still closing: it goes away with it


@contextlib.contextmanager
def pika_session(url: str, **conn_kw: object) -> Iterator[tuple[Scope, pika.BlockingConnection, Any]]:
    """A Scope, a pika BlockingConnection and a channel; the connection closes before the cleanup."""
    with Scope(url) as s:
        conn = pika_tools.connect(url, **conn_kw)
        try:
            yield s, conn, conn.channel()
        finally:
            pika_tools.close_quietly(conn)
