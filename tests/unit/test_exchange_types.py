"""Exchange types as a user of RabbitMQ sees them: which queues a message reaches, and binding bookkeeping."""

from __future__ import annotations

import datetime
from collections.abc import Hashable
from decimal import Decimal
from typing import Any

import pytest

from amqpd.broker.routing.exchanges import (
    EXCHANGE_TYPES,
    DirectExchange,
    Exchange,
    FanoutExchange,
    HeadersExchange,
    TopicExchange,
    make_exchange,
)
from amqpd.broker.routing.exchanges import topic as topic_module
from amqpd.broker.routing.exchanges.base import freeze
from amqpd.errors import PRECONDITION_FAILED, ChannelError

ALL_TYPES = [DirectExchange, FanoutExchange, TopicExchange, HeadersExchange]


def queues(n: int) -> list[Hashable]:
    return [object() for _ in range(n)]


# -- registry and flags --------------------------------------------------------------------------


def test_registry_knows_the_four_standard_types() -> None:
    # and the delayed-message plugin's type, which routes as one of them (test_delayed_exchange.py), and the
    # federation plugin's upstream helper (test_federation_upstream_exchange.py)
    assert set(EXCHANGE_TYPES) == {"direct", "fanout", "topic", "headers", "x-delayed-message", "x-federation-upstream"}
    for name, cls in EXCHANGE_TYPES.items():
        assert cls.type_name == name


def test_make_exchange_passes_flags() -> None:
    x = make_exchange("topic", "logs", durable=True, auto_delete=True, internal=True, arguments={"a": 1})
    assert isinstance(x, TopicExchange)
    assert (x.name, x.durable, x.auto_delete, x.internal, x.arguments) == ("logs", True, True, True, {"a": 1})


def test_make_exchange_defaults() -> None:
    x = make_exchange("direct", "d")
    assert (x.durable, x.auto_delete, x.internal, x.arguments) == (False, False, False, {})


def test_unknown_exchange_type_raises_key_error() -> None:
    with pytest.raises(KeyError):
        make_exchange("x-consistent-hash", "h")


def test_only_headers_exchange_needs_message_headers() -> None:
    assert [cls.needs_headers for cls in ALL_TYPES] == [False, False, False, True]


# -- binding bookkeeping, common to every type ------------------------------------------


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_binding_twice_is_not_new(cls: type[Exchange]) -> None:
    x, (q,) = cls("x"), queues(1)
    assert x.bind(q, "k", {"a": 1})
    assert not x.bind(q, "k", {"a": 1})
    assert x.bindings() == [(q, "k", {"a": 1})]


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_bindings_differing_only_by_arguments_are_distinct(cls: type[Exchange]) -> None:
    x, (q,) = cls("x"), queues(1)
    assert x.bind(q, "k")
    assert x.bind(q, "k", {"a": 1})
    assert x.bind(q, "k", {"a": 2})
    assert len(x.bindings()) == 3
    assert x.unbind(q, "k", {"a": 1})
    assert x.is_bound(q, "k", {}) and x.is_bound(q, "k", {"a": 2})
    assert not x.is_bound(q, "k", {"a": 1})


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_none_and_empty_arguments_are_the_same_binding(cls: type[Exchange]) -> None:
    x, (q,) = cls("x"), queues(1)
    assert x.bind(q, "k", None)
    assert not x.bind(q, "k", {})
    assert x.bindings() == [(q, "k", {})]
    assert x.unbind(q, "k")


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_unbind_of_missing_binding_is_false(cls: type[Exchange]) -> None:
    x, (q, other) = cls("x"), queues(2)
    x.bind(q, "k")
    assert not x.unbind(other, "k")
    assert not x.unbind(q, "other")
    assert not x.unbind(q, "k", {"a": 1})
    assert x.unbind(q, "k")
    assert not x.unbind(q, "k")
    assert not x.has_bindings()


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_bindings_are_listed_in_bind_order(cls: type[Exchange]) -> None:
    x, (q1, q2) = cls("x"), queues(2)
    x.bind(q2, "b")
    x.bind(q1, "a", {"z": 1})
    x.bind(q2, "a")
    assert x.bindings() == [(q2, "b", {}), (q1, "a", {"z": 1}), (q2, "a", {})]


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_unbind_all_drops_every_binding_of_one_destination(cls: type[Exchange]) -> None:
    x, (q, other) = cls("x"), queues(2)
    x.bind(q, "a")
    x.bind(q, "b")
    x.bind(q, "b", {"x-match": "any"})
    x.bind(other, "a")
    assert x.unbind_all(q) == 3
    assert x.bindings() == [(other, "a", {})]
    assert x.unbind_all(q) == 0
    assert q not in x.route("a") and q not in x.route("b")


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_has_bindings_follows_bind_and_unbind(cls: type[Exchange]) -> None:
    x, (q,) = cls("x"), queues(1)
    assert not x.has_bindings()
    x.bind(q, "k")
    assert x.has_bindings()
    x.unbind(q, "k")
    assert not x.has_bindings()


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_stored_arguments_are_a_copy(cls: type[Exchange]) -> None:
    x, (q,) = cls("x"), queues(1)
    args: dict[str, Any] = {"a": 1}
    x.bind(q, "k", args)
    args["a"] = 2
    assert x.bindings() == [(q, "k", {"a": 1})]
    assert x.is_bound(q, "k", {"a": 1})


@pytest.mark.parametrize("cls", ALL_TYPES)
def test_exchange_can_be_a_destination(cls: type[Exchange]) -> None:
    source, target = cls("src"), FanoutExchange("dst")
    source.bind(target, "k")
    assert source.route("k", {}) == [target]


def test_arguments_with_unhashable_values_identify_bindings() -> None:
    x, (q,) = DirectExchange("x"), queues(1)
    args = {"t": {"n": [1, {"deep": b"\x00"}]}, "d": Decimal("1.5"), "l": [1, 2]}
    assert x.bind(q, "k", args)
    assert not x.bind(q, "k", {"l": [1, 2], "d": Decimal("1.5"), "t": {"n": [1, {"deep": b"\x00"}]}})
    assert x.is_bound(q, "k", args)
    assert x.unbind(q, "k", args)


def test_binding_identity_keeps_amqp_types_apart() -> None:
    # RabbitMQ's tables are typed: a bool, a long and a double are different arguments.
    assert len({freeze(True), freeze(1), freeze(1.0)}) == 3
    assert freeze(Decimal("1.0")) != freeze(Decimal("1.00"))
    assert freeze("a") != freeze(b"a")
    assert freeze([1, 2]) != freeze([2, 1])
    assert freeze({"a": 1, "b": 2}) == freeze({"b": 2, "a": 1})
    assert freeze(float("nan")) == freeze(float("nan"))
    ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    assert freeze(ts) == freeze(ts.replace())


# -- direct --------------------------------------------------------------------------


def test_direct_routes_on_exact_key() -> None:
    x, (q1, q2) = DirectExchange("d"), queues(2)
    x.bind(q1, "a")
    x.bind(q2, "b")
    assert x.route("a") == [q1]
    assert x.route("b") == [q2]
    assert x.route("c") == []
    assert x.route("A") == []


def test_direct_treats_wildcards_literally() -> None:
    x, (q,) = DirectExchange("d"), queues(1)
    x.bind(q, "a.*")
    assert x.route("a.b") == []
    assert x.route("a.*") == [q]


def test_direct_empty_key_is_a_key_like_any_other() -> None:
    x, (q,) = DirectExchange("d"), queues(1)
    x.bind(q, "")
    assert x.route("") == [q]
    assert x.route("a") == []


def test_direct_delivers_once_to_a_queue_bound_with_several_arguments() -> None:
    x, (q,) = DirectExchange("d"), queues(1)
    x.bind(q, "k")
    x.bind(q, "k", {"a": 1})
    assert x.route("k") == [q]
    x.unbind(q, "k")
    assert x.route("k") == [q]
    x.unbind(q, "k", {"a": 1})
    assert x.route("k") == []


def test_direct_routes_to_all_queues_with_the_key_in_bind_order() -> None:
    x, (q1, q2, q3) = DirectExchange("d"), queues(3)
    x.bind(q2, "other")
    x.bind(q1, "k")
    x.bind(q3, "k")
    x.bind(q2, "k")
    # q2 was bound to this exchange first, so it comes first.
    assert x.route("k") == [q2, q1, q3]


def test_direct_route_result_is_not_changed_by_later_binds() -> None:
    x, (q1, q2) = DirectExchange("d"), queues(2)
    x.bind(q1, "k")
    before = x.route("k")
    x.bind(q2, "k")
    assert before == [q1]
    assert x.route("k") == [q1, q2]


def test_direct_route_is_cached_between_changes() -> None:
    x, (q,) = DirectExchange("d"), queues(1)
    x.bind(q, "k")
    assert x.route("k") is x.route("k")


# -- fanout --------------------------------------------------------------------------


def test_fanout_ignores_routing_key() -> None:
    x, (q1, q2) = FanoutExchange("f"), queues(2)
    x.bind(q1, "a")
    x.bind(q2, "")
    assert x.route("anything") == [q1, q2]
    assert x.route("") == [q1, q2]


def test_fanout_delivers_once_per_destination() -> None:
    x, (q,) = FanoutExchange("f"), queues(1)
    x.bind(q, "a")
    x.bind(q, "b")
    x.bind(q, "b", {"z": 1})
    assert x.route("k") == [q]
    x.unbind(q, "a")
    x.unbind(q, "b")
    assert x.route("k") == [q]
    x.unbind(q, "b", {"z": 1})
    assert x.route("k") == []


def test_fanout_with_no_bindings_routes_nowhere() -> None:
    assert FanoutExchange("f").route("k") == []


def test_fanout_rebound_destination_goes_last() -> None:
    x, (q1, q2) = FanoutExchange("f"), queues(2)
    x.bind(q1, "")
    x.bind(q2, "")
    x.unbind(q1, "")
    x.bind(q1, "")
    assert x.route("k") == [q2, q1]


# -- topic --------------------------------------------------------------------------


def test_topic_tutorial_example() -> None:
    # The RabbitMQ tutorial 5 bindings and messages.
    x, (q1, q2) = TopicExchange("t"), queues(2)
    x.bind(q1, "*.orange.*")
    x.bind(q2, "*.*.rabbit")
    x.bind(q2, "lazy.#")
    assert x.route("quick.orange.rabbit") == [q1, q2]
    assert x.route("lazy.orange.elephant") == [q1, q2]
    assert x.route("quick.orange.fox") == [q1]
    assert x.route("lazy.brown.fox") == [q2]
    assert x.route("lazy.pink.rabbit") == [q2]
    assert x.route("quick.brown.fox") == []
    assert x.route("orange") == []
    assert x.route("quick.orange.male.rabbit") == []
    assert x.route("lazy.orange.male.rabbit") == [q2]


def test_hash_matches_zero_words() -> None:
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "a.#")
    assert x.route("a") == [q]


def test_hash_alone_matches_empty_routing_key() -> None:
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "#")
    assert x.route("") == [q]


def test_star_does_not_match_empty_routing_key() -> None:
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "*")
    assert x.route("") == []
    assert x.route("a") == [q]


def test_empty_binding_key_matches_only_empty_routing_key() -> None:
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "")
    assert x.route("") == [q]
    assert x.route(".") == []


def test_empty_words_are_words() -> None:
    x, (q1, q2, q3) = TopicExchange("t"), queues(3)
    x.bind(q1, "a.*.b")
    x.bind(q2, "*.a")
    x.bind(q3, "a.*")
    assert x.route("a..b") == [q1]
    assert x.route(".a") == [q2]
    assert x.route("a.") == [q3]


def test_topic_delivers_once_when_several_patterns_match() -> None:
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "#")
    x.bind(q, "a.*")
    x.bind(q, "a.b")
    x.bind(q, "a.b", {"x": 1})
    assert x.route("a.b") == [q]


def test_topic_orders_destinations_by_first_binding() -> None:
    x, (q1, q2, q3) = TopicExchange("t"), queues(3)
    x.bind(q3, "zzz")
    x.bind(q1, "a.#")
    x.bind(q2, "#")
    x.bind(q3, "a.b")
    assert x.route("a.b") == [q3, q1, q2]


def test_topic_route_cache_sees_new_and_removed_bindings() -> None:
    x, (q1, q2) = TopicExchange("t"), queues(2)
    x.bind(q1, "a.*")
    assert x.route("a.b") == [q1]
    x.bind(q2, "#")
    assert x.route("a.b") == [q1, q2]
    x.unbind(q1, "a.*")
    assert x.route("a.b") == [q2]
    x.unbind_all(q2)
    assert x.route("a.b") == []


def test_topic_binding_with_other_arguments_survives_unbind() -> None:
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "a.*")
    x.bind(q, "a.*", {"v": 1})
    x.unbind(q, "a.*")
    assert x.route("a.b") == [q]


def test_topic_route_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_module, "ROUTE_CACHE_LIMIT", 5)
    x, (q,) = TopicExchange("t"), queues(1)
    x.bind(q, "#")
    for i in range(50):
        assert x.route(f"k{i}") == [q]
        assert len(x._cache) <= 5


# -- headers --------------------------------------------------------------------------


def headers_routes(args: dict[str, Any] | None, headers: dict[str, Any] | None) -> bool:
    x, (q,) = HeadersExchange("h"), queues(1)
    x.bind(q, "", args)
    return x.route("", headers) == [q]


def test_headers_all_is_the_default() -> None:
    assert headers_routes({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3})
    assert not headers_routes({"a": 1, "b": 2}, {"a": 1})


def test_headers_all_needs_every_value_equal() -> None:
    args = {"x-match": "all", "a": 1, "b": "x"}
    assert headers_routes(args, {"a": 1, "b": "x"})
    assert not headers_routes(args, {"a": 1, "b": "y"})
    assert not headers_routes(args, {"b": "x"})


def test_headers_any_needs_one_value_equal() -> None:
    args = {"x-match": "any", "a": 1, "b": "x"}
    assert headers_routes(args, {"a": 1})
    assert headers_routes(args, {"a": 2, "b": "x"})
    assert not headers_routes(args, {"a": 2, "b": "y"})
    assert not headers_routes(args, {"c": 1})
    assert not headers_routes(args, None)


def test_headers_all_without_arguments_matches_every_message() -> None:
    assert headers_routes(None, None)
    assert headers_routes({}, {"a": 1})
    assert headers_routes({"x-match": "all"}, None)
    assert headers_routes({"x-match": "all", "x-ignored": 1}, {})


def test_headers_any_without_arguments_matches_nothing() -> None:
    assert not headers_routes({"x-match": "any"}, {"a": 1})
    assert not headers_routes({"x-match": "any", "x-ignored": 1}, {"x-ignored": 1})


def test_headers_message_without_headers_fails_all_with_arguments() -> None:
    assert not headers_routes({"a": 1}, None)
    assert not headers_routes({"a": 1}, {})


def test_headers_x_arguments_are_ignored_by_all_and_any() -> None:
    assert headers_routes({"x-match": "all", "a": 1, "x-b": 2}, {"a": 1})
    assert not headers_routes({"x-match": "any", "x-b": 2}, {"x-b": 2})


def test_headers_with_x_variants_count_x_arguments() -> None:
    dead = {"x-first-death-reason": "expired", "x-first-death-queue": "q1"}
    assert headers_routes({"x-match": "all-with-x", **dead}, {**dead, "other": 1})
    assert not headers_routes({"x-match": "all-with-x", **dead}, {"x-first-death-reason": "expired"})
    assert headers_routes({"x-match": "any-with-x", **dead}, {"x-first-death-queue": "q1"})
    assert not headers_routes({"x-match": "any-with-x", **dead}, {"x-first-death-queue": "q2"})


def test_headers_x_match_itself_is_never_matched() -> None:
    # The message does not need an x-match header, even for the *-with-x kinds.
    assert headers_routes({"x-match": "all-with-x", "a": 1}, {"a": 1})
    assert headers_routes({"x-match": "all-with-x"}, None)
    assert not headers_routes({"x-match": "any-with-x"}, {"x-match": "any-with-x"})


def test_headers_void_argument_matches_presence_with_any_value() -> None:
    assert headers_routes({"a": None}, {"a": "whatever"})
    assert headers_routes({"a": None}, {"a": None})
    assert not headers_routes({"a": None}, {"b": 1})
    assert headers_routes({"x-match": "any", "a": None, "b": 1}, {"a": 0})


def test_headers_void_header_does_not_equal_a_value() -> None:
    assert not headers_routes({"a": 1}, {"a": None})


def test_headers_numbers_compare_by_value_across_widths() -> None:
    # Erlang's == ignores the AMQP type tag: a short 1, a long 1 and a double 1.0 are equal.
    assert headers_routes({"a": 1}, {"a": 1.0})
    assert headers_routes({"a": 2.5}, {"a": 2.5})
    assert not headers_routes({"a": 1}, {"a": 2})


def test_headers_booleans_are_not_numbers() -> None:
    assert not headers_routes({"a": True}, {"a": 1})
    assert not headers_routes({"a": 0}, {"a": False})
    assert headers_routes({"a": True}, {"a": True})


def test_headers_strings_equal_byte_arrays_with_the_same_bytes() -> None:
    assert headers_routes({"a": "abc"}, {"a": b"abc"})
    assert headers_routes({"a": b"\xff"}, {"a": b"\xff"})
    assert not headers_routes({"a": "abc"}, {"a": "ABC"})


def test_headers_decimals_compare_with_their_scale() -> None:
    assert headers_routes({"a": Decimal("1.5")}, {"a": Decimal("1.5")})
    assert not headers_routes({"a": Decimal("1.0")}, {"a": Decimal("1.00")})
    assert not headers_routes({"a": Decimal("1")}, {"a": 1})


def test_headers_timestamp_equals_its_seconds() -> None:
    ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    assert headers_routes({"a": ts}, {"a": ts})
    assert headers_routes({"a": int(ts.timestamp())}, {"a": ts})


def test_headers_nested_tables_and_arrays_compare_by_content() -> None:
    assert headers_routes({"a": {"k": [1, "s"]}}, {"a": {"k": [1, "s"]}})
    assert not headers_routes({"a": {"k": [1, "s"]}}, {"a": {"k": ["s", 1]}})
    assert not headers_routes({"a": [True]}, {"a": [1]})


def test_headers_routing_key_is_ignored() -> None:
    x, (q,) = HeadersExchange("h"), queues(1)
    x.bind(q, "some-key", {"a": 1})
    assert x.route("other-key", {"a": 1}) == [q]


def test_headers_delivers_once_when_several_bindings_match() -> None:
    x, (q1, q2) = HeadersExchange("h"), queues(2)
    x.bind(q1, "", {"a": 1})
    x.bind(q2, "", {"b": 1})
    x.bind(q1, "", {"x-match": "any", "a": 1, "b": 1})
    assert x.route("", {"a": 1, "b": 1}) == [q1, q2]
    assert x.route("", {"b": 1}) == [q1, q2]


def test_headers_unbind_stops_matching() -> None:
    x, (q,) = HeadersExchange("h"), queues(1)
    x.bind(q, "", {"a": 1})
    x.bind(q, "", {"b": 1})
    x.unbind(q, "", {"a": 1})
    assert x.route("", {"a": 1}) == []
    assert x.route("", {"b": 1}) == [q]


@pytest.mark.parametrize("kind", ["all", "any", "all-with-x", "any-with-x"])
def test_headers_accepts_each_x_match_kind(kind: str) -> None:
    x, (q,) = HeadersExchange("h"), queues(1)
    assert x.bind(q, "", {"x-match": kind})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("some", 'Invalid x-match field value <<"some">>; expected all, any, all-with-x, or any-with-x'),
        ("ALL", 'Invalid x-match field value <<"ALL">>; expected all, any, all-with-x, or any-with-x'),
        (1, "Invalid x-match field type long (value 1); expected longstr"),
        (b"\xff", "Invalid x-match field type binary (value b'\\xff'); expected longstr"),
    ],
)
def test_headers_rejects_invalid_x_match_with_precondition_failed(value: Any, text: str) -> None:
    x, (q,) = HeadersExchange("h"), queues(1)
    with pytest.raises(ChannelError) as caught:
        x.bind(q, "", {"x-match": value})
    assert caught.value.code == PRECONDITION_FAILED
    assert caught.value.text == text
    assert not x.has_bindings()


def test_only_headers_validates_x_match() -> None:
    x, (q,) = DirectExchange("d"), queues(1)
    assert x.bind(q, "k", {"x-match": "bogus"})
