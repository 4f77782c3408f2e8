"""The fanout exchange: every bound destination gets every message; the routing key is ignored."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from amqpd.broker.routing.exchanges.base import Exchange


class FanoutExchange(Exchange):
    """The destination list is the same for every message, so it is built once per binding change, and only
    when a message next needs it: binding many queues in a row then copies no list per binding."""

    type_name = "fanout"

    def __init__(self, name: str, **flags: Any) -> None:
        super().__init__(name, **flags)
        self._all: list[Hashable] | None = []  # None: stale, rebuilt by the next route()

    def route(self, routing_key: str, headers: dict[str, Any] | None = None) -> list[Hashable]:
        if self._all is None:  # a new list: one handed out earlier may be cached, and must not change
            self._all = list(self._by_destination)
        return self._all

    # A destination appears or disappears only when its first/last binding does; several bindings to one
    # destination (different keys or arguments) still deliver once.

    def _on_pair_added(self, destination: Hashable, routing_key: str) -> None:
        self._all = None

    def _on_pair_removed(self, destination: Hashable, routing_key: str) -> None:
        self._all = None
