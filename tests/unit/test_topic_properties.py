"""TopicTrie and TopicExchange checked against a regex model of RabbitMQ's topic matching.

The model writes each word of a key followed by '/', so "a..b" becomes "a//b/" and the empty key (no words)
becomes "". A pattern word then maps to a regex piece: a literal to itself plus '/', `*` to one word, `#` to
any number of words. The alphabet is small so that hypothesis finds collisions, empty words and wildcards.
"""

from __future__ import annotations

import re
from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st

from amqpd.broker.routing.exchanges import TopicExchange
from amqpd.broker.routing.topic_trie import TopicTrie

KEY_WORDS = st.sampled_from(["a", "b", "", "ab", "*", "#"])
PATTERN_WORDS = st.sampled_from(["a", "b", "", "ab", "*", "#"])
keys = st.lists(KEY_WORDS, max_size=6).map(".".join)
patterns = st.lists(PATTERN_WORDS, max_size=6).map(".".join)


def model_words(key: str) -> list[str]:
    return key.split(".") if key else []


def model_regex(pattern: str) -> re.Pattern[str]:
    pieces = {"*": "[^/]*/", "#": "(?:[^/]*/)*"}
    return re.compile("".join(pieces.get(w, re.escape(w) + "/") for w in model_words(pattern)))


def model_matches(pattern: str, key: str) -> bool:
    return model_regex(pattern).fullmatch("".join(w + "/" for w in model_words(key))) is not None


@given(pattern=patterns, key=keys)
def test_single_pattern_agrees_with_regex_model(pattern: str, key: str) -> None:
    trie = TopicTrie()
    trie.add(pattern, "q")
    assert (trie.match(key) == {"q"}) == model_matches(pattern, key)


# An operation is (add?, pattern, destination); destinations are small ints.
operations = st.lists(st.tuples(st.booleans(), patterns, st.integers(0, 3)), max_size=30)


@settings(max_examples=200)
@given(ops=operations, probe_keys=st.lists(keys, min_size=1, max_size=8))
def test_random_adds_and_removes_agree_with_model(ops: list[tuple[bool, str, int]], probe_keys: list[str]) -> None:
    trie = TopicTrie()
    model: set[tuple[str, int]] = set()
    for add, pattern, dest in ops:
        if add:
            assert trie.add(pattern, dest) == ((pattern, dest) not in model)
            model.add((pattern, dest))
        else:
            assert trie.remove(pattern, dest) == ((pattern, dest) in model)
            model.discard((pattern, dest))
        assert len(trie) == len(model)
    for key in probe_keys:
        expected: set[Hashable] = {d for p, d in model if model_matches(p, key)}
        assert trie.match(key) == expected


@settings(max_examples=200)
@given(ops=operations, probe_keys=st.lists(keys, min_size=1, max_size=8))
def test_exchange_routes_like_model_through_its_cache(ops: list[tuple[bool, str, int]], probe_keys: list[str]) -> None:
    exchange = TopicExchange("t")
    model: set[tuple[str, int]] = set()
    for add, pattern, dest in ops:
        if add:
            exchange.bind(dest, pattern)
            model.add((pattern, dest))
        else:
            exchange.unbind(dest, pattern)
            model.discard((pattern, dest))
        # Route between changes so stale cache entries would be caught.
        for key in probe_keys:
            routed = exchange.route(key)
            assert len(routed) == len(set(routed))
            assert set(routed) == {d for p, d in model if model_matches(p, key)}
