"""What a queue needs of whoever consumes from it (a leaf module): whether it can take a message now, and
handing it one. A queue never reaches past it into channels (Consumer is the implementation)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from amqpd.broker.entry import Entry


class Subscriber(Protocol):
    priority: int  # x-priority: higher levels are served first
    exclusive: bool  # basic.consume exclusive: nobody else may consume from the queue
    no_ack: bool  # deliveries are settled when sent

    def can_accept(self) -> bool:
        """Room for one more delivery now (prefetch, flow, a writable connection)."""
        ...

    def deliver(self, queue: Any, entry: Entry) -> None:
        """Hand over one message of `queue`."""
        ...

    def room(self) -> int:
        """How many deliveries it can take now, one after another (0 exactly when can_accept() is False)."""
        ...

    def deliver_many(self, queue: Any, entries: list[Entry]) -> None:
        """deliver() each of these in turn (no more than room())."""
        ...
