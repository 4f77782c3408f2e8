"""Exchanges as pika sees them: declare, refuse, delete, and routing through bindings."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

Name = Callable[[str], str]
Cleanup = Callable[[str, str], None]


def _queue(ch: BlockingChannel) -> str:
    return ch.queue_declare("", exclusive=True).method.queue


def _drain(ch: BlockingChannel, queue: str) -> list[bytes]:
    bodies = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_declare_each_exchange_type_then_passive_declare_finds_it(ch: BlockingChannel, name: Name, kind: str) -> None:
    ex = name(kind)
    ok = ch.exchange_declare(ex, kind, auto_delete=True)
    assert isinstance(ok.method, pika.spec.Exchange.DeclareOk)
    assert isinstance(ch.exchange_declare(ex, passive=True).method, pika.spec.Exchange.DeclareOk)
    ch.exchange_delete(ex)


def test_passive_declare_of_missing_exchange_closes_channel_with_404(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare(name("missing"), passive=True)
    assert info.value.reply_code == 404
    assert ch.is_closed
    assert conn.is_open
    assert conn.channel().is_open


def test_redeclare_with_other_type_is_refused_with_406(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup
) -> None:
    ex = name("x")
    cleanup("exchange", ex)
    ch = conn.channel()
    ch.exchange_declare(ex, "direct")
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare(ex, "fanout")
    assert info.value.reply_code == 406
    assert conn.is_open


def test_redeclare_with_other_durability_is_refused_with_406(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup
) -> None:
    ex = name("x")
    cleanup("exchange", ex)
    ch = conn.channel()
    ch.exchange_declare(ex, "direct", durable=False)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare(ex, "direct", durable=True)
    assert info.value.reply_code == 406


def test_unknown_exchange_type_closes_connection_with_503(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    with pytest.raises(ConnectionClosedByBroker) as info:
        ch.exchange_declare(name("x"), "no-such-type")
    assert info.value.reply_code == 503
    assert conn.is_closed


def test_declaring_amq_prefixed_exchange_is_refused_with_403(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare("amq.it-test-not-allowed", "direct")
    assert info.value.reply_code == 403


def test_deleting_builtin_amq_exchange_is_refused_with_403(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_delete("amq.direct")
    assert info.value.reply_code == 403
    assert isinstance(conn.channel().exchange_declare("amq.direct", passive=True).method, pika.spec.Exchange.DeclareOk)


def test_builtin_exchanges_exist(ch: BlockingChannel) -> None:
    for ex in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"):
        assert isinstance(ch.exchange_declare(ex, passive=True).method, pika.spec.Exchange.DeclareOk)


def test_publish_to_internal_exchange_is_refused_with_403(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup
) -> None:
    ex = name("internal")
    cleanup("exchange", ex)
    ch = conn.channel()
    ch.exchange_declare(ex, "fanout", internal=True)
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish(ex, "", b"x")
    assert info.value.reply_code == 403


def test_publish_to_missing_exchange_is_refused_with_404(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish(name("missing"), "", b"x")
    assert info.value.reply_code == 404


def test_delete_if_unused_refuses_exchange_with_bindings(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup
) -> None:
    ex = name("x")
    cleanup("exchange", ex)
    ch = conn.channel()
    ch.exchange_declare(ex, "fanout")
    ch.queue_bind(_queue(ch), ex)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_delete(ex, if_unused=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    ch.exchange_declare(ex, passive=True)  # still there


def test_delete_if_unused_deletes_exchange_without_bindings(ch: BlockingChannel, name: Name) -> None:
    ex = name("x")
    ch.exchange_declare(ex, "fanout")
    assert isinstance(ch.exchange_delete(ex, if_unused=True).method, pika.spec.Exchange.DeleteOk)


def test_deleting_missing_exchange_is_ok(ch: BlockingChannel, name: Name) -> None:
    assert isinstance(ch.exchange_delete(name("missing")).method, pika.spec.Exchange.DeleteOk)


def test_default_exchange_routes_by_queue_name(ch: BlockingChannel) -> None:
    q = _queue(ch)
    ch.basic_publish("", q, b"hello")
    assert _drain(ch, q) == [b"hello"]


def test_direct_exchange_routes_by_exact_key(ch: BlockingChannel, name: Name) -> None:
    ex = name("direct")
    ch.exchange_declare(ex, "direct", auto_delete=True)
    qa, qb = _queue(ch), _queue(ch)
    ch.queue_bind(qa, ex, "a")
    ch.queue_bind(qb, ex, "b")
    ch.queue_bind(qb, ex, "a")
    for key in ("a", "b", "c"):
        ch.basic_publish(ex, key, key.encode())
    assert _drain(ch, qa) == [b"a"]
    assert _drain(ch, qb) == [b"a", b"b"]
    ch.exchange_delete(ex)


def test_fanout_exchange_routes_to_every_bound_queue(ch: BlockingChannel, name: Name) -> None:
    ex = name("fanout")
    ch.exchange_declare(ex, "fanout", auto_delete=True)
    queues = [_queue(ch) for _ in range(3)]
    for q in queues:
        ch.queue_bind(q, ex, "ignored")
    ch.basic_publish(ex, "anything", b"m")
    assert [_drain(ch, q) for q in queues] == [[b"m"]] * 3
    ch.exchange_delete(ex)


def test_topic_exchange_matches_star_and_hash(ch: BlockingChannel, name: Name) -> None:
    ex = name("topic")
    ch.exchange_declare(ex, "topic", auto_delete=True)
    patterns = {"star": "a.*.c", "hash": "a.#", "exact": "a.b.c", "lone-hash": "#", "mid-hash": "a.#.c"}
    queues = {}
    for label, pattern in patterns.items():
        queues[label] = _queue(ch)
        ch.queue_bind(queues[label], ex, pattern)
    for key in ("a.b.c", "a", "a.c", "a.b.b.c", "x.b.c", ""):
        ch.basic_publish(ex, key, key.encode())
    got = {label: _drain(ch, q) for label, q in queues.items()}
    assert got == {
        "star": [b"a.b.c"],
        "hash": [b"a.b.c", b"a", b"a.c", b"a.b.b.c"],
        "exact": [b"a.b.c"],
        "lone-hash": [b"a.b.c", b"a", b"a.c", b"a.b.b.c", b"x.b.c", b""],
        "mid-hash": [b"a.b.c", b"a.c", b"a.b.b.c"],
    }
    ch.exchange_delete(ex)


def test_headers_exchange_matches_all_and_any(ch: BlockingChannel, name: Name) -> None:
    ex = name("headers")
    ch.exchange_declare(ex, "headers", auto_delete=True)
    q_all, q_any = _queue(ch), _queue(ch)
    ch.queue_bind(q_all, ex, arguments={"x-match": "all", "color": "red", "size": 1})
    ch.queue_bind(q_any, ex, arguments={"x-match": "any", "color": "red", "size": 1})
    cases = {
        b"both": {"color": "red", "size": 1},
        b"color": {"color": "red"},
        b"none": {"color": "blue", "size": 2},
        b"no-headers": None,
    }
    for body, headers in cases.items():
        ch.basic_publish(ex, "", body, pika.BasicProperties(headers=headers))
    assert _drain(ch, q_all) == [b"both"]
    assert _drain(ch, q_any) == [b"both", b"color"]
    ch.exchange_delete(ex)


def test_exchange_to_exchange_binding_routes_through(ch: BlockingChannel, name: Name, cleanup: Cleanup) -> None:
    src, dst = name("src"), name("dst")
    cleanup("exchange", src)
    cleanup("exchange", dst)
    # Not auto_delete: an auto-delete source would vanish with its last binding at the unbind below.
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "direct")
    ch.exchange_bind(dst, src, "k.*")
    q = _queue(ch)
    ch.queue_bind(q, dst, "k.1")
    ch.basic_publish(src, "k.1", b"routed")
    ch.basic_publish(src, "k.2", b"not-bound-on-dst")
    ch.basic_publish(src, "j.1", b"not-bound-on-src")
    assert _drain(ch, q) == [b"routed"]
    ch.exchange_unbind(dst, src, "k.*")
    ch.basic_publish(src, "k.1", b"after-unbind")
    assert _drain(ch, q) == []
    ch.exchange_delete(src)
    ch.exchange_delete(dst)


def test_unbind_stops_routing_and_unbinding_missing_binding_is_ok(ch: BlockingChannel, name: Name) -> None:
    ex = name("direct")
    ch.exchange_declare(ex, "direct", auto_delete=False)
    q = _queue(ch)
    ch.queue_bind(q, ex, "k")
    ch.basic_publish(ex, "k", b"1")
    ch.queue_unbind(q, ex, "k")
    ch.basic_publish(ex, "k", b"2")
    assert _drain(ch, q) == [b"1"]
    assert isinstance(ch.queue_unbind(q, ex, "never-bound").method, pika.spec.Queue.UnbindOk)
    ch.exchange_delete(ex)


def test_message_matched_by_two_bindings_is_delivered_once(ch: BlockingChannel, name: Name) -> None:
    ex = name("topic")
    ch.exchange_declare(ex, "topic", auto_delete=True)
    q = _queue(ch)
    ch.queue_bind(q, ex, "a.*")
    ch.queue_bind(q, ex, "#")
    ch.basic_publish(ex, "a.b", b"once")
    assert _drain(ch, q) == [b"once"]
    ch.exchange_delete(ex)


def test_alternate_exchange_receives_unroutable_messages(ch: BlockingChannel, name: Name) -> None:
    main, alt = name("main"), name("alt")
    ch.exchange_declare(alt, "fanout", auto_delete=True)
    ch.exchange_declare(main, "direct", auto_delete=True, arguments={"alternate-exchange": alt})
    q_main, q_alt = _queue(ch), _queue(ch)
    ch.queue_bind(q_main, main, "k")
    ch.queue_bind(q_alt, alt)
    ch.basic_publish(main, "k", b"routed")
    ch.basic_publish(main, "other", b"unroutable")
    assert _drain(ch, q_main) == [b"routed"]
    assert _drain(ch, q_alt) == [b"unroutable"]
    ch.exchange_delete(main)
    ch.exchange_delete(alt)
