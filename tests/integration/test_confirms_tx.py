"""Publisher confirms and transactions as pika sees them."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, UnroutableError

Name = Callable[[str], str]
Connect = Callable[[], pika.BlockingConnection]


def _queue(ch: BlockingChannel) -> str:
    return ch.queue_declare("", exclusive=True).method.queue


def _get_all(ch: BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((body, method.redelivered))


def test_every_publish_is_confirmed(ch: BlockingChannel) -> None:
    q = _queue(ch)
    ch.confirm_delivery()
    for i in range(200):
        ch.basic_publish("", q, str(i).encode())  # raises NackError/UnroutableError unless acked
    assert ch.queue_declare(q, passive=True).method.message_count == 200


def test_publish_to_nowhere_is_still_confirmed(ch: BlockingChannel, name: Name) -> None:
    ch.confirm_delivery()
    ch.basic_publish("amq.direct", name("unbound-key"), b"x")


def test_return_of_unroutable_mandatory_message_comes_before_its_confirm(ch: BlockingChannel, name: Name) -> None:
    ch.confirm_delivery()
    # pika raises UnroutableError only when the basic.return arrived before the basic.ack.
    with pytest.raises(UnroutableError) as info:
        ch.basic_publish("amq.direct", name("unbound-key"), b"back", mandatory=True)
    (returned,) = info.value.messages
    assert (returned.method.reply_code, returned.method.reply_text, returned.body) == (312, "NO_ROUTE", b"back")
    assert ch.is_open
    q = _queue(ch)
    ch.basic_publish("", q, b"routable", mandatory=True)  # still confirmed normally afterwards


def test_persistent_messages_to_durable_queue_are_confirmed(ch: BlockingChannel, name: Name) -> None:
    q = name("durable")
    ch.queue_declare(q, durable=True)
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", q, str(i).encode(), pika.BasicProperties(delivery_mode=2))
    assert ch.queue_delete(q).method.message_count == 20


def test_tx_commit_makes_publishes_visible(ch: BlockingChannel) -> None:
    q = _queue(ch)
    ch.tx_select()
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    other = ch.connection.channel()
    assert _get_all(other, q) == []  # not before commit
    ch.tx_commit()
    assert _get_all(other, q) == [(b"1", False), (b"2", False)]


def test_tx_rollback_discards_publishes(ch: BlockingChannel) -> None:
    q = _queue(ch)
    ch.tx_select()
    ch.basic_publish("", q, b"discarded")
    ch.tx_rollback()
    ch.basic_publish("", q, b"kept")
    ch.tx_commit()
    assert _get_all(ch, q) == [(b"kept", False)]


def test_tx_commit_applies_acks(conn: pika.BlockingConnection) -> None:
    setup = conn.channel()
    q = _queue(setup)
    for body in (b"a", b"b"):
        setup.basic_publish("", q, body)
    setup.tx_select()  # makes the publishes above land before the gets below (tx is synchronous)
    setup.tx_commit()
    ch = conn.channel()
    ch.tx_select()
    tags = [ch.basic_get(q)[0].delivery_tag for _ in range(2)]
    ch.basic_ack(tags[0])
    ch.tx_commit()
    ch.close()  # "b" was never acked: requeued
    assert _get_all(setup, q) == [(b"b", True)]


def test_tx_rollback_undoes_acks(conn: pika.BlockingConnection) -> None:
    setup = conn.channel()
    q = _queue(setup)
    setup.tx_select()
    setup.basic_publish("", q, b"a")
    setup.tx_commit()
    ch = conn.channel()
    ch.tx_select()
    method, _, _ = ch.basic_get(q)
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()  # the ack is forgotten; the message stays unacked on ch
    assert _get_all(setup, q) == []
    ch.close()
    assert _get_all(setup, q) == [(b"a", True)]


def test_tx_commit_without_select_is_refused_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.tx_commit()
    assert info.value.reply_code == 406


def test_confirm_select_on_tx_channel_is_refused_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406


def test_tx_select_on_confirm_channel_is_refused_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.tx_select()
    assert info.value.reply_code == 406
