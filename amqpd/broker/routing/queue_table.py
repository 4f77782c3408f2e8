"""A vhost's queues by name, with their names also kept in sorted order.

The management API lists queues a page at a time in RabbitMQ's default order (by name within a vhost): with the
order kept here a page costs its own rows, where sorting every queue for every page made paging through 100,000
queues quadratic. Lookups stay plain dict lookups (the publish path's); only adding and removing a queue pay for
the order, in logarithmic time. Iteration keeps insertion order, as a dict's."""

from __future__ import annotations

from typing import Any, NoReturn

from sortedcontainers import SortedList

from amqpd.broker.queues.queue import Queue


class QueueTable(dict[str, Queue]):
    def __init__(self) -> None:
        super().__init__()
        self._names = SortedList()

    def __setitem__(self, name: str, q: Queue) -> None:
        if name not in self:
            self._names.add(name)
        super().__setitem__(name, q)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._names.remove(name)

    def names_in_order(self, start: int, stop: int) -> list[str]:
        """The names from position `start` to `stop` (exclusive) in sorted order."""
        return list(self._names.islice(start, stop))

    def _unordered(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("QueueTable changes only by item assignment and deletion, which keep its order")

    # The dict methods that would bypass __setitem__/__delitem__ and leave the order stale.
    pop = popitem = clear = update = setdefault = _unordered  # type: ignore[assignment]
