"""A bounded cache of routes: when full, a new entry pushes out the oldest one, not the others.

A publisher inventing routing keys (ids, timestamps) must not grow a route cache without bound, and one that
uses a few more keys than the cache holds must not lose every cached route each time it is full (clearing it
all made each of the next misses plan its route again).

The entry pushed out is the oldest inserted (first in, first out), not the least recently used: keeping a
recency order (OrderedDict.move_to_end) or a clock's reference bit costs every hit, on the publish path, about
as much as the lookup itself, and it would only spare a hot key one miss per `limit` misses of other keys.
For keys cycling past the limit LRU misses as often as FIFO, and for keys drawn at random both hit in
proportion to the limit.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RouteCache(OrderedDict[K, V]):
    """get() is the dict's own (nothing added to a hit); put() makes room by dropping the oldest entry."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: K, value: V) -> None:
        if len(self) >= self.limit:
            self.popitem(last=False)  # O(1) in an OrderedDict (a dict's first item is found by a scan)
        self[key] = value
