"""The topic exchange: routing keys matched against `*` / `#` patterns through a word trie."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from amqpd.broker.routing.exchanges.base import Exchange
from amqpd.broker.routing.route_cache import RouteCache
from amqpd.broker.routing.topic_trie import TopicTrie

# Routing keys are few in most applications, but a publisher inventing keys (ids, timestamps) must not grow
# the cache without bound; past this size each new key pushes out the oldest (route_cache.py).
ROUTE_CACHE_LIMIT = 10_000


class TopicExchange(Exchange):
    """Trie match on a cache miss; the result per routing key is cached until the bindings change."""

    type_name = "topic"

    def __init__(self, name: str, **flags: Any) -> None:
        super().__init__(name, **flags)
        self._trie = TopicTrie()
        self._cache: RouteCache[str, list[Hashable]] = RouteCache(ROUTE_CACHE_LIMIT)

    def route(self, routing_key: str, headers: dict[str, Any] | None = None) -> list[Hashable]:
        routed = self._cache.get(routing_key)
        if routed is None:
            routed = self._in_bind_order(self._trie.match(routing_key))
            self._cache.put(routing_key, routed)
        return routed

    def _on_pair_added(self, destination: Hashable, routing_key: str) -> None:
        self._trie.add(routing_key, destination)
        self._cache.clear()

    def _on_pair_removed(self, destination: Hashable, routing_key: str) -> None:
        self._trie.remove(routing_key, destination)
        self._cache.clear()
