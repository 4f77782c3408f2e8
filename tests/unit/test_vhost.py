"""A virtual host's declare/delete rules and routing, with the reply codes RabbitMQ 3.10 gives."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import make_message

from amqpd import errors
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.vhost import VirtualHost

OWNER, OTHER = object(), object()


def declare_exchange(
    vh: VirtualHost,
    name: str,
    type_name: str = "direct",
    *,
    passive: bool = False,
    durable: bool = False,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: dict | None = None,
) -> Any:
    return vh.declare_exchange(
        name,
        type_name,
        passive=passive,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments or {},
    )


def declare_queue(
    vh: VirtualHost,
    name: str,
    *,
    passive: bool = False,
    durable: bool = False,
    exclusive: bool = False,
    auto_delete: bool = False,
    arguments: dict | None = None,
    owner: object = OWNER,
) -> Queue:
    return vh.declare_queue(
        name,
        passive=passive,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
        arguments=arguments or {},
        owner=owner,
    )


def route(vh: VirtualHost, exchange: str, routing_key: str, **properties: Any) -> list[str]:
    return [q.name for q in vh.route(vh.exchanges[exchange], make_message(exchange, routing_key, **properties))]


def code_of(call: Any, *args: Any, **kwargs: Any) -> tuple[int, bool]:
    """(reply code, closes the whole connection?) of the error call raises."""
    with pytest.raises(errors.AMQPError) as info:
        call(*args, **kwargs)
    return info.value.code, info.value.connection_level


@pytest.fixture
def vh() -> VirtualHost:
    return VirtualHost("/")


# -- exchanges -----------------------------------------------------------------------------------------


def test_standard_exchanges_exist(vh: VirtualHost) -> None:
    for name in ("", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"):
        assert name in vh.exchanges


def test_redeclaring_an_exchange_identically_is_ok(vh: VirtualHost) -> None:
    first = declare_exchange(vh, "x", "topic", durable=True)
    assert declare_exchange(vh, "x", "topic", durable=True) is first


@pytest.mark.parametrize(
    "change",
    [
        {"type_name": "fanout"},
        {"durable": True},
        {"auto_delete": True},
        {"internal": True},
        {"arguments": {"alternate-exchange": "ae"}},
    ],
)
def test_redeclaring_an_exchange_differently_is_406(vh: VirtualHost, change: dict) -> None:
    declare_exchange(vh, "x", "direct")
    assert code_of(declare_exchange, vh, "x", **change) == (406, False)


def test_redeclaring_an_exchange_with_other_unchecked_arguments_is_ok(vh: VirtualHost) -> None:
    first = declare_exchange(vh, "x", arguments={"x-custom": 1})
    assert declare_exchange(vh, "x", arguments={"x-custom": 2}) is first
    assert first.arguments == {"x-custom": 1}  # the exchange keeps what it was declared with


@pytest.mark.parametrize("name", ["amq.custom", ""])
def test_declaring_reserved_exchange_names_is_403(vh: VirtualHost, name: str) -> None:
    assert code_of(declare_exchange, vh, name) == (403, False)
    assert name not in vh.exchanges or name == ""


# rabbit_channel (3.7-3.12) checks the amq. prefix only when the exchange does not exist yet: redeclaring
# a standard exchange is an equivalence check like any other.
def test_redeclaring_a_standard_exchange_with_its_own_properties_is_ok(vh: VirtualHost) -> None:
    assert declare_exchange(vh, "amq.direct", "direct", durable=True) is vh.exchanges["amq.direct"]


def test_redeclaring_a_standard_exchange_differently_is_406(vh: VirtualHost) -> None:
    assert code_of(declare_exchange, vh, "amq.direct", "fanout", durable=True) == (406, False)


def test_unknown_type_is_checked_before_the_name(vh: VirtualHost) -> None:
    assert code_of(declare_exchange, vh, "", "x-made-up") == (503, True)


def test_passive_declare_of_the_default_exchange_is_403(vh: VirtualHost) -> None:
    assert code_of(declare_exchange, vh, "", passive=True) == (403, False)


def test_passive_declare_of_a_standard_exchange_is_ok(vh: VirtualHost) -> None:
    assert declare_exchange(vh, "amq.topic", passive=True).type_name == "topic"


def test_passive_declare_of_a_missing_exchange_is_404(vh: VirtualHost) -> None:
    assert code_of(declare_exchange, vh, "nope", passive=True) == (404, False)


def test_unknown_exchange_type_closes_the_connection_with_503(vh: VirtualHost) -> None:
    assert code_of(declare_exchange, vh, "x", "x-made-up") == (503, True)


def test_deleting_a_missing_exchange_is_ok(vh: VirtualHost) -> None:
    before = dict(vh.exchanges)
    vh.delete_exchange("never-declared", if_unused=False)
    assert vh.exchanges == before


def test_deleting_a_reserved_exchange_is_403(vh: VirtualHost) -> None:
    assert code_of(vh.delete_exchange, "amq.direct", False) == (403, False)


def test_delete_if_unused_refuses_an_exchange_with_bindings(vh: VirtualHost) -> None:
    declare_exchange(vh, "x")
    q = declare_queue(vh, "q")
    vh.bind("x", q, "k", {})
    assert code_of(vh.delete_exchange, "x", True) == (406, False)
    vh.unbind("x", q, "k", {})
    vh.delete_exchange("x", if_unused=True)
    assert "x" not in vh.exchanges


def test_deleting_an_exchange_removes_its_bindings_both_ways(vh: VirtualHost) -> None:
    declare_exchange(vh, "src", "fanout")
    declare_exchange(vh, "mid", "fanout")
    q = declare_queue(vh, "q")
    vh.bind("src", vh.exchanges["mid"], "", {})
    vh.bind("mid", q, "", {})
    assert route(vh, "src", "") == ["q"]
    vh.delete_exchange("mid", if_unused=False)
    assert route(vh, "src", "") == []
    assert not vh.exchanges["src"].has_bindings()


def test_auto_delete_exchange_goes_when_its_last_binding_is_removed(vh: VirtualHost) -> None:
    declare_exchange(vh, "ad", auto_delete=True)
    q = declare_queue(vh, "q")
    vh.bind("ad", q, "a", {})
    vh.bind("ad", q, "b", {})
    vh.unbind("ad", q, "a", {})
    assert "ad" in vh.exchanges
    vh.unbind("ad", q, "b", {})
    assert "ad" not in vh.exchanges


def test_auto_delete_exchange_goes_when_its_last_bound_queue_is_deleted(vh: VirtualHost) -> None:
    declare_exchange(vh, "ad", auto_delete=True)
    vh.bind("ad", declare_queue(vh, "q"), "k", {})
    vh.delete_queue("q", if_unused=False, if_empty=False, owner=OWNER)
    assert "ad" not in vh.exchanges


def test_auto_delete_exchange_without_bindings_yet_stays(vh: VirtualHost) -> None:
    declare_exchange(vh, "ad", auto_delete=True)
    assert "ad" in vh.exchanges


def test_binding_to_or_from_the_default_exchange_is_403(vh: VirtualHost) -> None:
    q = declare_queue(vh, "q")
    assert code_of(vh.bind, "", q, "k", {}) == (403, False)


def test_binding_from_a_missing_exchange_is_404(vh: VirtualHost) -> None:
    assert code_of(vh.bind, "missing", declare_queue(vh, "q"), "k", {}) == (404, False)


def test_unbinding_a_missing_binding_is_ok(vh: VirtualHost) -> None:
    declare_exchange(vh, "x")
    q = declare_queue(vh, "q")
    vh.bind("x", q, "bound", {})
    vh.unbind("x", q, "never-bound", {})
    vh.unbind("missing-exchange", q, "k", {})
    assert route(vh, "x", "bound") == ["q"]  # the binding that exists is untouched
    assert route(vh, "x", "never-bound") == []


# -- queues -----------------------------------------------------------------------------------------------


def test_queue_declared_without_a_name_gets_a_server_generated_one(vh: VirtualHost) -> None:
    q = declare_queue(vh, "")
    assert q.name.startswith("amq.gen-") and len(q.name) == len("amq.gen-") + 22
    assert vh.queues[q.name] is q


def test_declaring_an_amq_prefixed_queue_is_403(vh: VirtualHost) -> None:
    assert code_of(declare_queue, vh, "amq.mine") == (403, False)


def test_passive_declare_of_a_missing_queue_is_404(vh: VirtualHost) -> None:
    assert code_of(declare_queue, vh, "nope", passive=True) == (404, False)


def test_redeclaring_a_queue_identically_returns_it(vh: VirtualHost) -> None:
    q = declare_queue(vh, "q", durable=True, arguments={"x-message-ttl": 5})
    assert declare_queue(vh, "q", durable=True, arguments={"x-message-ttl": 5}) is q


@pytest.mark.parametrize(
    "change",
    [
        {"durable": True},
        {"auto_delete": True},
        {"arguments": {"x-message-ttl": 10}},
        {"arguments": {"x-max-length": 1}},
    ],
)
def test_redeclaring_a_queue_differently_is_406(vh: VirtualHost, change: dict) -> None:
    declare_queue(vh, "q")
    assert code_of(declare_queue, vh, "q", **change) == (406, False)


def test_redeclaring_a_queue_with_other_unchecked_arguments_is_ok(vh: VirtualHost) -> None:
    first = declare_queue(vh, "q", arguments={"x-custom": "a"})
    assert declare_queue(vh, "q", arguments={"x-custom": "b"}) is first
    assert first.arguments == {"x-custom": "a"}


def test_invalid_queue_arguments_are_406(vh: VirtualHost) -> None:
    assert code_of(declare_queue, vh, "q", arguments={"x-message-ttl": -1}) == (406, False)
    assert code_of(declare_queue, vh, "q", arguments={"x-max-priority": 256}) == (406, False)
    assert code_of(declare_queue, vh, "q", arguments={"x-overflow": "explode"}) == (406, False)
    assert "q" not in vh.queues


@pytest.mark.parametrize("argument", ["x-message-ttl", "x-expires"])
def test_ttl_arguments_over_the_largest_timer_are_406(vh: VirtualHost, argument: str) -> None:
    assert declare_queue(vh, "ok", arguments={argument: 4294967295}).name == "ok"
    assert code_of(declare_queue, vh, "q", arguments={argument: 4294967296}) == (406, False)


def test_exclusive_queue_is_locked_to_other_connections(vh: VirtualHost) -> None:
    declare_queue(vh, "mine", exclusive=True, owner=OWNER)
    assert code_of(declare_queue, vh, "mine", exclusive=True, owner=OTHER) == (405, False)
    assert code_of(declare_queue, vh, "mine", passive=True, owner=OTHER) == (405, False)
    assert code_of(vh.delete_queue, "mine", if_unused=False, if_empty=False, owner=OTHER) == (405, False)
    assert code_of(vh.purge_queue, "mine", OTHER) == (405, False)
    assert declare_queue(vh, "mine", passive=True, owner=OWNER).name == "mine"


def test_redeclaring_an_exclusive_queue_as_shared_is_405(vh: VirtualHost) -> None:
    declare_queue(vh, "mine", exclusive=True)
    assert code_of(declare_queue, vh, "mine", exclusive=False) == (405, False)


def test_exclusive_queue_is_never_durable(vh: VirtualHost) -> None:
    q = declare_queue(vh, "mine", exclusive=True, durable=True)
    assert not q.durable
    assert declare_queue(vh, "mine", exclusive=True, durable=False) is q


def test_exclusive_queues_go_with_their_connection(vh: VirtualHost) -> None:
    declare_queue(vh, "mine", exclusive=True, owner=OWNER)
    declare_queue(vh, "theirs", exclusive=True, owner=OTHER)
    declare_queue(vh, "shared", owner=OWNER)
    vh.drop_exclusive(OWNER)
    assert set(vh.queues) == {"theirs", "shared"}
    assert route(vh, "", "mine") == []


def test_deleting_a_missing_queue_is_ok_with_zero_messages(vh: VirtualHost) -> None:
    declare_queue(vh, "other")
    assert vh.delete_queue("never", if_unused=False, if_empty=False, owner=OWNER) == 0
    assert list(vh.queues) == ["other"]


def test_delete_returns_the_number_of_ready_messages(vh: VirtualHost) -> None:
    q = declare_queue(vh, "q")
    q.push(make_message("", "q"))
    q.push(make_message("", "q"))
    assert vh.delete_queue("q", if_unused=False, if_empty=False, owner=OWNER) == 2
    assert "q" not in vh.queues


def test_delete_if_empty_refuses_a_queue_with_messages(vh: VirtualHost) -> None:
    declare_queue(vh, "q").push(make_message("", "q"))
    assert code_of(vh.delete_queue, "q", if_unused=False, if_empty=True, owner=OWNER) == (406, False)
    assert "q" in vh.queues


def test_delete_if_unused_refuses_a_queue_with_consumers(vh: VirtualHost) -> None:
    q = declare_queue(vh, "q")
    q.consumers.append(object())  # type: ignore[arg-type]
    assert code_of(vh.delete_queue, "q", if_unused=True, if_empty=False, owner=OWNER) == (406, False)


def test_purge_returns_the_count_and_empties_the_queue(vh: VirtualHost) -> None:
    q = declare_queue(vh, "q")
    for _ in range(3):
        q.push(make_message("", "q"))
    assert vh.purge_queue("q", OWNER) == 3
    assert q.message_count == 0


def test_auto_delete_queue_goes_when_its_last_consumer_does(vh: VirtualHost) -> None:
    q = declare_queue(vh, "ad", auto_delete=True)
    vh.consumer_gone(q)
    assert "ad" in vh.queues  # never had a consumer: stays
    q.had_consumers = True
    vh.consumer_gone(q)
    assert "ad" not in vh.queues


# -- routing ------------------------------------------------------------------------------------------------


def test_default_exchange_routes_by_queue_name(vh: VirtualHost) -> None:
    declare_queue(vh, "orders")
    assert route(vh, "", "orders") == ["orders"]
    assert route(vh, "", "other") == []


def test_messages_flow_through_exchange_to_exchange_bindings(vh: VirtualHost) -> None:
    declare_exchange(vh, "front", "direct")
    declare_exchange(vh, "back", "fanout")
    vh.bind("front", vh.exchanges["back"], "k", {})
    vh.bind("back", declare_queue(vh, "q"), "", {})
    assert route(vh, "front", "k") == ["q"]
    assert route(vh, "front", "other") == []


def test_exchange_binding_cycles_do_not_loop(vh: VirtualHost) -> None:
    declare_exchange(vh, "a", "fanout")
    declare_exchange(vh, "b", "fanout")
    vh.bind("a", vh.exchanges["b"], "", {})
    vh.bind("b", vh.exchanges["a"], "", {})
    vh.bind("b", declare_queue(vh, "q"), "", {})
    assert route(vh, "a", "") == ["q"]


def test_queue_matched_by_several_bindings_gets_the_message_once(vh: VirtualHost) -> None:
    declare_exchange(vh, "t", "topic")
    declare_exchange(vh, "f", "fanout")
    q = declare_queue(vh, "q")
    vh.bind("t", q, "a.*", {})
    vh.bind("t", q, "#", {})
    vh.bind("t", vh.exchanges["f"], "a.b", {})
    vh.bind("f", q, "", {})
    assert route(vh, "t", "a.b") == ["q"]
    assert route(vh, "t", "a.b", headers={"CC": ["a.c"]}) == ["q"]


def test_unroutable_message_goes_to_the_alternate_exchange(vh: VirtualHost) -> None:
    declare_exchange(vh, "ae", "fanout")
    vh.bind("ae", declare_queue(vh, "unrouted"), "", {})
    declare_exchange(vh, "x", "direct", arguments={"alternate-exchange": "ae"})
    vh.bind("x", declare_queue(vh, "routed"), "k", {})
    assert route(vh, "x", "k") == ["routed"]
    assert route(vh, "x", "nothing-bound") == ["unrouted"]


def test_missing_alternate_exchange_leaves_the_message_unroutable(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct", arguments={"alternate-exchange": "not-there"})
    assert route(vh, "x", "k") == []


def test_cc_and_bcc_headers_route_to_extra_keys(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct")
    for name in ("main", "copy", "blind", "unrelated"):
        vh.bind("x", declare_queue(vh, name), name, {})
    got = route(vh, "x", "main", headers={"CC": ["copy"], "BCC": ["blind"]})
    assert sorted(got) == ["blind", "copy", "main"]


def test_cc_must_be_an_array_to_count(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct")
    vh.bind("x", declare_queue(vh, "copy"), "copy", {})
    assert route(vh, "x", "main", headers={"CC": "copy"}) == []


def test_route_cache_sees_new_bindings(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct")
    vh.bind("x", declare_queue(vh, "a"), "k", {})
    assert route(vh, "x", "k") == ["a"]
    vh.bind("x", declare_queue(vh, "b"), "k", {})
    assert route(vh, "x", "k") == ["a", "b"]


def test_route_cache_sees_unbinds(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct")
    q = declare_queue(vh, "a")
    vh.bind("x", q, "k", {})
    assert route(vh, "x", "k") == ["a"]
    vh.unbind("x", q, "k", {})
    assert route(vh, "x", "k") == []


def test_route_cache_sees_deleted_and_new_queues(vh: VirtualHost) -> None:
    assert route(vh, "", "late") == []
    declare_queue(vh, "late")
    assert route(vh, "", "late") == ["late"]
    vh.delete_queue("late", if_unused=False, if_empty=False, owner=OWNER)
    assert route(vh, "", "late") == []


def test_route_cache_sees_a_deleted_and_redeclared_exchange(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "fanout")
    vh.bind("x", declare_queue(vh, "a"), "", {})
    assert route(vh, "x", "k") == ["a"]
    vh.delete_exchange("x", if_unused=False)
    declare_exchange(vh, "x", "fanout")
    assert route(vh, "x", "k") == []


def test_route_cache_sees_an_alternate_exchange_declared_later(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct", arguments={"alternate-exchange": "ae"})
    assert route(vh, "x", "k") == []
    declare_exchange(vh, "ae", "fanout")
    vh.bind("ae", declare_queue(vh, "caught"), "", {})
    assert route(vh, "x", "k") == ["caught"]


def test_headers_exchange_routes_on_message_headers(vh: VirtualHost) -> None:
    declare_exchange(vh, "h", "headers")
    vh.bind("h", declare_queue(vh, "pdf"), "", {"x-match": "all", "format": "pdf"})
    assert route(vh, "h", "", headers={"format": "pdf"}) == ["pdf"]
    assert route(vh, "h", "", headers={"format": "zip"}) == []
    assert route(vh, "h", "") == []


def test_a_headers_exchange_behind_an_exchange_binding_sees_each_messages_headers(vh: VirtualHost) -> None:
    # The route of (x, "k") is cached on first use; a headers exchange on the way makes it depend on headers.
    declare_exchange(vh, "x", "direct")
    declare_exchange(vh, "h", "headers")
    vh.bind("x", vh.exchanges["h"], "k", {})
    vh.bind("h", declare_queue(vh, "pdf"), "", {"x-match": "all", "format": "pdf"})
    assert route(vh, "x", "k") == []
    assert route(vh, "x", "k", headers={"format": "pdf"}) == ["pdf"]
    assert route(vh, "x", "k", headers={"format": "zip"}) == []
    assert route(vh, "x", "k", headers={"format": "pdf"}) == ["pdf"]


def test_a_headers_exchange_as_alternate_sees_each_messages_headers(vh: VirtualHost) -> None:
    declare_exchange(vh, "h", "headers")
    declare_exchange(vh, "x", "direct", arguments={"alternate-exchange": "h"})
    vh.bind("h", declare_queue(vh, "pdf"), "", {"x-match": "any", "format": "pdf"})
    assert route(vh, "x", "k", headers={"format": "zip"}) == []
    assert route(vh, "x", "k", headers={"format": "pdf"}) == ["pdf"]


def test_header_values_that_look_like_cc_keys_do_not_change_the_route(vh: VirtualHost) -> None:
    declare_exchange(vh, "x", "direct")
    vh.bind("x", declare_queue(vh, "main"), "main", {})
    vh.bind("x", declare_queue(vh, "copy"), "copy", {})
    assert route(vh, "x", "main", headers={"note": "\x02CC\x03BCC", "n": 1}) == ["main"]
    assert sorted(route(vh, "x", "main", headers={"note": "\x02CC", "CC": ["copy"]})) == ["copy", "main"]


def test_messages_with_headers_are_routed_without_decoding_them(
    vh: VirtualHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applications set headers on every message; unless a headers exchange or CC/BCC needs them, routing
    takes the cached route and never decodes the table (issue 12: per-message properties cost nothing)."""
    declare_exchange(vh, "x", "topic")
    vh.bind("x", declare_queue(vh, "orders"), "order.*", {})
    msg = make_message("x", "order.eu", headers={"x-request-id": "req-1", "attempt": 3})

    def no_decode(raw: bytes) -> dict:
        raise AssertionError("the headers table was decoded")

    monkeypatch.setattr("amqpd.broker.message.decode_table", no_decode)
    assert [q.name for q in vh.route(vh.exchanges["x"], msg)] == ["orders"]


def test_unused_queue_is_deleted_after_x_expires() -> None:
    from amqpd.broker.broker import Broker
    from amqpd.config import Settings

    timers: list[tuple[float, Any]] = []
    broker = Broker(Settings(), scheduler=lambda delay, callback: timers.append((delay, callback)))
    vh = broker.vhosts["/"]
    declare_queue(vh, "temp", arguments={"x-expires": 1000})
    assert timers and all(delay <= 1.05 for delay, _ in timers)  # a timer within x-expires
    for _, callback in list(timers):
        callback()
    assert "temp" not in vh.queues


def test_quorum_queue_is_declared_durable_and_shared(vh: VirtualHost) -> None:
    q = declare_queue(vh, "qq", durable=True, arguments={"x-queue-type": "quorum"})
    assert q.durable
    assert code_of(declare_queue, vh, "qq", durable=True) == (406, False)  # x-queue-type differs


@pytest.mark.parametrize(
    ("flags", "prop"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_quorum_queue_refuses_what_rabbitmq_refuses(vh: VirtualHost, flags: dict, prop: str) -> None:
    with pytest.raises(errors.AMQPError) as info:
        declare_queue(vh, "qq", arguments={"x-queue-type": "quorum"}, **flags)
    assert info.value.code == 406
    assert f"invalid property '{prop}'" in info.value.text


def test_stream_queues_are_declared_durable_and_refused_otherwise(vh: VirtualHost) -> None:
    assert declare_queue(vh, "s", durable=True, arguments={"x-queue-type": "stream"}).is_stream
    assert code_of(declare_queue, vh, "t", arguments={"x-queue-type": "stream"}) == (406, False)
