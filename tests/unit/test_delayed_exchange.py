"""The x-delayed-message exchange as a client sees it. The semantics are rabbitmq_delayed_message_exchange's
(https://github.com/rabbitmq/rabbitmq-delayed-message-exchange, README.md "The Basics", "Routing",
"Performance Impact", "Limitations"; src/rabbit_delayed_message_utils.erl for the x-delay types and the
swap to -delay) — the reference RabbitMQ has no plugin, so these are not interop scenarios. Where amqpd does
better than the plugin (no 2^32-1 ms cap, mandatory), the test says so."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ClientChannel, new_broker
from pamqp import commands, header

from amqpd import errors
from amqpd.broker.routing.delay_schedule import DelaySchedule
from amqpd.broker.routing.exchanges import DelayedExchange

T0 = 1_800_000_000_000


@pytest.fixture
def clock() -> list[int]:
    return [T0]


@pytest.fixture
def client(clock: list[int]) -> ClientChannel:
    broker = new_broker(now_ms=lambda: clock[0])  # queues count TTLs on the same clock as due times
    c = ClientChannel(broker)
    c.call(
        commands.Exchange.Declare(
            exchange="dx", exchange_type="x-delayed-message", arguments={"x-delayed-type": "direct"}
        )
    )
    c.declare_queue("q")
    c.call(commands.Queue.Bind(queue="q", exchange="dx", routing_key="k"))
    return c


def exchange(client: ClientChannel, name: str = "dx") -> DelayedExchange:
    ex = client.broker.vhosts["/"].exchanges[name]
    assert isinstance(ex, DelayedExchange)
    return ex


def advance(client: ClientChannel, clock: list[int], ms: int, name: str = "dx") -> None:
    clock[0] += ms
    client.broker.delayed.release_due(exchange(client, name))


def drain(client: ClientChannel, queue: str = "q") -> list[tuple[bytes, Any]]:
    out = []
    while True:
        frames = client.call(commands.Basic.Get(queue=queue, no_ack=True))
        if isinstance(frames[0], commands.Basic.GetEmpty):
            return out
        props = next(f.properties for f in frames if isinstance(f, header.ContentHeader))
        out.append((b"".join(f.value for f in frames[2:]), props.headers))


def test_message_waits_x_delay_ms_then_arrives_with_x_delay_negated(client: ClientChannel, clock: list[int]) -> None:
    client.publish("dx", "k", b"later", headers={"x-delay": 5000, "app": 1})
    advance(client, clock, 4999)
    assert drain(client) == []
    advance(client, clock, 1)
    assert drain(client) == [(b"later", {"x-delay": -5000, "app": 1})]


def test_shorter_delay_is_delivered_first_and_equal_due_times_keep_publish_order(
    client: ClientChannel, clock: list[int]
) -> None:
    """The README's example: 5000 ms then 1000 ms → the 1000 ms message comes first."""
    client.publish("dx", "k", b"delayed payload", headers={"x-delay": 5000})
    client.publish("dx", "k", b"more delayed payload", headers={"x-delay": 1000})
    client.publish("dx", "k", b"same time a", headers={"x-delay": 3000})
    client.publish("dx", "k", b"same time b", headers={"x-delay": 3000})
    advance(client, clock, 6000)
    assert [b for b, _ in drain(client)] == [
        b"more delayed payload",
        b"same time a",
        b"same time b",
        b"delayed payload",
    ]


@pytest.mark.parametrize("value", [None, 0, -10, "soon", True, [1]])
def test_without_a_positive_delay_the_message_is_routed_at_once(client: ClientChannel, value: Any) -> None:
    headers = {} if value is None else {"x-delay": value}
    client.publish("dx", "k", b"now", headers=headers)
    assert [b for b, _ in drain(client)] == [b"now"]
    assert exchange(client).waiting_count() == 0


@pytest.mark.parametrize("value", ["1500", 1500.9])
def test_string_and_float_delays_are_converted_as_the_plugin_does(
    client: ClientChannel, clock: list[int], value: Any
) -> None:
    client.publish("dx", "k", b"m", headers={"x-delay": value})
    advance(client, clock, 1499)
    assert drain(client) == []
    advance(client, clock, 1)
    assert drain(client)[0][1] == {"x-delay": -1500}


def test_no_49_day_cap(client: ClientChannel, clock: list[int]) -> None:
    """The plugin routes a delay above 2^32-1 ms (49.7 days) at once; amqpd waits."""
    ninety_days = 90 * 86_400_000
    client.publish("dx", "k", b"m", headers={"x-delay": ninety_days})
    assert exchange(client).next_due_ms() == T0 + ninety_days
    advance(client, clock, ninety_days - 1)
    assert drain(client) == []
    advance(client, clock, 1)
    assert len(drain(client)) == 1


def test_routing_follows_x_delayed_type_and_bindings_at_due_time(client: ClientChannel, clock: list[int]) -> None:
    client.call(
        commands.Exchange.Declare(
            exchange="tx", exchange_type="x-delayed-message", arguments={"x-delayed-type": "topic"}
        )
    )
    client.declare_queue("a")
    client.call(commands.Queue.Bind(queue="a", exchange="tx", routing_key="orders.#"))
    client.publish("tx", "orders.eu.new", b"m", headers={"x-delay": 10})
    client.declare_queue("b")
    client.call(commands.Queue.Bind(queue="b", exchange="tx", routing_key="*.eu.*"))  # bound while it waits
    advance(client, clock, 10, "tx")
    assert (len(drain(client, "a")), len(drain(client, "b"))) == (1, 1)


def test_waiting_count_and_next_due(client: ClientChannel, clock: list[int]) -> None:
    ex = exchange(client)
    assert (ex.waiting_count(), ex.next_due_ms()) == (0, None)
    client.publish("dx", "k", b"a", headers={"x-delay": 700})
    client.publish("dx", "k", b"b", headers={"x-delay": 300})
    assert (ex.waiting_count(), ex.next_due_ms()) == (2, T0 + 300)
    advance(client, clock, 300)
    assert (ex.waiting_count(), ex.next_due_ms()) == (1, T0 + 700)


def test_mandatory_publish_nothing_would_route_is_returned_not_delayed(client: ClientChannel) -> None:
    """The plugin returns every delayed mandatory publish (it routes to nothing at publish time); amqpd returns
    only one that no binding would route now, and delays the others."""
    client.publish("dx", "nowhere", b"lost", mandatory=True, headers={"x-delay": 100})
    client.publish("dx", "k", b"kept", mandatory=True, headers={"x-delay": 100})
    frames = client.conn.take_frames()
    returns = [f for f in frames if isinstance(f, commands.Basic.Return)]
    assert [(r.reply_code, r.routing_key) for r in returns] == [(312, "nowhere")]
    assert exchange(client).waiting_count() == 1


def test_unroutable_when_due_is_dropped(client: ClientChannel, clock: list[int]) -> None:
    client.publish("dx", "k", b"m", headers={"x-delay": 10})
    client.call(commands.Queue.Unbind(queue="q", exchange="dx", routing_key="k"))
    advance(client, clock, 10)
    assert drain(client) == [] and exchange(client).waiting_count() == 0


def test_transient_delayed_publish_is_confirmed_at_once(client: ClientChannel) -> None:
    client.call(commands.Confirm.Select())
    client.publish("dx", "k", b"m", headers={"x-delay": 10_000})
    acks = [f for f in client.conn.take_frames() if isinstance(f, commands.Basic.Ack)]
    assert [a.delivery_tag for a in acks] == [1]


def test_deleting_the_exchange_drops_what_waits(client: ClientChannel, clock: list[int]) -> None:
    client.publish("dx", "k", b"m", headers={"x-delay": 10})
    ex = exchange(client)
    client.call(commands.Exchange.Delete(exchange="dx"))
    assert ex.waiting_count() == 0
    client.broker.delayed.release_due(ex)
    assert drain(client) == []


def test_a_delayed_message_keeps_its_ttl_from_when_it_is_routed(client: ClientChannel, clock: list[int]) -> None:
    client.publish("dx", "k", b"m", headers={"x-delay": 1000}, expiration="500")
    advance(client, clock, 1000)
    (entry,) = client.broker.vhosts["/"].queues["q"].ready
    assert entry.expires_at == T0 + 1000 + 500  # counted from routing, not from the publish


def test_a_burst_all_due_at_once_is_routed_in_batches(client: ClientChannel, clock: list[int]) -> None:
    for i in range(2500):
        client.publish("dx", "k", b"%d" % i, headers={"x-delay": 5})
    clock[0] += 5
    assert client.broker.delayed.release_due(exchange(client)) == 2000
    assert client.broker.delayed.release_due(exchange(client)) == 500
    assert [int(b) for b, _ in drain(client)] == list(range(2500))


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({}, 406),
        ({"x-delayed-type": 5}, 406),
        ({"x-delayed-type": "x-delayed-message"}, 406),
        ({"x-delayed-type": "nonesuch"}, 503),
    ],
)
def test_declare_needs_an_existing_x_delayed_type(arguments: dict[str, Any], code: int) -> None:
    c = ClientChannel(new_broker())
    with pytest.raises(errors.AMQPError) as info:
        c.call(commands.Exchange.Declare(exchange="bad", exchange_type="x-delayed-message", arguments=arguments))
    assert (info.value.code, info.value.class_id, info.value.method_id) == (code, 40, 10)
    assert isinstance(info.value, errors.ConnectionError) == (code == 503)


def test_schedule_pops_in_due_order() -> None:
    s = DelaySchedule()
    for due, item in [(30, "c"), (10, "a"), (20, "b"), (10, "a2")]:
        s.push(due, item)
    assert s.pop_due(15, 10) == [(10, "a"), (10, "a2")]
    assert (len(s), s.next_due()) == (2, 20)
    assert s.pop_due(100, 1) == [(20, "b")]


def test_a_message_that_fails_to_route_leaves_the_others_scheduled(
    client: ClientChannel, clock: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    client.publish("dx", "k", b"first", headers={"x-delay": 10})
    client.publish("dx", "k", b"later", headers={"x-delay": 500})
    vhost = client.broker.vhosts["/"]

    def broken(ex: Any, msg: Any) -> Any:
        raise RuntimeError("routing failed")

    monkeypatch.setattr(vhost, "plan_for", broken)  # the release routes as a publish does
    clock[0] += 10
    with pytest.raises(RuntimeError):
        client.broker.delayed.release_due(exchange(client))
    assert exchange(client).timer_due == T0 + 500  # armed again for the next one
    monkeypatch.undo()


def test_released_headers_keep_every_value_byte_for_byte_sorted_with_x_delay_a_signedint(
    client: ClientChannel, clock: list[int]
) -> None:
    """swap_delay_header sets x-delay with rabbit_misc:set_table_value (signedint, table sorted by key); the
    other values keep their wire types (a long long 5 must not come back as a short-short)."""
    import struct

    from fakes import method_payload

    entries = [
        (b"zz", b"l" + struct.pack(">q", 5)),
        (b"x-delay", b"I" + struct.pack(">i", 100)),
        (b"aa", b"S" + struct.pack(">I", 2) + b"hi"),
    ]
    inner = b"".join(bytes((len(k),)) + k + v for k, v in entries)
    hdr = struct.pack(">HHQH", 60, 0, 1, 1 << 13) + struct.pack(">I", len(inner)) + inner
    client.ch.on_publish(method_payload(commands.Basic.Publish(0, "dx", "k", False)))
    client.ch.on_header(hdr)
    client.ch.on_body(b"m")
    advance(client, clock, 100)
    (entry,) = client.broker.vhosts["/"].queues["q"].ready
    want = [entries[2], (b"x-delay", b"I" + struct.pack(">i", -100)), entries[0]]
    table = b"".join(bytes((len(k),)) + k + v for k, v in want)
    assert entry.msg.header.endswith(struct.pack(">I", len(table)) + table)


def test_a_duplicate_released_into_a_deduplicating_queue_is_dropped(client: ClientChannel, clock: list[int]) -> None:
    """A delayed message takes every step of a publish when it is released, deduplication included: the
    second message with the same id reaches the x-message-deduplication queue not at all."""
    client.declare_queue("once", arguments={"x-message-deduplication": True})
    client.call(commands.Queue.Bind(queue="once", exchange="dx", routing_key="once"))
    for body in (b"first", b"again"):
        client.publish("dx", "once", body, message_id="same", headers={"x-delay": 1000})
    advance(client, clock, 1000)
    assert [body for body, _ in drain(client, "once")] == [b"first"]
