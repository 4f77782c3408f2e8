"""A transactional channel's held work (tx.select): the publishes and the acks, nacks and rejects it has taken
since the last commit or rollback, applied at tx.commit in the order they came, or dropped.

A commit answers commit-ok only once every held publish is stored; if the store fails one, the channel closes
with 406 "partial tx completion" instead, as rabbit_channel's complete_tx does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from amqpd import errors
from amqpd.broker.delivery.unacked import Outstanding, Run
from amqpd.broker.message import Message

Settle = tuple[str, list[Run[Any]], bool]  # (kind: ack, nack or reject; the deliveries it took; requeue)


class Committer(Protocol):
    """What a commit needs of its channel."""

    closing: bool
    unacked: Outstanding

    def publish_held(
        self, msg: Message, mandatory: bool, on_stored: Callable[[], None], on_failed: Callable[[], None]
    ) -> bool:
        """Publish one held message; False when nothing will be stored (no callback will come)."""

    def apply_settle(self, kind: str, taken: list[Run[Any]], requeue: bool) -> None: ...
    def committed(self) -> None: ...
    def commit_failed(self, exc: errors.AMQPError) -> None: ...


class Transaction:
    __slots__ = ("publishes", "acks")

    def __init__(self) -> None:
        self.publishes: list[tuple[Message, bool]] = []  # (message, mandatory)
        self.acks: list[Settle] = []

    def hold_publish(self, msg: Message, mandatory: bool) -> None:
        self.publishes.append((msg, mandatory))

    def hold_settle(self, kind: str, taken: list[Run[Any]], requeue: bool) -> None:
        self.acks.append((kind, taken, requeue))

    def drop(self, unacked: Outstanding) -> None:
        """Rollback (or the channel closing): the held deliveries are outstanding again, the publishes gone."""
        for _kind, taken, _requeue in self.acks:
            unacked.restore(taken)
        self.publishes, self.acks = [], []

    def commit(self, ch: Committer) -> None:
        publishes, acks = self.publishes, self.acks
        self.publishes, self.acks = [], []
        waiting = [1]  # held at one until every publish is in, so commit-ok cannot go out early
        failed = [False]

        def stored() -> None:
            waiting[0] -= 1
            if waiting[0] or ch.closing:
                return
            if failed[0]:
                # rabbit_channel's complete_tx for a failed tx: the channel closes, no commit-ok
                ch.commit_failed(errors.precondition_failed("partial tx completion").with_method(90, 20))
            else:
                ch.committed()

        def not_stored() -> None:
            failed[0] = True
            stored()

        for msg, mandatory in publishes:
            waiting[0] += 1
            if not ch.publish_held(msg, mandatory, stored, not_stored):
                waiting[0] -= 1
        for i, (kind, taken, requeue) in enumerate(acks):
            try:
                ch.apply_settle(kind, taken, requeue)
            except errors.AMQPError:
                for _kind, rest, _requeue in acks[i + 1 :]:  # not applied: back, as apply_settle put this one
                    ch.unacked.restore(rest)
                raise
        stored()
