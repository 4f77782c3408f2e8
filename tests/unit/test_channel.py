"""A channel as a client sees it: the frames it writes back for publishes, consumes, acks, confirms and tx.

Methods go in as pamqp objects (or as the raw payloads the session hands over on the fast path); what the
channel writes is decoded with pamqp, as a client would.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ClientChannel, FakeConnection, messages, new_broker
from pamqp import commands, header

from amqpd import errors
from amqpd.broker.broker import Broker


@pytest.fixture
def broker() -> Broker:
    return new_broker()


@pytest.fixture
def client(broker: Broker) -> ClientChannel:
    return ClientChannel(broker)


def queue_of(client: ClientChannel, name: str) -> Any:
    return client.broker.vhosts["/"].queues[name]


def fill(client: ClientChannel, queue: str, *bodies: bytes, **properties: Any) -> None:
    for b in bodies:
        client.publish("", queue, b, **properties)


def get(client: ClientChannel, queue: str, no_ack: bool = False) -> tuple[Any, bytes] | None:
    frames = client.call(commands.Basic.Get(queue=queue, no_ack=no_ack))
    if isinstance(frames[0], commands.Basic.GetEmpty):
        return None
    (got,) = messages(frames)
    return got


def error_of(call: Any, *args: Any) -> errors.AMQPError:
    with pytest.raises(errors.AMQPError) as info:
        call(*args)
    return info.value


# -- consuming ---------------------------------------------------------------------------------------------


def test_consumer_receives_messages_with_delivery_tags_1_2_3(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"a", b"b")
    tag = client.consume("q", "ctag")
    fill(client, "q", b"c")
    got = client.deliveries()
    assert [(d.consumer_tag, d.delivery_tag, d.redelivered, d.exchange, d.routing_key) for d, _ in got] == [
        ("ctag", 1, False, "", "q"),
        ("ctag", 2, False, "", "q"),
        ("ctag", 3, False, "", "q"),
    ]
    assert [b for _, b in got] == [b"a", b"b", b"c"]
    assert tag == "ctag"


def test_consumer_gets_the_published_properties_unchanged(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "c", no_ack=True)
    client.publish(
        "", "q", b"{}", content_type="application/json", delivery_mode=2, message_id="m1", headers={"k": "v"}
    )
    frames = client.conn.take_frames()
    (head,) = [f for f in frames if isinstance(f, header.ContentHeader)]
    p = head.properties
    assert (p.content_type, p.delivery_mode, p.message_id, p.headers) == ("application/json", 2, "m1", {"k": "v"})


def test_server_generates_a_consumer_tag_when_none_is_given(client: ClientChannel) -> None:
    client.declare_queue("q")
    assert client.consume("q").startswith("amq.ctag-")


def test_body_larger_than_frame_max_arrives_split_and_whole(broker: Broker) -> None:
    client = ClientChannel(broker, FakeConnection(frame_max=4096))
    client.declare_queue("q")
    client.consume("q", "c", no_ack=True)
    payload = bytes(range(256)) * 40
    client.publish("", "q", payload)
    frames = client.conn.take_frames()
    assert len(frames) == 2 + 3  # deliver, header, 3 body frames
    assert messages(frames)[0][1] == payload


def test_reusing_a_consumer_tag_on_the_channel_closes_the_connection_with_530(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "same")
    exc = error_of(client.call, commands.Basic.Consume(queue="q", consumer_tag="same"))
    assert (exc.code, exc.connection_level) == (530, True)


def test_exclusive_consumer_locks_out_others_with_403(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "solo", exclusive=True)
    exc = error_of(client.call, commands.Basic.Consume(queue="q", consumer_tag="second"))
    assert (exc.code, exc.class_id, exc.method_id) == (403, 60, 20)


def test_consuming_from_a_missing_queue_is_404(client: ClientChannel) -> None:
    exc = error_of(client.call, commands.Basic.Consume(queue="missing"))
    assert (exc.code, exc.class_id, exc.method_id, exc.connection_level) == (404, 60, 20, False)


@pytest.mark.parametrize(
    "method",
    [
        commands.Queue.Bind(queue="missing", exchange="amq.direct", routing_key="k"),
        commands.Queue.Bind(queue="q", exchange="missing", routing_key="k"),
        commands.Exchange.Bind(destination="missing", source="amq.direct", routing_key="k"),
        commands.Exchange.Bind(destination="amq.fanout", source="missing", routing_key="k"),
    ],
)
def test_binding_something_missing_is_404(client: ClientChannel, method: Any) -> None:
    client.declare_queue("q")
    exc = error_of(client.call, method)
    assert (exc.code, exc.connection_level) == (404, False)


def test_bind_with_empty_queue_and_key_uses_the_last_declared_queue_for_both(client: ClientChannel) -> None:
    name = client.declare_queue("")
    client.call(commands.Queue.Bind(queue="", exchange="amq.direct", routing_key=""))
    client.publish("amq.direct", name, b"m")
    assert queue_of(client, name).message_count == 1


def test_unbind_with_empty_queue_and_key_uses_the_last_declared_queue_for_both(client: ClientChannel) -> None:
    name = client.declare_queue("")
    client.call(commands.Queue.Bind(queue="", exchange="amq.direct", routing_key=""))
    client.call(commands.Queue.Unbind(queue="", exchange="amq.direct", routing_key=""))
    client.publish("amq.direct", name, b"m")
    assert queue_of(client, name).message_count == 0


def test_empty_queue_name_means_the_last_declared_queue(client: ClientChannel) -> None:
    name = client.declare_queue("")
    client.publish("", name, b"m")
    assert get(client, "")[1] == b"m"  # type: ignore[index]


def test_auto_delete_queue_goes_when_its_last_consumer_cancels(client: ClientChannel) -> None:
    client.declare_queue("temp", auto_delete=True)
    client.consume("temp", "a")
    client.consume("temp", "b")
    client.call(commands.Basic.Cancel("a"))
    assert "temp" in client.broker.vhosts["/"].queues
    client.call(commands.Basic.Cancel("b"))
    assert "temp" not in client.broker.vhosts["/"].queues


def test_consumer_waits_while_the_connection_cannot_write(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "c")
    client.conn.writable = False
    fill(client, "q", b"1", b"2")
    assert client.deliveries() == []
    client.conn.writable = True
    client.ch.resume_deliveries()  # what the session does when the socket drains
    assert [b for _, b in client.deliveries()] == [b"1", b"2"]


def test_channel_flow_off_is_not_implemented(client: ClientChannel) -> None:
    assert isinstance(client.call(commands.Channel.Flow(active=True))[0], commands.Channel.FlowOk)
    exc = error_of(client.call, commands.Channel.Flow(active=False))
    assert (exc.code, exc.connection_level) == (540, True)


def test_cancelled_consumer_gets_no_more_messages(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "c", no_ack=True)
    assert isinstance(client.call(commands.Basic.Cancel("c"))[0], commands.Basic.CancelOk)
    fill(client, "q", b"later")
    assert client.deliveries() == []
    assert queue_of(client, "q").message_count == 1


# -- acks ----------------------------------------------------------------------------------------------------


def test_ack_lets_the_next_message_through_a_prefetch_of_one(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.call(commands.Basic.Qos(prefetch_count=1))
    client.consume("q", "c")
    fill(client, "q", b"1", b"2")
    assert [b for _, b in client.deliveries()] == [b"1"]
    client.ack(1)
    assert [(d.delivery_tag, b) for d, b in client.deliveries()] == [(2, b"2")]


def test_ack_multiple_settles_every_tag_up_to_it(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2", b"3")
    for _ in range(3):
        get(client, "q")
    client.ack(2, multiple=True)
    assert list(client.ch.unacked) == [3]
    assert queue_of(client, "q").unacked == 1


def test_ack_multiple_with_tag_zero_settles_everything(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2", b"3")
    for _ in range(3):
        get(client, "q")
    client.ack(0, multiple=True)
    assert list(client.ch.unacked) == []
    assert queue_of(client, "q").unacked == 0


@pytest.mark.parametrize(
    ("settle", "method_id"),
    [
        (lambda c: c.ack(9), 80),
        (lambda c: c.ack(9, multiple=True), 80),
        (lambda c: c.ack(0), 80),
        (lambda c: c.nack(9), 120),
        (lambda c: c.reject(9), 90),
    ],
)
def test_unknown_delivery_tag_is_406_naming_the_method(client: ClientChannel, settle: Any, method_id: int) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1")
    get(client, "q")
    exc = error_of(settle, client)
    assert (exc.code, exc.class_id, exc.method_id, exc.connection_level) == (406, 60, method_id, False)


def test_acking_the_same_tag_twice_is_406(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1")
    get(client, "q")
    client.ack(1)
    assert error_of(client.ack, 1).code == 406


def test_nack_with_requeue_puts_messages_back_in_order_as_redelivered(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2", b"3", b"4")
    for _ in range(3):
        get(client, "q")
    client.nack(3, multiple=True, requeue=True)
    got = [get(client, "q") for _ in range(4)]
    assert [(m.redelivered, b) for m, b in got] == [(True, b"1"), (True, b"2"), (True, b"3"), (False, b"4")]  # type: ignore[misc]


def test_reject_without_requeue_drops_the_message(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2")
    get(client, "q")
    client.reject(1, requeue=False)
    assert queue_of(client, "q").message_count == 1
    assert get(client, "q")[1] == b"2"  # type: ignore[index]


def test_reject_with_requeue_redelivers_to_the_consumer(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "c")
    fill(client, "q", b"1")
    client.deliveries()
    client.reject(1, requeue=True)
    ((d, b),) = client.deliveries()
    assert (d.delivery_tag, d.redelivered, b) == (2, True, b"1")


def test_recover_requeues_unacked_messages_as_redelivered(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2")
    get(client, "q")
    get(client, "q")
    assert isinstance(client.call(commands.Basic.Recover(requeue=True))[0], commands.Basic.RecoverOk)
    assert [(m.redelivered, b) for m, b in (get(client, "q"), get(client, "q"))] == [(True, b"1"), (True, b"2")]  # type: ignore[misc]


def test_recover_without_requeue_is_540(client: ClientChannel) -> None:
    exc = error_of(client.call, commands.Basic.Recover(requeue=False))
    assert (exc.code, exc.connection_level) == (540, True)


# -- basic.get -----------------------------------------------------------------------------------------------


def test_get_reports_the_messages_left(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2", b"3")
    first = get(client, "q", no_ack=True)
    assert first is not None
    assert (first[0].delivery_tag, first[0].message_count, first[1]) == (1, 2, b"1")
    assert get(client, "q", no_ack=True)[0].message_count == 1  # type: ignore[index]


def test_get_on_an_empty_queue_is_get_empty(client: ClientChannel) -> None:
    client.declare_queue("q")
    assert get(client, "q") is None


def test_get_with_no_ack_leaves_nothing_to_ack(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1")
    get(client, "q", no_ack=True)
    assert list(client.ch.unacked) == []
    assert error_of(client.ack, 1).code == 406


# -- qos -------------------------------------------------------------------------------------------------------


def test_per_consumer_prefetch_applies_to_each_consumer(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.call(commands.Basic.Qos(prefetch_count=2))
    client.consume("q", "a")
    client.consume("q", "b")
    fill(client, "q", *[str(i).encode() for i in range(10)])
    got = client.deliveries()
    assert sorted(d.consumer_tag for d, _ in got) == ["a", "a", "b", "b"]
    assert queue_of(client, "q").message_count == 6


def test_global_prefetch_is_shared_by_the_channels_consumers(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.call(commands.Basic.Qos(prefetch_count=3, global_=True))
    client.consume("q", "a")
    client.consume("q", "b")
    fill(client, "q", *[str(i).encode() for i in range(10)])
    assert len(client.deliveries()) == 3
    client.ack(1)
    assert len(client.deliveries()) == 1


def test_prefetch_set_after_consume_does_not_change_that_consumer(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.consume("q", "a")
    client.call(commands.Basic.Qos(prefetch_count=1))
    fill(client, "q", b"1", b"2", b"3")
    assert len(client.deliveries()) == 3


def test_prefetch_size_is_not_implemented(client: ClientChannel) -> None:
    exc = error_of(client.call, commands.Basic.Qos(prefetch_size=1024))
    assert (exc.code, exc.connection_level) == (540, True)


# -- publishing errors -----------------------------------------------------------------------------------------


def test_publish_to_a_missing_exchange_is_404_for_basic_publish(client: ClientChannel) -> None:
    exc = error_of(client.publish, "nowhere", "k")
    assert (exc.code, exc.class_id, exc.method_id, exc.connection_level) == (404, 60, 40, False)


def test_publish_to_an_internal_exchange_is_403(client: ClientChannel) -> None:
    client.call(commands.Exchange.Declare(exchange="inner", exchange_type="fanout", internal=True))
    exc = error_of(client.publish, "inner", "k")
    assert (exc.code, exc.class_id, exc.method_id) == (403, 60, 40)


def test_user_id_other_than_the_connection_user_is_406(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.publish("", "q", b"ok", user_id="guest")
    exc = error_of(lambda: client.publish("", "q", b"forged", user_id="admin"))
    assert (exc.code, exc.class_id, exc.method_id) == (406, 60, 40)
    assert queue_of(client, "q").message_count == 1


def test_immediate_publish_is_not_implemented(client: ClientChannel) -> None:
    from fakes import method_payload

    exc = error_of(client.ch.on_publish, method_payload(commands.Basic.Publish(0, "", "q", False, True)))
    assert (exc.code, exc.connection_level) == (540, True)


def test_content_header_for_another_class_is_505(client: ClientChannel) -> None:
    from fakes import method_payload

    client.ch.on_publish(method_payload(commands.Basic.Publish(0, "", "q")))
    exc = error_of(client.ch.on_header, b"\x00\x32\x00\x00" + bytes(8) + b"\x00\x00")
    assert (exc.code, exc.connection_level) == (505, True)


# rabbit_basic:parse_expiration reads the property with Erlang's string:to_integer, then check_expiry:
# 0 <= ttl <= 4294967295 (the largest erlang:send_after timer).
def test_largest_expiration_is_accepted(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.publish("", "q", b"m", expiration="4294967295")
    assert queue_of(client, "q").message_count == 1


def test_expiration_over_the_largest_timer_is_406(client: ClientChannel) -> None:
    client.declare_queue("q")
    exc = error_of(lambda: client.publish("", "q", b"m", expiration="4294967296"))
    assert (exc.code, exc.class_id, exc.method_id) == (406, 60, 40)


def test_expiration_with_a_plus_sign_is_accepted(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.publish("", "q", b"m", expiration="+10")
    assert queue_of(client, "q").message_count == 1


def test_message_over_the_size_limit_is_406(broker: Broker) -> None:
    broker.settings.max_message_size = 100
    client = ClientChannel(broker)
    client.declare_queue("q")
    exc = error_of(client.publish, "", "q", b"x" * 101)
    assert (exc.code, exc.connection_level) == (406, False)


def test_bcc_is_removed_and_cc_kept_on_delivered_messages(client: ClientChannel) -> None:
    for name in ("to", "cc", "bcc"):
        client.declare_queue(name)
        client.consume(name, f"c-{name}", no_ack=True)
    client.call(commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    for name in ("to", "cc", "bcc"):
        client.call(commands.Queue.Bind(queue=name, exchange="x", routing_key=name))
    client.publish("x", "to", b"m", headers={"CC": ["cc"], "BCC": ["bcc"], "keep": 1})
    heads = [f for f in client.conn.take_frames() if isinstance(f, header.ContentHeader)]
    assert len(heads) == 3
    for head in heads:
        assert head.properties.headers == {"CC": ["cc"], "keep": 1}


# -- publisher confirms ------------------------------------------------------------------------------------------


def confirm_frames(client: ClientChannel) -> list[Any]:
    return [f for f in client.conn.take_frames() if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack))]


def test_confirms_for_a_batch_arrive_as_one_multiple_ack(client: ClientChannel) -> None:
    client.declare_queue("q")
    assert isinstance(client.call(commands.Confirm.Select())[0], commands.Confirm.SelectOk)
    fill(client, "q", b"1", b"2", b"3")
    acks = confirm_frames(client)
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(3, True)]
    fill(client, "q", b"4")
    assert [(a.delivery_tag, a.multiple) for a in confirm_frames(client)] == [(4, False)]


def test_unroutable_message_is_still_confirmed(client: ClientChannel) -> None:
    client.call(commands.Confirm.Select())
    client.publish("amq.direct", "nobody", b"m")
    assert [(a.delivery_tag, a.multiple) for a in confirm_frames(client)] == [(1, False)]


def test_mandatory_unroutable_message_is_returned_before_its_confirm(client: ClientChannel) -> None:
    client.call(commands.Confirm.Select())
    client.publish("amq.direct", "nobody", b"body", mandatory=True, content_type="text/plain")
    frames = client.conn.take_frames()
    assert isinstance(frames[0], commands.Basic.Return)
    ret = frames[0]
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (312, "NO_ROUTE", "amq.direct", "nobody")
    assert frames[1].properties.content_type == "text/plain"
    assert messages(frames)[0][1] == b"body"
    assert isinstance(frames[-1], commands.Basic.Ack) and frames[-1].delivery_tag == 1


def test_mandatory_message_caught_by_an_alternate_exchange_is_not_returned(client: ClientChannel) -> None:
    client.call(commands.Exchange.Declare(exchange="ae", exchange_type="fanout"))
    client.declare_queue("caught")
    client.call(commands.Queue.Bind(queue="caught", exchange="ae"))
    client.call(commands.Exchange.Declare(exchange="x", exchange_type="direct", arguments={"alternate-exchange": "ae"}))
    client.publish("x", "nobody", b"m", mandatory=True)
    assert client.conn.take_frames() == []
    assert queue_of(client, "caught").message_count == 1


def test_mandatory_routable_message_is_not_returned(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.publish("", "q", b"m", mandatory=True)
    assert client.conn.take_frames() == []


def test_message_refused_by_a_full_reject_publish_queue_is_nacked(client: ClientChannel) -> None:
    client.declare_queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    client.call(commands.Confirm.Select())
    fill(client, "q", b"1", b"2", b"3")
    confirms = confirm_frames(client)
    assert [(type(c).__name__, c.delivery_tag) for c in confirms] == [("Ack", 1), ("Nack", 2), ("Nack", 3)]
    assert queue_of(client, "q").message_count == 1


# -- transactions ---------------------------------------------------------------------------------------------


def test_tx_publishes_are_held_until_commit(client: ClientChannel) -> None:
    client.declare_queue("q")
    assert isinstance(client.call(commands.Tx.Select())[0], commands.Tx.SelectOk)
    fill(client, "q", b"1", b"2")
    assert queue_of(client, "q").message_count == 0
    assert isinstance(client.call(commands.Tx.Commit())[0], commands.Tx.CommitOk)
    assert queue_of(client, "q").message_count == 2


def test_tx_rollback_discards_publishes(client: ClientChannel) -> None:
    client.declare_queue("q")
    client.call(commands.Tx.Select())
    fill(client, "q", b"1")
    assert isinstance(client.call(commands.Tx.Rollback())[0], commands.Tx.RollbackOk)
    client.call(commands.Tx.Commit())
    assert queue_of(client, "q").message_count == 0


def test_tx_acks_apply_at_commit(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2")
    client.call(commands.Tx.Select())
    get(client, "q")
    client.ack(1)
    assert queue_of(client, "q").unacked == 1
    client.call(commands.Tx.Commit())
    assert queue_of(client, "q").unacked == 0


def test_tx_rollback_leaves_acked_messages_unacked(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1")
    client.call(commands.Tx.Select())
    get(client, "q")
    client.ack(1)
    client.call(commands.Tx.Rollback())
    assert list(client.ch.unacked) == [1]
    client.ack(1)
    client.call(commands.Tx.Commit())
    assert queue_of(client, "q").unacked == 0 and queue_of(client, "q").message_count == 0


def test_tx_mandatory_unroutable_is_returned_at_commit(client: ClientChannel) -> None:
    client.call(commands.Tx.Select())
    client.publish("amq.direct", "nobody", b"m", mandatory=True)
    assert client.conn.take_frames() == []
    frames = client.call(commands.Tx.Commit())
    assert [type(f).__name__ for f in frames] == ["Return", "ContentHeader", "ContentBody", "CommitOk"]


def test_tx_select_on_a_confirm_channel_is_406(client: ClientChannel) -> None:
    client.call(commands.Confirm.Select())
    exc = error_of(client.call, commands.Tx.Select())
    assert (exc.code, exc.class_id, exc.method_id, exc.connection_level) == (406, 90, 10, False)


def test_confirm_select_on_a_tx_channel_is_406(client: ClientChannel) -> None:
    client.call(commands.Tx.Select())
    exc = error_of(client.call, commands.Confirm.Select())
    assert (exc.code, exc.class_id, exc.method_id, exc.connection_level) == (406, 85, 10, False)


def test_commit_without_select_is_406(client: ClientChannel) -> None:
    assert error_of(client.call, commands.Tx.Commit()).code == 406


# -- closing -----------------------------------------------------------------------------------------------------


def test_closing_the_channel_requeues_unacked_messages_in_order_as_redelivered(broker: Broker) -> None:
    client = ClientChannel(broker)
    client.declare_queue("q")
    client.consume("q", "c")
    fill(client, "q", b"1", b"2", b"3")
    client.deliveries()
    client.ack(2)
    client.ch.shutdown()
    other = ClientChannel(broker, channel_id=2)
    got = [get(other, "q") for _ in range(2)]
    assert [(m.redelivered, b) for m, b in got] == [(True, b"1"), (True, b"3")]  # type: ignore[misc]
    assert queue_of(other, "q").consumers == []


def test_closing_the_channel_drops_uncommitted_tx_work(broker: Broker) -> None:
    client = ClientChannel(broker)
    client.declare_queue("q")
    fill(client, "q", b"1")
    client.call(commands.Tx.Select())
    get(client, "q")
    client.ack(1)
    fill(client, "q", b"uncommitted")
    client.ch.shutdown()
    q = queue_of(client, "q")
    assert (q.message_count, q.unacked) == (1, 0)
    assert get(ClientChannel(broker, channel_id=2), "q")[0].redelivered  # type: ignore[index]


def test_closing_the_channel_deletes_an_auto_delete_queue_it_consumed(broker: Broker) -> None:
    client = ClientChannel(broker)
    client.declare_queue("temp", auto_delete=True)
    client.consume("temp", "c")
    client.ch.shutdown()
    assert "temp" not in broker.vhosts["/"].queues


def test_exclusive_queue_is_405_for_another_connection(broker: Broker) -> None:
    owner = ClientChannel(broker)
    owner.declare_queue("mine", exclusive=True)
    other = ClientChannel(broker)
    for method in (
        commands.Basic.Consume(queue="mine"),
        commands.Basic.Get(queue="mine"),
        commands.Queue.Bind(queue="mine", exchange="amq.direct", routing_key="k"),
        commands.Queue.Purge(queue="mine"),
        commands.Queue.Delete(queue="mine"),
    ):
        exc = error_of(other.call, method)
        assert (exc.code, exc.connection_level) == (405, False), method
    other.publish("", "mine", b"publishing to it is allowed")
    assert queue_of(owner, "mine").message_count == 1


def test_deleting_the_queue_cancels_its_consumers_for_clients_that_asked(broker: Broker) -> None:
    client = ClientChannel(broker, FakeConnection(consumer_cancel_notify=True))
    client.declare_queue("q")
    client.consume("q", "watcher")
    other = ClientChannel(broker, channel_id=2)
    other.call(commands.Queue.Delete(queue="q"))
    (cancel,) = client.conn.take_frames()
    assert isinstance(cancel, commands.Basic.Cancel) and cancel.consumer_tag == "watcher"
    assert client.ch.consumers == {}


def test_server_cancel_is_sent_with_nowait(broker: Broker) -> None:
    client = ClientChannel(broker, FakeConnection(consumer_cancel_notify=True))
    client.declare_queue("q")
    client.consume("q", "watcher")
    ClientChannel(broker, channel_id=2).call(commands.Queue.Delete(queue="q"))
    (cancel,) = client.conn.take_frames()
    assert cancel.nowait is True


def test_deleting_the_queue_cancels_silently_for_clients_that_did_not_ask(broker: Broker) -> None:
    client = ClientChannel(broker, FakeConnection(consumer_cancel_notify=False))
    client.declare_queue("q")
    client.consume("q", "watcher")
    ClientChannel(broker, channel_id=2).call(commands.Queue.Delete(queue="q"))
    assert client.conn.take_frames() == []
    assert client.ch.consumers == {}


def test_queue_delete_reports_the_ready_message_count(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2")
    (ok,) = client.call(commands.Queue.Delete(queue="q"))
    assert ok.message_count == 2


def test_queue_declare_ok_reports_messages_and_consumers(client: ClientChannel) -> None:
    client.declare_queue("q")
    fill(client, "q", b"1", b"2")
    (ok,) = client.call(commands.Queue.Declare(queue="q", passive=True))
    assert (ok.queue, ok.message_count, ok.consumer_count) == ("q", 2, 0)


def test_a_queue_name_longer_than_max_queue_name_length_is_406() -> None:
    client = ClientChannel(new_broker(max_queue_name_length=20))
    assert client.declare_queue("q" * 20) == "q" * 20
    exc = error_of(client.declare_queue, "q" * 21)
    assert (exc.code, exc.class_id, exc.method_id) == (406, 50, 10)
    assert "q" * 21 not in client.broker.vhosts["/"].queues


def test_max_queue_name_length_cannot_exceed_the_protocols_255(monkeypatch: pytest.MonkeyPatch) -> None:
    from amqpd.config import load

    monkeypatch.setenv("AMQPD_MAX_QUEUE_NAME_LENGTH", "256")
    with pytest.raises(ValueError, match="max_queue_name_length"):
        load()
