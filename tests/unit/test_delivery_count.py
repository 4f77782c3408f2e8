"""Delivery counts and limits as a client sees them (RabbitMQ 3.10 quorum queues are the reference,
observed on the reference broker: x-delivery-count 0 on the first delivery, +1 per return of any kind,
dead-lettered with reason delivery_limit once a return takes the count past the limit)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ClientChannel, FakeConnection, header_payload, messages, new_broker
from pamqp import commands, header

from amqpd import errors
from amqpd.protocol.properties import decode_properties, with_delivery_count


@pytest.fixture
def client() -> ClientChannel:
    return ClientChannel(new_broker())


def headers_of(frames: list[Any]) -> list[dict[str, Any] | None]:
    return [f.properties.headers for f in frames if isinstance(f, header.ContentHeader)]


def get_with_headers(client: ClientChannel, queue: str) -> tuple[int, bool, dict[str, Any] | None] | None:
    frames = client.call(commands.Basic.Get(queue=queue))
    if isinstance(frames[0], commands.Basic.GetEmpty):
        return None
    return frames[0].delivery_tag, frames[0].redelivered, headers_of(frames)[0]


def declare_limited(client: ClientChannel, limit: Any, queue_type: str = "classic", dlx: bool = True) -> None:
    args: dict[str, Any] = {"x-delivery-limit": limit}
    if queue_type == "quorum":
        args["x-queue-type"] = "quorum"
    if dlx:
        client.declare_queue("dlq")
        args.update({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    client.declare_queue("work", durable=True, arguments=args)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_message_nacked_past_the_limit_is_dead_lettered_with_reason_delivery_limit(
    client: ClientChannel, queue_type: str
) -> None:
    declare_limited(client, 2, queue_type)
    client.publish("", "work", b"poison", headers={"app": "v"})
    seen = []
    for _ in range(5):
        got = get_with_headers(client, "work")
        if got is None:
            break
        tag, redelivered, headers = got
        seen.append((redelivered, headers))
        client.nack(tag, requeue=True)
    assert seen == [
        (False, {"app": "v", "x-delivery-count": 0}),
        (True, {"app": "v", "x-delivery-count": 1}),
        (True, {"app": "v", "x-delivery-count": 2}),
    ]
    frames = client.call(commands.Basic.Get(queue="dlq", no_ack=True))
    (dead,) = headers_of(frames)
    assert dead is not None and "x-delivery-count" not in dead and dead["app"] == "v"
    assert dead["x-death"][0]["reason"] == "delivery_limit" and dead["x-death"][0]["queue"] == "work"
    assert dead["x-first-death-reason"] == "delivery_limit"


def test_without_a_dead_letter_exchange_the_message_is_dropped(client: ClientChannel) -> None:
    declare_limited(client, 0, dlx=False)
    client.publish("", "work", b"m")
    tag, _, _ = get_with_headers(client, "work")  # type: ignore[misc]
    client.reject(tag, requeue=True)
    assert client.broker.vhosts["/"].queues["work"].message_count == 0


def test_closing_the_channel_counts_as_a_return(client: ClientChannel) -> None:
    declare_limited(client, 1)
    client.publish("", "work", b"m")
    counts = []
    for channel_id in (2, 3, 4):
        other = ClientChannel(client.broker, FakeConnection(), channel_id)
        got = get_with_headers(other, "work")
        if got is None:
            break
        counts.append(got[2]["x-delivery-count"])  # type: ignore[index]
        other.ch.shutdown()
    assert counts == [0, 1]
    assert client.broker.vhosts["/"].queues["dlq"].message_count == 1


def test_consumer_deliveries_carry_the_count(client: ClientChannel) -> None:
    declare_limited(client, 5)
    client.publish("", "work", b"m")
    client.consume("work")
    first = headers_of(client.pending)
    recovered = client.call(commands.Basic.Recover(requeue=True))
    client.nack(2)
    nacked = client.conn.take_frames()
    # RabbitMQ 3.10: a consumer's first delivery carries no count; basic.get-ok always does
    assert [*first, *headers_of(recovered), *headers_of(nacked)] == [
        None,
        {"x-delivery-count": 1},
        {"x-delivery-count": 2},
    ]
    assert messages(nacked)[0][0].redelivered


def test_queue_without_a_limit_sends_no_count_header(client: ClientChannel) -> None:
    client.declare_queue("plain")
    client.publish("", "plain", b"m")
    tag, _, headers = get_with_headers(client, "plain")  # type: ignore[misc]
    assert headers is None
    client.nack(tag)
    assert get_with_headers(client, "plain")[2] is None  # type: ignore[index]


def test_quorum_queue_without_a_limit_counts_but_never_dead_letters(client: ClientChannel) -> None:
    client.declare_queue("q", durable=True, arguments={"x-queue-type": "quorum"})
    client.publish("", "q", b"m")
    for expected in range(4):
        tag, _, headers = get_with_headers(client, "q")  # type: ignore[misc]
        assert headers == {"x-delivery-count": expected}
        client.nack(tag)


def test_a_string_limit_is_accepted_and_never_reached(client: ClientChannel) -> None:
    """RabbitMQ 3.10 compares the count with the argument as an Erlang term: a number never exceeds a string."""
    declare_limited(client, "x", "quorum")
    client.publish("", "work", b"m")
    for _ in range(3):
        tag, _, _ = get_with_headers(client, "work")  # type: ignore[misc]
        client.nack(tag)
    assert client.broker.vhosts["/"].queues["work"].message_count == 1


def test_publisher_set_x_delivery_count_is_replaced() -> None:
    hdr = header_payload(1, headers={"x-delivery-count": "forged", "k": 1})
    props = decode_properties(with_delivery_count(hdr, 3))
    assert props.headers == {"k": 1, "x-delivery-count": 3}


def test_count_header_is_a_long_long_as_rabbitmq_sends_it() -> None:
    hdr = header_payload(1, content_type="text/plain")
    out = with_delivery_count(hdr, 0)
    assert b"\x10x-delivery-countl\x00\x00\x00\x00\x00\x00\x00\x00" in out
    assert decode_properties(out).content_type == "text/plain"


def test_redeclaring_with_another_limit_is_refused(client: ClientChannel) -> None:
    declare_limited(client, 2, dlx=False)
    with pytest.raises(errors.ChannelError) as info:
        client.call(commands.Queue.Declare(queue="work", durable=True, arguments={"x-delivery-limit": 3}))
    assert (info.value.code, info.value.class_id, info.value.method_id) == (406, 50, 10)


def test_a_delivery_limit_policy_limits_a_queue_declared_without_one(client: ClientChannel) -> None:
    client.declare_queue("dlq")
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    client.broker.policies.put("/", "poison", "^work$", {"delivery-limit": 1}, 0, "queues")
    client.publish("", "work", b"poison")
    counts = []
    for _ in range(4):  # bounded: without the limit the message would come back for ever
        got = get_with_headers(client, "work")
        if got is None:
            break
        tag, _, headers = got
        counts.append((headers or {}).get("x-delivery-count"))
        client.nack(tag, requeue=True)
    assert counts == [0, 1]
    dead = get_with_headers(client, "dlq")
    assert dead is not None and dead[2] is not None
    assert dead[2]["x-death"][0]["reason"] == "delivery_limit"
