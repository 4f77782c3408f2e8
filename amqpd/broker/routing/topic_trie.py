"""A trie of dot-separated words that maps topic binding patterns to destinations.

Semantics follow RabbitMQ's rabbit_exchange_type_topic (3.10): a key is split on '.', every piece is a
word even when empty ("a..b" has three words, "a." has two), except that the empty key has *no* words at
all. In a pattern, `*` matches exactly one word and `#` matches zero or more words. So pattern "#" matches
the empty key but "*" does not, and the pattern "" matches only the empty key.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

STAR = "*"
HASH = "#"


def split_words(key: str) -> list[str]:
    """Words of a routing key or pattern; the empty key has zero words (RabbitMQ's split_topic_key)."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        # A dict rather than a set so iteration order only depends on the order of add() calls.
        self.destinations: dict[Hashable, None] = {}

    def is_empty(self) -> bool:
        return not self.children and not self.destinations


class TopicTrie:
    """Patterns → destinations, one trie node per word; `*` and `#` are ordinary edges resolved at match."""

    def __init__(self) -> None:
        self._root = _Node()
        self._size = 0

    def __len__(self) -> int:
        """How many (pattern, destination) pairs are stored."""
        return self._size

    def add(self, pattern: str, destination: Hashable) -> bool:
        """Store destination under pattern; True if the pair is new."""
        node = self._root
        for word in split_words(pattern):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        if destination in node.destinations:
            return False
        node.destinations[destination] = None
        self._size += 1
        return True

    def remove(self, pattern: str, destination: Hashable) -> bool:
        """Forget the pair; True if it was stored. Nodes left empty are pruned so the trie never grows
        from churn."""
        words = split_words(pattern)
        path = list(self._walk(words))
        if len(path) != len(words) + 1:
            return False
        last = path[-1][1]
        if destination not in last.destinations:
            return False
        del last.destinations[destination]
        self._size -= 1
        self._prune(path)
        return True

    def _walk(self, words: list[str]) -> Iterator[tuple[str, _Node]]:
        """(edge word, node) from the root down as far as the words lead; the root's edge word is ''."""
        node = self._root
        yield "", node
        for word in words:
            child = node.children.get(word)
            if child is None:
                return
            node = child
            yield word, node

    @staticmethod
    def _prune(path: list[tuple[str, _Node]]) -> None:
        for depth in range(len(path) - 1, 0, -1):
            word, node = path[depth]
            if not node.is_empty():
                return
            del path[depth - 1][1].children[word]

    def match(self, key: str) -> set[Hashable]:
        """Every destination whose pattern matches the routing key."""
        words = split_words(key)
        end = len(words)
        found: set[Hashable] = set()
        # (node, index of the next word to consume). `seen` keeps patterns like "#.#.#" from exploring the
        # same state many times, which bounds the work by nodes x words.
        pending: list[tuple[_Node, int]] = [(self._root, 0)]
        seen: set[tuple[int, int]] = set()
        while pending:
            node, at = pending.pop()
            state = (id(node), at)
            if state in seen:
                continue
            seen.add(state)
            children = node.children
            hash_child = children.get(HASH)
            if hash_child is not None:
                # '#' swallows zero or more words: resume after it at every remaining position.
                pending.extend((hash_child, skip) for skip in range(at, end + 1))
            if at == end:
                found.update(node.destinations)
                continue
            exact = children.get(words[at])
            if exact is not None:
                pending.append((exact, at + 1))
            star = children.get(STAR)
            if star is not None:
                pending.append((star, at + 1))
        return found
