"""Corners clients run into: the default exchange's rules, exclusive queues seen from another connection,
headers-exchange x- arguments, topic keys with empty words, qos changes mid-stream."""

from __future__ import annotations

import time
from collections.abc import Callable

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

Name = Callable[[str], str]
Connect = Callable[[], pika.BlockingConnection]
WAIT = 10.0


def _refused(call: Callable[[], object]) -> int:
    with pytest.raises(ChannelClosedByBroker) as info:
        call()
    return info.value.reply_code


def _wait_until(conn: pika.BlockingConnection, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT}s waiting for {what}")
        conn.process_data_events(time_limit=0.05)


def _drain(ch: BlockingChannel, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


@pytest.mark.parametrize(
    "operation",
    ["bind", "unbind", "declare", "declare-passive", "delete"],
)
def test_default_exchange_cannot_be_bound_declared_or_deleted_403(
    conn: pika.BlockingConnection, operation: str
) -> None:
    q = conn.channel().queue_declare("", exclusive=True).method.queue
    ch = conn.channel()
    calls = {
        "bind": lambda: ch.queue_bind(q, "", "k"),
        "unbind": lambda: ch.queue_unbind(q, "", q),
        "declare": lambda: ch.exchange_declare("", "direct"),
        "declare-passive": lambda: ch.exchange_declare("", passive=True),
        "delete": lambda: ch.exchange_delete(""),
    }
    assert _refused(calls[operation]) == 403


def test_redeclaring_builtin_exchange_with_its_own_properties_is_ok(ch: BlockingChannel) -> None:
    assert isinstance(ch.exchange_declare("amq.direct", "direct", durable=True).method, pika.spec.Exchange.DeclareOk)


def test_declaring_queue_named_amq_gen_is_refused_with_403(conn: pika.BlockingConnection) -> None:
    assert _refused(lambda: conn.channel().queue_declare("amq.gen-chosen-by-client")) == 403


def test_anyone_may_publish_to_an_exclusive_queue(connect: Connect) -> None:
    owner = connect().channel()
    q = owner.queue_declare("", exclusive=True).method.queue
    other = connect().channel()
    other.confirm_delivery()
    other.basic_publish("", q, b"from outside", mandatory=True)  # routed: no UnroutableError
    assert _drain(owner, q) == [b"from outside"]


@pytest.mark.parametrize("operation", ["get", "purge", "delete", "bind"])
def test_exclusive_queue_refuses_other_connections_with_405(connect: Connect, operation: str) -> None:
    owner = connect().channel()
    q = owner.queue_declare("", exclusive=True).method.queue
    ch = connect().channel()
    calls = {
        "get": lambda: ch.basic_get(q),
        "purge": lambda: ch.queue_purge(q),
        "delete": lambda: ch.queue_delete(q),
        "bind": lambda: ch.queue_bind(q, "amq.direct", "k"),
    }
    assert _refused(calls[operation]) == 405
    owner.queue_declare(q, passive=True)  # untouched


def test_headers_exchange_ignores_x_arguments_when_matching(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.headers", arguments={"x-match": "all", "x-ignored": "1", "kind": "a"})
    ch.basic_publish("amq.headers", "", b"match", pika.BasicProperties(headers={"kind": "a"}))
    ch.basic_publish("amq.headers", "", b"no", pika.BasicProperties(headers={"kind": "b", "x-ignored": "1"}))
    assert _drain(ch, q) == [b"match"]
    ch.queue_unbind(q, "amq.headers", arguments={"x-match": "all", "x-ignored": "1", "kind": "a"})


def test_headers_binding_without_keys_matches_every_message(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.headers", arguments={"x-match": "all"})
    ch.basic_publish("amq.headers", "", b"1", pika.BasicProperties(headers={"anything": 1}))
    ch.basic_publish("amq.headers", "", b"2")
    assert _drain(ch, q) == [b"1", b"2"]
    ch.queue_unbind(q, "amq.headers", arguments={"x-match": "all"})


def test_headers_binding_with_invalid_x_match_is_refused_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    assert _refused(lambda: ch.queue_bind(q, "amq.headers", arguments={"x-match": "some"})) == 406


def test_topic_keys_with_empty_words_match_literally(ch: BlockingChannel, name: Name) -> None:
    ex = name("topic")
    ch.exchange_declare(ex, "topic", auto_delete=True)
    empty_mid, star_mid, hash_hash = (ch.queue_declare("", exclusive=True).method.queue for _ in range(3))
    ch.queue_bind(empty_mid, ex, "a..b")
    ch.queue_bind(star_mid, ex, "a.*.b")
    ch.queue_bind(hash_hash, ex, "#.#")
    for key in ("a..b", "a.x.b", "a.b", ""):
        ch.basic_publish(ex, key, key.encode() or b"<empty>")
    assert _drain(ch, empty_mid) == [b"a..b"]
    assert _drain(ch, star_mid) == [b"a..b", b"a.x.b"]  # '*' matches the empty word
    assert _drain(ch, hash_hash) == [b"a..b", b"a.x.b", b"a.b", b"<empty>"]
    ch.exchange_delete(ex)


def test_new_prefetch_applies_to_consumers_created_after_it(ch: BlockingChannel) -> None:
    # RabbitMQ: basic.qos (global=false) sets the limit for each *new* consumer on the channel; a consumer
    # that already exists keeps the limit it started with.
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    for i in range(8):
        ch.basic_publish("", q, str(i).encode())
    ch.basic_qos(prefetch_count=2)
    first: list[bytes] = []
    ch.basic_consume(q, lambda _c, _m, _p, b: first.append(b))
    _wait_until(ch.connection, lambda: len(first) == 2, "2 deliveries to the first consumer")
    ch.basic_qos(prefetch_count=5)
    assert ch.queue_declare(q, passive=True).method.message_count == 6  # first consumer still held at 2
    second: list[bytes] = []
    ch.basic_consume(q, lambda _c, _m, _p, b: second.append(b))
    _wait_until(ch.connection, lambda: len(second) == 5, "5 deliveries to the second consumer")
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    assert (first, second) == ([b"0", b"1"], [b"2", b"3", b"4", b"5", b"6"])


def test_channel_close_by_client_then_reopen_same_number(conn: pika.BlockingConnection) -> None:
    ch = conn.channel(channel_number=5)
    ch.close()
    again = conn.channel(channel_number=5)
    assert again.is_open and again.channel_number == 5
