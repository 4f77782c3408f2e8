"""TopicTrie: RabbitMQ's topic matching rules, word by word, without an exchange around it."""

from __future__ import annotations

import pytest

from amqpd.broker.routing.topic_trie import TopicTrie, split_words

Q = object()


def matches(pattern: str, key: str) -> bool:
    trie = TopicTrie()
    trie.add(pattern, Q)
    return Q in trie.match(key)


def test_empty_key_has_no_words() -> None:
    assert split_words("") == []


def test_dots_delimit_empty_words() -> None:
    assert split_words("a..b") == ["a", "", "b"]
    assert split_words(".") == ["", ""]
    assert split_words("a.") == ["a", ""]


@pytest.mark.parametrize(
    ("pattern", "key"),
    [
        ("a.b", "a.b"),
        ("", ""),
        ("a..b", "a..b"),
        (".a", ".a"),
        ("a.", "a."),
        (".", "."),
    ],
)
def test_literal_pattern_matches_identical_key(pattern: str, key: str) -> None:
    assert matches(pattern, key)


@pytest.mark.parametrize(("pattern", "key"), [("a.b", "a"), ("a", "a.b"), ("a.b", "a.c"), ("a", "A")])
def test_literal_pattern_rejects_other_keys(pattern: str, key: str) -> None:
    assert not matches(pattern, key)


def test_star_matches_exactly_one_word() -> None:
    assert matches("a.*", "a.b")
    assert not matches("a.*", "a")
    assert not matches("a.*", "a.b.c")


def test_star_matches_an_empty_word() -> None:
    assert matches("a.*", "a.")
    assert matches("*.b", ".b")
    assert not matches("*", ".")  # "." is two empty words
    assert matches("*.*", ".")


def test_star_does_not_match_empty_key() -> None:
    # RabbitMQ splits "" into zero words, so there is no word for '*' to take.
    assert not matches("*", "")


def test_empty_pattern_matches_only_empty_key() -> None:
    assert matches("", "")
    assert not matches("", ".")
    assert not matches("", "a")


def test_hash_matches_zero_words() -> None:
    assert matches("#", "")
    assert matches("a.#", "a")
    assert matches("#.a", "a")
    assert matches("a.#.b", "a.b")


def test_hash_matches_many_words() -> None:
    assert matches("#", "a.b.c")
    assert matches("a.#", "a.b.c")
    assert matches("a.#.z", "a.b.c.z")
    assert matches("#.z", "a.b.z")


def test_hash_matches_empty_words() -> None:
    assert matches("#", ".")
    assert matches("a.#", "a.")
    assert matches("a.#", "a..")


def test_hash_respects_the_words_after_it() -> None:
    assert not matches("a.#.z", "a.b.c")
    assert not matches("#.z", "z.a")
    assert not matches("a.#", "b")


def test_star_and_hash_combine() -> None:
    assert matches("*.#", "a")
    assert not matches("*.#", "")
    assert matches("#.*", "a.b")
    assert matches("*.#.*", "a.b")
    assert not matches("*.#.*", "a")
    assert matches("#.#", "")
    assert matches("#.*.#", "x")


def test_wildcards_only_count_as_whole_words() -> None:
    assert not matches("a*", "ab")
    assert not matches("a#", "ab")
    assert matches("a*", "a*")


def test_wildcard_characters_in_a_routing_key_are_literal() -> None:
    assert matches("*", "#")
    assert not matches("a", "*")
    assert not matches("a.b", "#")


def test_many_hashes_stay_fast_on_long_keys() -> None:
    trie = TopicTrie()
    trie.add("#." * 20 + "z", Q)
    key = ".".join(["w"] * 200)
    assert trie.match(key) == set()
    assert trie.match(key + ".z") == {Q}


def test_match_returns_every_matching_destination_once() -> None:
    trie = TopicTrie()
    q1, q2, q3 = object(), object(), object()
    trie.add("a.*", q1)
    trie.add("#", q1)
    trie.add("a.b", q2)
    trie.add("b.#", q3)
    assert trie.match("a.b") == {q1, q2}


def test_add_reports_whether_the_pair_is_new() -> None:
    trie = TopicTrie()
    assert trie.add("a.b", Q)
    assert not trie.add("a.b", Q)
    assert trie.add("a.*", Q)
    assert len(trie) == 2


def test_remove_forgets_only_that_pair() -> None:
    trie = TopicTrie()
    other = object()
    trie.add("a.b", Q)
    trie.add("a.b", other)
    trie.add("a.#", Q)
    assert trie.remove("a.b", Q)
    assert trie.match("a.b") == {other, Q}  # Q still bound through a.#
    assert trie.remove("a.#", Q)
    assert trie.match("a.b") == {other}


def test_remove_of_unknown_pair_is_false() -> None:
    trie = TopicTrie()
    trie.add("a.b", Q)
    assert not trie.remove("a.c", Q)
    assert not trie.remove("a.b.c", Q)
    assert not trie.remove("a", Q)
    assert not trie.remove("a.b", object())
    assert len(trie) == 1


def test_removing_everything_prunes_the_trie() -> None:
    trie = TopicTrie()
    patterns = ["a.b.c", "a.#", "*.b", "", "#", "a..b"]
    for pattern in patterns:
        trie.add(pattern, Q)
    for pattern in patterns:
        assert trie.remove(pattern, Q)
    assert len(trie) == 0
    assert trie._root.is_empty()


def test_pruning_keeps_nodes_still_on_another_path() -> None:
    trie = TopicTrie()
    trie.add("a.b.c", Q)
    trie.add("a.b", Q)
    trie.remove("a.b.c", Q)
    assert trie.match("a.b") == {Q}
    trie.add("a.b.c", Q)
    trie.remove("a.b", Q)
    assert trie.match("a.b.c") == {Q}
    assert trie.match("a.b") == set()
