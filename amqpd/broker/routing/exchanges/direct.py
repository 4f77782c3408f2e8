"""The direct exchange: a message goes to the destinations bound with exactly its routing key."""

from __future__ import annotations

from bisect import insort
from collections.abc import Hashable
from typing import Any

from amqpd.broker.routing.exchanges.base import Exchange


class DirectExchange(Exchange):
    """Routing is one dict lookup: routing key -> the list of destinations, precomputed at bind time."""

    type_name = "direct"

    def __init__(self, name: str, **flags: Any) -> None:
        super().__init__(name, **flags)
        self._routes: dict[str, list[Hashable]] = {}

    def route(self, routing_key: str, headers: dict[str, Any] | None = None) -> list[Hashable]:
        routed = self._routes.get(routing_key)
        return routed if routed is not None else []

    # Lists are replaced, never changed in place, so a list handed out by route() stays valid.

    def _on_pair_added(self, destination: Hashable, routing_key: str) -> None:
        routed = list(self._routes.get(routing_key, ()))
        insort(routed, destination, key=self._rank.__getitem__)
        self._routes[routing_key] = routed

    def _on_pair_removed(self, destination: Hashable, routing_key: str) -> None:
        routed = [d for d in self._routes[routing_key] if d != destination]
        if routed:
            self._routes[routing_key] = routed
        else:
            del self._routes[routing_key]
