"""Time-ordered message ids for queues that ask for them (x-amqpd-message-id: true)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ClientChannel, new_broker
from pamqp import commands, header

from amqpd.broker.queues.message_ids import HEADER


@pytest.fixture
def client() -> ClientChannel:
    c = ClientChannel(new_broker())
    c.declare_queue("ids", arguments={"x-amqpd-message-id": True})
    c.declare_queue("plain")
    return c


def props(client: ClientChannel, queue: str) -> Any:
    frames = client.call(commands.Basic.Get(queue=queue, no_ack=True))
    return next(f.properties for f in frames if isinstance(f, header.ContentHeader))


def test_ids_sort_by_publish_time_as_numbers_and_as_strings() -> None:
    now = [1_800_000_000_000]
    client = ClientChannel(new_broker(now_ms=lambda: now[0]))  # ids come from the broker's clock
    client.declare_queue("ids", arguments={"x-amqpd-message-id": True})
    for i in range(3):
        client.publish("", "ids", b"%d" % i, headers={"app": i})
        now[0] += 1 if i else 0  # two in the same millisecond, then the next one later
    got = [props(client, "ids") for _ in range(3)]
    ids = [p.headers["x-amqpd-message-id"] for p in got]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert ids[0] >> 16 == 1_800_000_000_000 and ids[1] == ids[0] + 1 and ids[2] >> 16 == 1_800_000_000_001
    assert [p.message_id for p in got] == [f"{i:020d}" for i in ids]
    assert [p.headers["app"] for p in got] == [0, 1, 2]


def test_publisher_message_id_is_kept(client: ClientChannel) -> None:
    client.publish("", "ids", b"m", message_id="mine")
    p = props(client, "ids")
    assert p.message_id == "mine" and isinstance(p.headers["x-amqpd-message-id"], int)


def test_queues_that_did_not_ask_get_nothing(client: ClientChannel) -> None:
    client.publish("", "plain", b"m")
    p = props(client, "plain")
    assert p.message_id is None and p.headers is None


def test_every_queue_of_a_fan_out_sees_the_same_id(client: ClientChannel) -> None:
    client.call(commands.Exchange.Declare(exchange="fan", exchange_type="fanout"))
    for q in ("ids", "plain"):
        client.call(commands.Queue.Bind(queue=q, exchange="fan"))
    client.publish("fan", "", b"m")
    a, b = props(client, "ids"), props(client, "plain")
    assert a.message_id == b.message_id and a.headers == b.headers


def test_a_vhost_that_opts_in_stamps_in_every_queue_present_and_future(client: ClientChannel) -> None:
    client.broker.access.set_vhost_message_ids("/", True)
    client.declare_queue("later")
    for q in ("plain", "later"):
        client.publish("", q, b"m")
        p = props(client, q)
        assert isinstance(p.headers["x-amqpd-message-id"], int) and p.message_id == f"{p.headers[HEADER]:020d}"


def test_turning_the_vhost_setting_off_leaves_queues_that_asked_themselves(client: ClientChannel) -> None:
    client.broker.access.set_vhost_message_ids("/", True)
    client.broker.access.set_vhost_message_ids("/", False)
    client.publish("", "plain", b"m")
    client.publish("", "ids", b"m")
    assert props(client, "plain").headers is None
    assert HEADER in props(client, "ids").headers


def test_the_setting_is_per_vhost(client: ClientChannel) -> None:
    client.broker.access.add_vhost("other")
    client.broker.access.set_permissions("guest", "other")
    client.broker.access.set_vhost_message_ids("other", True)
    other = ClientChannel(client.broker, vhost="other")
    other.declare_queue("q")
    other.publish("", "q", b"m")
    client.publish("", "plain", b"m")
    assert HEADER in props(other, "q").headers
    assert props(client, "plain").headers is None


def test_the_vhost_setting_applies_to_routes_already_used(client: ClientChannel) -> None:
    # publish plans are cached per (exchange, routing key) and record whether their queues stamp ids
    client.publish("", "plain", b"before")
    assert props(client, "plain").headers is None
    client.broker.access.set_vhost_message_ids("/", True)
    client.publish("", "plain", b"on")
    assert HEADER in props(client, "plain").headers
    client.broker.access.set_vhost_message_ids("/", False)
    client.publish("", "plain", b"off")
    assert props(client, "plain").headers is None
