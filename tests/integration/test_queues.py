"""Queues as pika sees them: naming, declare rules, exclusivity, auto-delete, purge and delete."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

Name = Callable[[str], str]
Cleanup = Callable[[str, str], None]
Connect = Callable[[], pika.BlockingConnection]


def _publish(ch: BlockingChannel, queue: str, n: int) -> None:
    """Publishes with confirms: after a confirm the message is counted by the queue. (RabbitMQ answers a
    passive declare ahead of earlier unconfirmed publishes, so counts read without confirms are racy.)"""
    if not ch._delivery_confirmation:
        ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, str(i).encode())


def _passive_reply(connect: Connect, queue: str) -> int:
    """Reply code of a passive declare from a new connection: 200 when it succeeds."""
    ch = connect().channel()
    try:
        ch.queue_declare(queue, passive=True)
        return 200
    except ChannelClosedByBroker as e:
        return e.reply_code


def _passive_exists(connect: Connect, queue: str) -> bool:
    code = _passive_reply(connect, queue)
    assert code in (200, 404)
    return code == 200


def test_server_named_queue_starts_with_amq_gen(ch: BlockingChannel) -> None:
    ok = ch.queue_declare("", exclusive=True)
    assert ok.method.queue.startswith("amq.gen-")
    assert len(ok.method.queue) > len("amq.gen-")
    assert (ok.method.message_count, ok.method.consumer_count) == (0, 0)
    assert ch.queue_declare("", exclusive=True).method.queue != ok.method.queue


def test_declare_ok_reports_message_and_consumer_counts(ch: BlockingChannel, name: Name) -> None:
    q = name("q")
    ch.queue_declare(q, exclusive=True)
    _publish(ch, q, 3)
    ch.basic_consume(q, lambda *a: None, auto_ack=False)  # takes the messages: they become unacked
    ch.connection.process_data_events(time_limit=0)
    q2 = name("q2")
    ch.queue_declare(q2, exclusive=True)
    _publish(ch, q2, 2)
    ok = ch.queue_declare(q2, passive=True)
    assert (ok.method.message_count, ok.method.consumer_count) == (2, 0)
    ok = ch.queue_declare(q, passive=True)
    assert ok.method.consumer_count == 1


def test_passive_declare_of_missing_queue_closes_channel_with_404(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare(name("missing"), passive=True)
    assert info.value.reply_code == 404
    assert conn.is_open and conn.channel().is_open


@pytest.mark.parametrize(
    "first,second",
    [
        ({"durable": False}, {"durable": True}),
        ({"auto_delete": False}, {"auto_delete": True}),
        ({"arguments": {"x-max-length": 10}}, {"arguments": {"x-max-length": 20}}),
        ({"arguments": {"x-max-length": 10}}, {}),
    ],
    ids=["durable", "auto_delete", "argument-value", "argument-missing"],
)
def test_redeclare_with_different_properties_is_refused_with_406(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup, first: dict, second: dict
) -> None:
    q = name("q")
    cleanup("queue", q)
    ch = conn.channel()
    ch.queue_declare(q, **first)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare(q, **second)
    assert info.value.reply_code == 406


def test_redeclare_with_same_properties_is_ok(ch: BlockingChannel, name: Name, cleanup: Cleanup) -> None:
    q = name("q")
    cleanup("queue", q)
    ch.queue_declare(q, durable=True, arguments={"x-max-length": 10})
    ok = ch.queue_declare(q, durable=True, arguments={"x-max-length": 10})
    assert ok.method.queue == q


def test_invalid_queue_argument_is_refused_with_406(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare(name("q"), exclusive=True, arguments={"x-max-length": "ten"})
    assert info.value.reply_code == 406


def test_exclusive_queue_is_locked_to_its_connection_with_405(connect: Connect, name: Name) -> None:
    owner = connect().channel()
    q = name("excl")
    owner.queue_declare(q, exclusive=True)
    other = connect()
    with pytest.raises(ChannelClosedByBroker) as info:
        other.channel().basic_consume(q, lambda *a: None)
    assert info.value.reply_code == 405
    with pytest.raises(ChannelClosedByBroker) as info:
        other.channel().queue_declare(q, exclusive=True)
    assert info.value.reply_code == 405
    with pytest.raises(ChannelClosedByBroker) as info:
        other.channel().queue_declare(q, passive=True)
    assert info.value.reply_code == 405


def test_exclusive_queue_is_deleted_when_its_connection_closes(connect: Connect, name: Name) -> None:
    owner = connect()
    q = name("excl")
    owner.channel().queue_declare(q, exclusive=True)
    assert _passive_reply(connect, q) == 405  # exists, locked to its owner
    owner.close()
    assert _passive_reply(connect, q) == 404


def test_auto_delete_queue_is_deleted_after_last_consumer_cancels(
    conn: pika.BlockingConnection, connect: Connect, name: Name
) -> None:
    ch = conn.channel()
    q = name("autodel")
    ch.queue_declare(q, auto_delete=True)
    t1 = ch.basic_consume(q, lambda *a: None)
    t2 = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(t1)
    assert _passive_exists(connect, q)  # one consumer left
    ch.basic_cancel(t2)
    assert not _passive_exists(connect, q)


def test_auto_delete_queue_without_consumers_stays(ch: BlockingChannel, connect: Connect, name: Name) -> None:
    q = name("autodel")
    ch.queue_declare(q, auto_delete=True)
    assert _passive_exists(connect, q)
    ch.queue_delete(q)


def test_purge_returns_the_number_of_messages_removed(ch: BlockingChannel, name: Name) -> None:
    q = name("q")
    ch.queue_declare(q, exclusive=True)
    _publish(ch, q, 7)
    assert ch.queue_purge(q).method.message_count == 7
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    assert ch.queue_purge(q).method.message_count == 0


def test_purge_leaves_unacked_messages(ch: BlockingChannel, name: Name) -> None:
    q = name("q")
    ch.queue_declare(q, exclusive=True)
    _publish(ch, q, 3)
    method, _, _ = ch.basic_get(q, auto_ack=False)
    assert ch.queue_purge(q).method.message_count == 2
    ch.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.redelivered, method.message_count) == (b"0", True, 0)


def test_delete_if_empty_refuses_queue_with_messages(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup
) -> None:
    q = name("q")
    cleanup("queue", q)
    ch = conn.channel()
    ch.queue_declare(q)
    _publish(ch, q, 1)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_delete(q, if_empty=True)
    assert info.value.reply_code == 406
    assert conn.channel().queue_declare(q, passive=True).method.message_count == 1


def test_delete_if_unused_refuses_queue_with_consumers(
    conn: pika.BlockingConnection, name: Name, cleanup: Cleanup
) -> None:
    q = name("q")
    cleanup("queue", q)
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_consume(q, lambda *a: None)
    other = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        other.queue_delete(q, if_unused=True)
    assert info.value.reply_code == 406


def test_delete_returns_the_number_of_messages_deleted(ch: BlockingChannel, name: Name, connect: Connect) -> None:
    q = name("q")
    ch.queue_declare(q)
    _publish(ch, q, 5)
    assert ch.queue_delete(q).method.message_count == 5
    assert not _passive_exists(connect, q)


def test_deleting_missing_queue_is_ok(ch: BlockingChannel, name: Name) -> None:
    assert ch.queue_delete(name("missing")).method.message_count == 0


def test_queue_name_of_255_bytes_is_accepted(ch: BlockingChannel) -> None:
    # 255 bytes is also the most a short string can carry: a longer name cannot even be encoded
    # (pika raises ShortStringTooLong before sending), so the wire format enforces the limit.
    q = "€" * 85  # 85 three-byte UTF-8 characters
    assert len(q.encode()) == 255
    assert ch.queue_declare(q, exclusive=True).method.queue == q
    ch.basic_publish("", q, b"x")
    assert ch.basic_get(q, auto_ack=True)[2] == b"x"
    with pytest.raises(pika.exceptions.ShortStringTooLong):
        ch.queue_declare(q + "x", exclusive=True)


def test_queue_names_with_spaces_slashes_and_unicode_work(ch: BlockingChannel) -> None:
    # RabbitMQ accepts any UTF-8 in names (pamqp's own validation is stricter).
    q = f"it q/é#*:{threading.get_ident()}"
    assert ch.queue_declare(q, exclusive=True).method.queue == q
    ch.basic_publish("", q, b"x")
    assert ch.basic_get(q, auto_ack=True)[2] == b"x"


def test_declaring_amq_prefixed_queue_is_refused_with_403(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("amq.it-test-not-allowed")
    assert info.value.reply_code == 403


def test_bind_to_missing_exchange_is_refused_with_404(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_bind(q, name("missing"), "k")
    assert info.value.reply_code == 404


def test_consume_from_missing_queue_is_refused_with_404(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_consume(name("missing"), lambda *a: None)
    assert info.value.reply_code == 404


def test_max_length_drops_oldest_messages(ch: BlockingChannel, name: Name) -> None:
    q = name("q")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-length": 2})
    _publish(ch, q, 5)
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"3", b"4"]
    assert ch.basic_get(q, auto_ack=True)[0] is None
