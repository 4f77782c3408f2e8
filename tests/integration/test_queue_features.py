"""RabbitMQ extensions that clients rely on: consumer priorities, direct reply-to, overflow and expiry
arguments, single active consumer, dead-lettering, auto-delete exchanges."""

from __future__ import annotations

import time
from collections.abc import Callable

import pika
import pytest
from pamqp import body as content
from pamqp import commands, frame, header
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError
from raw_amqp import RawConnection

Name = Callable[[str], str]
Connect = Callable[[], pika.BlockingConnection]
WAIT = 10.0


def _wait_until(conn: pika.BlockingConnection, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT}s waiting for {what}")
        conn.process_data_events(time_limit=0.05)


def _get_within(ch: BlockingChannel, queue: str) -> tuple:
    """basic.get until a message arrives (dead-lettering and expiry happen in the background)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, props, body
        ch.connection.sleep(0.05)
    raise AssertionError(f"nothing arrived in {queue} within {WAIT}s")


def test_higher_priority_consumer_gets_messages_while_it_has_capacity(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    low: list[bytes] = []
    high: list[bytes] = []
    ch.basic_consume(q, lambda _c, _m, _p, b: low.append(b), auto_ack=True, arguments={"x-priority": 1})
    ch.basic_consume(q, lambda _c, _m, _p, b: high.append(b), auto_ack=True, arguments={"x-priority": 10})
    for i in range(5):
        ch.basic_publish("", q, str(i).encode())
    _wait_until(ch.connection, lambda: len(low) + len(high) == 5, "5 deliveries")
    assert (high, low) == ([b"0", b"1", b"2", b"3", b"4"], [])


def test_direct_reply_to_routes_the_answer_back_to_the_requester(connect: Connect) -> None:
    requester = connect().channel()
    responder = connect().channel()
    service = responder.queue_declare("", exclusive=True).method.queue
    answers: list[tuple[bytes, str]] = []
    requester.basic_consume(
        "amq.rabbitmq.reply-to", lambda _c, m, p, b: answers.append((b, p.correlation_id)), auto_ack=True
    )
    requester.basic_publish(
        "", service, b"question", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="c1")
    )
    method, props, body = _get_within(responder, service)
    assert body == b"question"
    assert props.reply_to.startswith("amq.rabbitmq.reply-to.")
    responder.basic_publish("", props.reply_to, b"answer", pika.BasicProperties(correlation_id=props.correlation_id))
    _wait_until(requester.connection, lambda: bool(answers), "the reply")
    assert answers == [(b"answer", "c1")]


def test_direct_reply_to_without_consuming_first_is_refused_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "amq.gen-nowhere", b"x", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    assert info.value.reply_code == 406


def test_reject_publish_overflow_nacks_the_publisher(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    q = q.method.queue
    ch.confirm_delivery()
    ch.basic_publish("", q, b"fits")
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"refused")
    assert ch.basic_get(q, auto_ack=True)[2] == b"fits"
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_max_length_bytes_drops_oldest(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length-bytes": 10}).method.queue
    ch.confirm_delivery()
    for body in (b"aaaa", b"bbbb", b"cccc"):  # 12 bytes: the oldest goes
        ch.basic_publish("", q, body)
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"bbbb", b"cccc"]
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_unused_queue_with_x_expires_is_deleted(ch: BlockingChannel, connect: Connect, name: Name) -> None:
    q = name("expires")
    ch.queue_declare(q, arguments={"x-expires": 100})
    # Probe with mandatory publishes: publishing is not "use" (a passive declare would reset the timer).
    probe = connect().channel()
    probe.confirm_delivery()
    deadline = time.monotonic() + WAIT
    while True:
        try:
            probe.basic_publish("", q, b"probe", mandatory=True)
        except UnroutableError:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"queue with x-expires=100 still there after {WAIT}s")
        probe.connection.sleep(0.05)
    with pytest.raises(ChannelClosedByBroker) as info:
        connect().channel().queue_declare(q, passive=True)
    assert info.value.reply_code == 404


def test_message_ttl_dead_letters_with_reason_expired(ch: BlockingChannel, name: Name) -> None:
    dlx = name("dlx")
    ch.exchange_declare(dlx, "direct", auto_delete=True)
    dead = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(dead, dlx, "dead-key")
    q = ch.queue_declare(
        "",
        exclusive=True,
        arguments={"x-message-ttl": 1, "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "dead-key"},
    ).method.queue
    ch.basic_publish("", q, b"stale", pika.BasicProperties(headers={"keep": "me"}))
    method, props, body = _get_within(ch, dead)
    assert (body, method.exchange, method.routing_key) == (b"stale", dlx, "dead-key")
    assert props.headers["keep"] == "me"
    (death,) = props.headers["x-death"]
    assert (death["reason"], death["queue"], death["exchange"], death["count"]) == ("expired", q, "", 1)
    assert death["routing-keys"] == [q]
    ch.exchange_delete(dlx)


def test_per_message_expiration_is_honoured(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    # expiration "0": expires at once unless a consumer can take it right away (none here).
    ch.basic_publish("", q, b"expired", pika.BasicProperties(expiration="0"))
    ch.basic_publish("", q, b"kept", pika.BasicProperties(expiration="60000"))
    method, props, body = ch.basic_get(q, auto_ack=True)
    assert (body, props.expiration) == (b"kept", "60000")
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_single_active_consumer_delivers_to_one_consumer_then_fails_over(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True, arguments={"x-single-active-consumer": True}).method.queue
    first: list[bytes] = []
    second: list[bytes] = []
    t1 = ch.basic_consume(q, lambda _c, _m, _p, b: first.append(b), auto_ack=True)
    ch.basic_consume(q, lambda _c, _m, _p, b: second.append(b), auto_ack=True)
    for body in (b"1", b"2", b"3"):
        ch.basic_publish("", q, body)
    _wait_until(ch.connection, lambda: len(first) == 3, "3 deliveries to the active consumer")
    ch.basic_cancel(t1)
    ch.basic_publish("", q, b"4")
    _wait_until(ch.connection, lambda: len(second) == 1, "a delivery to the next consumer")
    assert (first, second) == ([b"1", b"2", b"3"], [b"4"])


def test_auto_delete_exchange_goes_with_its_last_binding(ch: BlockingChannel, name: Name) -> None:
    ex = name("x")
    ch.exchange_declare(ex, "fanout", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ex)
    ch.exchange_declare(ex, passive=True)  # bound: still there
    ch.queue_unbind(q, ex)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.exchange_declare(ex, passive=True)
    assert info.value.reply_code == 404


def test_a_backlog_behind_a_slow_consumer_does_not_stall_publishers(
    ch: BlockingChannel, amqpd_url: str, name: Name
) -> None:
    """Consumers at their prefetch limit set their own pace: RabbitMQ keeps accepting publishes however deep
    the backlog gets (until a memory alarm), so a burst of tasks behind busy workers must not hang the
    application publishing them. 25k messages is past amqpd's 20k flow-control threshold."""
    q = ch.queue_declare(name("slow"), exclusive=True).method.queue
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(q, lambda *_: None)  # takes one message and never acks it
    count = 25_000
    one = b"".join(
        frame.marshal(value, 1)
        for value in (
            commands.Basic.Publish(exchange="", routing_key=q),
            header.ContentHeader(0, 10, commands.Basic.Properties()),
            content.ContentBody(b"0123456789"),
        )
    )
    with RawConnection(amqpd_url, timeout=WAIT) as pub:
        pub.handshake()
        pub.open_channel()
        pub.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        pub.send(one * count)
        confirmed = 0
        while confirmed < count:  # a stalled publisher gets no more acks: expect() times out
            ack = pub.expect(commands.Basic.Ack, 1)
            confirmed = ack.delivery_tag
    assert ch.queue_declare(q, passive=True).method.message_count == count - 1
