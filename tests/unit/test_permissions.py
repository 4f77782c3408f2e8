"""Permissions checked on each AMQP method where RabbitMQ checks them (rabbit_channel), as a channel's user
sees them: the method works with the permissions it needs and is refused with 403, RabbitMQ's text and the
method's class/method ids when one of them is missing. Also topic permissions, user_id and impersonator,
and that a change applies to a channel that is already open."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from fakes import ClientChannel, FakeConnection, new_broker
from pamqp import commands

from amqpd import errors
from amqpd.broker.broker import Broker

C = commands


@dataclass
class Case:
    op: Callable[[ClientChannel], object]
    needs: list[tuple[str, str, str]]  # (permission, resource kind, resource name), in RabbitMQ's order
    ids: tuple[int, int]
    setup: Callable[[ClientChannel], object] = lambda ch: None
    extra: dict[str, str] = field(default_factory=dict)


def publish(exchange: str, key: str = "k") -> Callable[[ClientChannel], object]:
    return lambda ch: ch.publish(exchange, key, b"x")


CASES = {
    "queue.declare": Case(lambda ch: ch.call(C.Queue.Declare(queue="q")), [("configure", "queue", "q")], (50, 10)),
    "queue.declare existing": Case(
        lambda ch: ch.call(C.Queue.Declare(queue="q")),
        [("configure", "queue", "q")],
        (50, 10),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "queue.declare with a dead-letter exchange": Case(
        lambda ch: ch.call(C.Queue.Declare(queue="q", arguments={"x-dead-letter-exchange": "dlx"})),
        [("configure", "queue", "q"), ("read", "queue", "q"), ("write", "exchange", "dlx")],
        (50, 10),
    ),
    "queue.delete": Case(
        lambda ch: ch.call(C.Queue.Delete(queue="q")),
        [("configure", "queue", "q")],
        (50, 40),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "queue.delete missing": Case(
        lambda ch: ch.call(C.Queue.Delete(queue="q")), [("configure", "queue", "q")], (50, 40)
    ),
    "queue.purge": Case(
        lambda ch: ch.call(C.Queue.Purge(queue="q")),
        [("read", "queue", "q")],
        (50, 30),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "queue.bind": Case(
        lambda ch: ch.call(C.Queue.Bind(queue="q", exchange="amq.direct", routing_key="k")),
        [("write", "queue", "q"), ("read", "exchange", "amq.direct")],
        (50, 20),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "queue.unbind": Case(
        lambda ch: ch.call(C.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="k")),
        [("write", "queue", "q"), ("read", "exchange", "amq.direct")],
        (50, 50),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "exchange.declare": Case(
        lambda ch: ch.call(C.Exchange.Declare(exchange="x", exchange_type="direct")),
        [("configure", "exchange", "x")],
        (40, 10),
    ),
    "exchange.declare with an alternate exchange": Case(
        lambda ch: ch.call(
            C.Exchange.Declare(exchange="x", exchange_type="direct", arguments={"alternate-exchange": "ae"})
        ),
        [("configure", "exchange", "x"), ("read", "exchange", "x"), ("write", "exchange", "ae")],
        (40, 10),
    ),
    "exchange.delete": Case(
        lambda ch: ch.call(C.Exchange.Delete(exchange="x")),
        [("configure", "exchange", "x")],
        (40, 20),
        setup=lambda ch: ch.call(C.Exchange.Declare(exchange="x", exchange_type="direct")),
    ),
    "exchange.bind": Case(
        lambda ch: ch.call(C.Exchange.Bind(destination="dst", source="amq.direct", routing_key="k")),
        [("write", "exchange", "dst"), ("read", "exchange", "amq.direct")],
        (40, 30),
        setup=lambda ch: ch.call(C.Exchange.Declare(exchange="dst", exchange_type="fanout")),
    ),
    "exchange.unbind": Case(
        lambda ch: ch.call(C.Exchange.Unbind(destination="dst", source="amq.direct", routing_key="k")),
        [("write", "exchange", "dst"), ("read", "exchange", "amq.direct")],
        (40, 40),
        setup=lambda ch: ch.call(C.Exchange.Declare(exchange="dst", exchange_type="fanout")),
    ),
    "basic.publish": Case(publish("amq.direct"), [("write", "exchange", "amq.direct")], (60, 40)),
    "basic.publish default exchange": Case(publish(""), [("write", "exchange", "amq.default")], (60, 40)),
    "basic.consume": Case(
        lambda ch: ch.call(C.Basic.Consume(queue="q")),
        [("read", "queue", "q")],
        (60, 20),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "basic.get": Case(
        lambda ch: ch.call(C.Basic.Get(queue="q")),
        [("read", "queue", "q")],
        (60, 70),
        setup=lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
}
# Passive declarations check nothing (RabbitMQ neither).
FREE = {
    "queue.declare passive": (
        lambda ch: ch.call(C.Queue.Declare(queue="q", passive=True)),
        lambda ch: ch.call(C.Queue.Declare(queue="q")),
    ),
    "exchange.declare passive": (
        lambda ch: ch.call(C.Exchange.Declare(exchange="amq.direct", passive=True)),
        lambda ch: None,
    ),
}


def user_channel(configure: str = ".*", write: str = ".*", read: str = ".*") -> tuple[Broker, ClientChannel]:
    broker = new_broker()
    broker.access.add_user("u", "pw")
    broker.access.set_permissions("u", "/", configure, write, read)
    return broker, ClientChannel(broker, FakeConnection(user="u"), channel_id=2)


def deny(perm: str) -> dict[str, str]:
    return {perm: "^$"}  # matches only an empty name, which no resource here has


@pytest.mark.parametrize("name", CASES)
def test_the_method_works_with_the_permissions_it_needs(name: str) -> None:
    case = CASES[name]
    broker, ch = user_channel()
    case.setup(ClientChannel(broker))
    case.op(ch)


@pytest.mark.parametrize("name", CASES)
def test_each_missing_permission_is_refused_with_rabbitmqs_text(name: str) -> None:
    case = CASES[name]
    for perm in dict.fromkeys(p for p, _, _ in case.needs):
        kind, resource = next((k, r) for p, k, r in case.needs if p == perm)
        broker, ch = user_channel(**deny(perm))
        case.setup(ClientChannel(broker))
        with pytest.raises(errors.ChannelError) as exc:
            case.op(ch)
        assert (exc.value.code, exc.value.class_id, exc.value.method_id) == (403, *case.ids)
        assert exc.value.text == f"access to {kind} '{resource}' in vhost '/' refused for user 'u'"


@pytest.mark.parametrize("name", FREE)
def test_passive_declarations_need_no_permission(name: str) -> None:
    op, setup = FREE[name]
    broker, ch = user_channel("^$", "^$", "^$")
    setup(ClientChannel(broker))
    op(ch)


def test_a_server_named_queue_is_checked_under_its_generated_name() -> None:
    _, ch = user_channel(configure="^$")
    with pytest.raises(errors.ChannelError) as exc:
        ch.call(C.Queue.Declare(queue="", exclusive=True))
    assert re.fullmatch(r"access to queue 'amq\.gen-[\w-]+' in vhost '/' refused for user 'u'", exc.value.text)


def test_publishing_to_a_missing_exchange_without_write_is_403_not_404() -> None:
    _, ch = user_channel(write="^amq")
    with pytest.raises(errors.ChannelError) as exc:
        ch.publish("nowhere", "k", b"x")
    assert (exc.value.code, exc.value.text) == (403, "access to exchange 'nowhere' in vhost '/' refused for user 'u'")
    _, ch = user_channel()
    with pytest.raises(errors.ChannelError) as exc:
        ch.publish("nowhere", "k", b"x")
    assert exc.value.code == 404


def test_binding_to_the_default_exchange_is_refused_after_the_write_check() -> None:
    broker, ch = user_channel()
    ClientChannel(broker).call(C.Queue.Declare(queue="q"))
    with pytest.raises(errors.ChannelError) as exc:
        ch.call(C.Queue.Bind(queue="q", exchange="", routing_key="k"))
    assert exc.value.text == "operation not permitted on the default exchange"


def test_reserved_names_are_refused_before_permissions() -> None:
    _, ch = user_channel("^$", "^$", "^$")
    with pytest.raises(errors.ChannelError) as exc:
        ch.call(C.Exchange.Delete(exchange="amq.direct"))
    assert exc.value.text == "deletion of system exchange 'amq.direct' in vhost '/' not allowed"


def test_a_revoked_permission_applies_to_the_next_publish_on_an_open_channel() -> None:
    broker, ch = user_channel()
    ch.publish("amq.direct", "k", b"x")
    ch.publish("amq.direct", "k", b"x")  # now remembered on the channel
    broker.access.set_permissions("u", "/", ".*", "^$", ".*")
    with pytest.raises(errors.ChannelError) as exc:
        ch.publish("amq.direct", "k", b"x")
    assert exc.value.code == 403


def test_a_granted_permission_applies_to_an_open_channel() -> None:
    broker, ch = user_channel(configure="^$")
    with pytest.raises(errors.ChannelError):
        ch.call(C.Queue.Declare(queue="q"))
    broker.access.set_permissions("u", "/")
    _, ch = broker, ClientChannel(broker, FakeConnection(user="u"), channel_id=3)
    ch.call(C.Queue.Declare(queue="q"))


# -- topic permissions ------------------------------------------------------------------------------------


def topic_channel() -> tuple[Broker, ClientChannel]:
    broker, ch = user_channel()
    broker.access.set_topic_permissions("u", "/", "amq.topic", write="^{username}\\.", read="^public\\.")
    return broker, ch


def test_topic_write_permission_checks_each_published_routing_key() -> None:
    _, ch = topic_channel()
    ch.publish("amq.topic", "u.orders", b"x")
    ch.publish("amq.topic", "u.orders", b"x")
    with pytest.raises(errors.ChannelError) as exc:
        ch.publish("amq.topic", "other.orders", b"x")
    assert (exc.value.code, exc.value.class_id, exc.value.method_id) == (403, 60, 40)
    assert exc.value.text == "access to topic 'other.orders' in exchange 'amq.topic' in vhost '/' refused for user 'u'"


def test_topic_read_permission_checks_the_binding_key() -> None:
    broker, ch = topic_channel()
    ClientChannel(broker).call(C.Queue.Declare(queue="q"))
    ch.call(C.Queue.Bind(queue="q", exchange="amq.topic", routing_key="public.#"))
    with pytest.raises(errors.ChannelError) as exc:
        ch.call(C.Queue.Bind(queue="q", exchange="amq.topic", routing_key="private.#"))
    assert exc.value.text == "access to topic 'private.#' in exchange 'amq.topic' in vhost '/' refused for user 'u'"


def test_topic_permissions_do_not_apply_to_other_exchange_types() -> None:
    broker, ch = topic_channel()
    broker.access.set_topic_permissions("u", "/", "amq.direct", write="^$", read="^$")
    ch.publish("amq.direct", "anything", b"x")


# -- user_id -----------------------------------------------------------------------------------------------


def test_user_id_must_be_the_connections_user() -> None:
    _, ch = user_channel()
    ch.publish("amq.direct", "k", b"x", user_id="u")
    with pytest.raises(errors.ChannelError) as exc:
        ch.publish("amq.direct", "k", b"x", user_id="someone-else")
    assert exc.value.code == 406
    assert exc.value.text == "user_id property set to 'someone-else' but authenticated user was 'u'"


def test_an_impersonator_may_set_any_user_id() -> None:
    broker, ch = user_channel()
    broker.access.set_user_tags("u", ["impersonator"])
    q = ClientChannel(broker)
    q.call(C.Queue.Declare(queue="q"))
    ch.publish("", "q", b"x", user_id="someone-else")
    assert broker.vhosts["/"].queues["q"].message_count == 1
