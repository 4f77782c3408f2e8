"""basic.* as pika sees it: returns, consume, ack/nack/reject, recover, qos, get, cancel, redelivery."""

from __future__ import annotations

import time
from collections.abc import Callable

import amqp
import pika
import pytest
from pika import spec
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

Name = Callable[[str], str]
Connect = Callable[[], pika.BlockingConnection]
Delivery = tuple[spec.Basic.Deliver, spec.BasicProperties, bytes]

WAIT = 10.0  # seconds: an upper bound for the broker to send what we wait for


def _queue(ch: BlockingChannel, name: Name | None = None, **kw: object) -> str:
    return ch.queue_declare(name("q") if name else "", exclusive=True, **kw).method.queue


def _publish(ch: BlockingChannel, queue: str, n: int, start: int = 0) -> None:
    """Publish bodies b"0".. with confirms, so the queue holds them all when this returns."""
    if not ch._delivery_confirmation:
        ch.confirm_delivery()
    for i in range(start, start + n):
        ch.basic_publish("", queue, str(i).encode())


def _wait_until(conn: pika.BlockingConnection, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT}s waiting for {what}")
        conn.process_data_events(time_limit=0.05)


def _consume(ch: BlockingChannel, queue: str, auto_ack: bool = False, **kw: object) -> tuple[str, list[Delivery]]:
    got: list[Delivery] = []
    tag = ch.basic_consume(queue, lambda _c, m, p, b: got.append((m, p, b)), auto_ack=auto_ack, **kw)
    return tag, got


def _consume_n(ch: BlockingChannel, queue: str, n: int, auto_ack: bool = False) -> list[Delivery]:
    tag, got = _consume(ch, queue, auto_ack)
    _wait_until(ch.connection, lambda: len(got) >= n, f"{n} deliveries")
    ch.basic_cancel(tag)
    return got


def _ready(ch: BlockingChannel, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def _bodies(deliveries: list[Delivery]) -> list[bytes]:
    return [b for _, _, b in deliveries]


def _get_all(ch: BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((body, method.redelivered))


# --- mandatory / immediate -------------------------------------------------------------------------------


def test_unroutable_mandatory_message_is_returned_with_its_properties_and_body(ch: BlockingChannel, name: Name) -> None:
    returned: list[tuple[spec.Basic.Return, spec.BasicProperties, bytes]] = []
    ch.add_on_return_callback(lambda _c, m, p, b: returned.append((m, p, b)))
    ex = name("x")
    ch.exchange_declare(ex, "direct", auto_delete=True)
    _queue(ch)  # keeps nothing bound to ex
    props = pika.BasicProperties(
        content_type="text/plain",
        correlation_id="c-1",
        headers={"k": "v", "n": 7},
        message_id="m-1",
        delivery_mode=2,
        priority=3,
    )
    ch.basic_publish(ex, "nowhere", b"payload", props, mandatory=True)
    _wait_until(ch.connection, lambda: bool(returned), "basic.return")
    method, rprops, body = returned[0]
    assert (method.reply_code, method.reply_text, method.exchange, method.routing_key) == (
        312,
        "NO_ROUTE",
        ex,
        "nowhere",
    )
    assert body == b"payload"
    assert (rprops.content_type, rprops.correlation_id, rprops.headers, rprops.message_id) == (
        "text/plain",
        "c-1",
        {"k": "v", "n": 7},
        "m-1",
    )
    assert (rprops.delivery_mode, rprops.priority) == (2, 3)
    ch.exchange_delete(ex)


def test_unroutable_message_without_mandatory_is_dropped_silently(ch: BlockingChannel, name: Name) -> None:
    returned: list[object] = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.confirm_delivery()
    ch.basic_publish("", name("no-such-queue"), b"x")  # confirmed (ack), not returned
    assert returned == []


def test_publish_with_immediate_closes_connection_with_540(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = _queue(ch)
    # pika's public API has no immediate flag; send the method as pika would.
    ch._impl._send_method(
        spec.Basic.Publish(exchange="", routing_key=q, immediate=True),
        (spec.BasicProperties(), b"x"),
    )
    with pytest.raises(ConnectionClosedByBroker) as info:
        _wait_until(conn, lambda: False, "connection.close")
    assert info.value.reply_code == 540
    assert info.value.reply_text.startswith("NOT_IMPLEMENTED")


# --- consume and acknowledge -----------------------------------------------------------------------------


def test_no_ack_consumer_receives_messages_in_order(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 20)
    got = _consume_n(ch, q, 20, auto_ack=True)
    assert _bodies(got) == [str(i).encode() for i in range(20)]
    assert [m.delivery_tag for m, _, _ in got] == list(range(1, 21))
    assert all(not m.redelivered for m, _, _ in got)
    assert _ready(ch, q) == 0


def test_deliver_carries_exchange_routing_key_and_consumer_tag(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    ch.queue_bind(q, "amq.direct", q)
    tag, got = _consume(ch, q, auto_ack=True)
    ch.basic_publish("amq.direct", q, b"x")
    _wait_until(ch.connection, lambda: bool(got), "a delivery")
    method = got[0][0]
    assert (method.consumer_tag, method.exchange, method.routing_key) == (tag, "amq.direct", q)


def test_manually_acked_messages_are_gone_after_reconnect(connect: Connect, name: Name) -> None:
    conn = connect()
    ch = conn.channel()
    q = name("q")
    ch.queue_declare(q, auto_delete=False)
    _publish(ch, q, 5)
    got = _consume_n(ch, q, 5)
    for m, _, _ in got:
        ch.basic_ack(m.delivery_tag)
    conn.close()
    ch = connect().channel()
    assert ch.queue_delete(q).method.message_count == 0


def test_ack_multiple_acknowledges_everything_up_to_the_tag(connect: Connect, name: Name) -> None:
    conn = connect()
    ch = conn.channel()
    q = name("q")
    ch.queue_declare(q)
    _publish(ch, q, 5)
    got = _consume_n(ch, q, 5)
    ch.basic_ack(got[2][0].delivery_tag, multiple=True)  # acks 1..3; 4 and 5 stay unacked
    conn.close()
    ch = connect().channel()
    assert _get_all(ch, q) == [(b"3", True), (b"4", True)]
    ch.queue_delete(q)


@pytest.mark.parametrize("how", ["nack", "reject"])
def test_requeued_messages_return_in_original_order_marked_redelivered(
    ch: BlockingChannel, name: Name, how: str
) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 4)
    got = _consume_n(ch, q, 4)
    for m, _, _ in reversed(got[:3]):  # requeue 1..3 newest first; 4 stays unacked
        if how == "nack":
            ch.basic_nack(m.delivery_tag, requeue=True)
        else:
            ch.basic_reject(m.delivery_tag, requeue=True)
    assert _get_all(ch, q) == [(b"0", True), (b"1", True), (b"2", True)]


def test_nack_multiple_requeues_all_up_to_the_tag(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 3)
    got = _consume_n(ch, q, 3)
    ch.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)
    assert _get_all(ch, q) == [(b"0", True), (b"1", True), (b"2", True)]


def test_nack_without_requeue_discards(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 2)
    got = _consume_n(ch, q, 2)
    ch.basic_nack(got[0][0].delivery_tag, requeue=False)
    ch.basic_reject(got[1][0].delivery_tag, requeue=False)
    assert _get_all(ch, q) == []


def test_dead_letter_exchange_receives_rejected_messages(ch: BlockingChannel, name: Name) -> None:
    dlx = name("dlx")
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    dead = _queue(ch)
    ch.queue_bind(dead, dlx)
    q = _queue(ch, name, arguments={"x-dead-letter-exchange": dlx})
    _publish(ch, q, 1)
    ((m, _, _),) = _consume_n(ch, q, 1)
    ch.basic_reject(m.delivery_tag, requeue=False)
    method, props, body = None, None, None
    deadline = time.monotonic() + WAIT
    while method is None and time.monotonic() < deadline:
        method, props, body = ch.basic_get(dead, auto_ack=True)
    assert body == b"0"
    assert props.headers["x-death"][0]["reason"] == "rejected"
    ch.exchange_delete(dlx)


def test_ack_of_unknown_delivery_tag_closes_channel_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.basic_ack(999)
    with pytest.raises(ChannelClosedByBroker) as info:
        _queue(ch)  # any synchronous call surfaces the close
    assert info.value.reply_code == 406
    assert conn.is_open


def test_double_ack_closes_channel_with_406(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    q = _queue(ch, name)
    _publish(ch, q, 1)
    method, _, _ = ch.basic_get(q)
    ch.basic_ack(method.delivery_tag)
    ch.basic_ack(method.delivery_tag)
    with pytest.raises(ChannelClosedByBroker) as info:
        _queue(ch)
    assert info.value.reply_code == 406


def test_ack_on_no_ack_delivery_closes_channel_with_406(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    q = _queue(ch, name)
    _publish(ch, q, 1)
    method, _, _ = ch.basic_get(q, auto_ack=True)
    ch.basic_ack(method.delivery_tag)
    with pytest.raises(ChannelClosedByBroker) as info:
        _queue(ch)
    assert info.value.reply_code == 406


def test_recover_requeue_redelivers_unacked_messages(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 3)
    tag, got = _consume(ch, q)
    _wait_until(ch.connection, lambda: len(got) == 3, "3 deliveries")
    ch.basic_recover(requeue=True)
    _wait_until(ch.connection, lambda: len(got) == 6, "3 redeliveries")
    assert _bodies(got) == [b"0", b"1", b"2"] * 2
    assert [m.redelivered for m, _, _ in got] == [False] * 3 + [True] * 3
    assert [m.delivery_tag for m, _, _ in got] == [1, 2, 3, 4, 5, 6]
    ch.basic_ack(6, multiple=True)
    ch.basic_cancel(tag)


def test_recover_without_requeue_closes_connection_with_540(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(ConnectionClosedByBroker) as info:
        ch.basic_recover(requeue=False)
    assert info.value.reply_code == 540


# --- qos ------------------------------------------------------------------------------------------------


def test_prefetch_count_limits_unacked_deliveries(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 10)
    ch.basic_qos(prefetch_count=3)
    tag, got = _consume(ch, q)
    _wait_until(ch.connection, lambda: len(got) == 3, "3 deliveries")
    # Ready count comes from the queue: exactly 3 left it.
    assert _ready(ch, q) == 7
    ch.basic_ack(got[0][0].delivery_tag)
    _wait_until(ch.connection, lambda: len(got) == 4, "one more delivery after one ack")
    assert _ready(ch, q) == 6
    assert len(got) == 4
    ch.basic_ack(got[-1][0].delivery_tag, multiple=True)
    _wait_until(ch.connection, lambda: len(got) == 7, "three more after acking all")
    assert _ready(ch, q) == 3
    ch.basic_cancel(tag)


def test_global_prefetch_is_shared_by_the_channels_consumers(ch: BlockingChannel, name: Name) -> None:
    q1, q2 = _queue(ch, name), _queue(ch, name)
    _publish(ch, q1, 5)
    _publish(ch, q2, 5)
    ch.basic_qos(prefetch_count=2, global_qos=True)
    _, got1 = _consume(ch, q1)
    _, got2 = _consume(ch, q2)
    _wait_until(ch.connection, lambda: len(got1) + len(got2) == 2, "2 deliveries")
    assert _ready(ch, q1) + _ready(ch, q2) == 8
    assert len(got1) + len(got2) == 2


def test_per_consumer_prefetch_applies_to_each_consumer(ch: BlockingChannel, name: Name) -> None:
    q1, q2 = _queue(ch, name), _queue(ch, name)
    _publish(ch, q1, 5)
    _publish(ch, q2, 5)
    ch.basic_qos(prefetch_count=2)
    _, got1 = _consume(ch, q1)
    _, got2 = _consume(ch, q2)
    _wait_until(ch.connection, lambda: len(got1) == 2 and len(got2) == 2, "2 deliveries each")
    assert (_ready(ch, q1), _ready(ch, q2)) == (3, 3)


def test_prefetch_size_closes_connection_with_540(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(ConnectionClosedByBroker) as info:
        ch.basic_qos(prefetch_size=1024)
    assert info.value.reply_code == 540


def test_prefetch_does_not_limit_basic_get(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 3)
    ch.basic_qos(prefetch_count=1)
    tags = [ch.basic_get(q)[0].delivery_tag for _ in range(3)]
    assert tags == [1, 2, 3]


# --- consumer tags, get, cancel ---------------------------------------------------------------------------


def test_reused_consumer_tag_closes_connection_with_530(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    q = _queue(ch, name)
    ch.basic_consume(q, lambda *a: None, consumer_tag="same-tag")
    # pika refuses duplicate tags itself, so send the second consume as pika would.
    ch._impl._send_method(spec.Basic.Consume(queue=q, consumer_tag="same-tag"))
    with pytest.raises(ConnectionClosedByBroker) as info:
        _wait_until(conn, lambda: False, "connection.close")
    assert info.value.reply_code == 530


def test_server_generates_consumer_tag_when_client_sends_none(amqpd_url: str, name: Name) -> None:
    # pika always makes up its own tags; py-amqp (kombu's transport) lets the server choose.
    parsed = pika.URLParameters(amqpd_url)
    with amqp.Connection(f"{parsed.host}:{parsed.port}", userid="guest", password="guest") as conn:
        ch = conn.channel()
        q, _, _ = ch.queue_declare("", exclusive=True)
        tag = ch.basic_consume(q, callback=lambda m: None)
        assert tag.startswith("amq.ctag-")
        tag2 = ch.basic_consume(q, callback=lambda m: None)
        assert tag2.startswith("amq.ctag-") and tag2 != tag
        ch.basic_cancel(tag)


def test_basic_get_reports_remaining_message_count_then_get_empty(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 3)
    seen = []
    for _ in range(3):
        method, _, body = ch.basic_get(q, auto_ack=True)
        assert isinstance(method, spec.Basic.GetOk)
        seen.append((body, method.message_count, method.delivery_tag, method.exchange, method.routing_key))
    assert seen == [(b"0", 2, 1, "", q), (b"1", 1, 2, "", q), (b"2", 0, 3, "", q)]
    assert ch.basic_get(q) == (None, None, None)  # get-empty


def test_cancel_stops_deliveries_and_keeps_unacked_messages(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    _publish(ch, q, 2)
    ch.basic_qos(prefetch_count=1)
    tag, got = _consume(ch, q)
    _wait_until(ch.connection, lambda: len(got) == 1, "a delivery")
    ch.basic_cancel(tag)
    assert tag not in ch.consumer_tags
    ch.basic_ack(got[0][0].delivery_tag)  # still ackable after cancel
    assert _get_all(ch, q) == [(b"1", False)]
    assert len(got) == 1


def test_deleting_queue_sends_consumer_cancel_to_its_consumers(connect: Connect, name: Name) -> None:
    conn = connect()
    ch = conn.channel()
    q = name("q")
    ch.queue_declare(q)
    cancelled: list[spec.Basic.Cancel] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag, _ = _consume(ch, q)
    connect().channel().queue_delete(q)
    _wait_until(conn, lambda: bool(cancelled), "basic.cancel from the broker")
    assert cancelled[0].consumer_tag == tag
    assert ch.is_open


# --- redelivery when the consumer goes away ----------------------------------------------------------------


def test_unacked_messages_return_redelivered_when_channel_closes(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)  # exclusive to ch's connection: consume from another channel of it
    _publish(ch, q, 3)
    consumer = ch.connection.channel()
    got = _consume_n(consumer, q, 3)
    consumer.basic_ack(got[1][0].delivery_tag)  # "1" acked; "0" and "2" unacked
    consumer.close()
    assert _get_all(ch, q) == [(b"0", True), (b"2", True)]


def test_unacked_messages_return_redelivered_when_connection_closes(connect: Connect, name: Name) -> None:
    owner = connect().channel()
    q = name("q")
    owner.queue_declare(q, auto_delete=False)
    _publish(owner, q, 3)
    consumer_conn = connect()
    got = _consume_n(consumer_conn.channel(), q, 3)
    assert [m.redelivered for m, _, _ in got] == [False] * 3
    consumer_conn.close()
    assert _get_all(owner, q) == [(b"0", True), (b"1", True), (b"2", True)]
    owner.queue_delete(q)


def test_messages_are_spread_round_robin_over_consumers(ch: BlockingChannel, name: Name) -> None:
    q = _queue(ch, name)
    ch.basic_qos(prefetch_count=1)
    _, got1 = _consume(ch, q)
    _, got2 = _consume(ch, q)
    _publish(ch, q, 2)
    _wait_until(ch.connection, lambda: len(got1) == 1 and len(got2) == 1, "one delivery to each consumer")


def test_exclusive_consumer_blocks_other_consumers_with_403(conn: pika.BlockingConnection, name: Name) -> None:
    ch = conn.channel()
    q = _queue(ch, name)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().basic_consume(q, lambda *a: None)
    assert info.value.reply_code == 403
