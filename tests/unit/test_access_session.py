"""Access control at the connection level, driven with bytes as a client would: login refusals (never
telling an unknown user from a wrong password), guest only from loopback, vhost access, the vhost and
node connection limits, max-queues, and what deleting a vhost or a user does to open connections."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import FakeTransport, decode_frames, new_broker, publish_frames
from pamqp import commands, frame

from amqpd.broker.broker import Broker
from amqpd.config import Settings
from amqpd.session.connection import Session

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
CLOSE_ON_FAILURE = {"authentication_failure_close": True}


class Client:
    def __init__(self, broker: Broker, peer: str = "127.0.0.1:40000") -> None:
        self.broker = broker
        self.transport = FakeTransport()
        self.session = Session(broker, self.transport, peer)

    def method(self, channel: int, method: Any) -> list[Any]:
        self.session.feed(frame.marshal(method, channel))
        return [obj for _, obj in decode_frames(self.session.take_output())]

    def login(self, user: str, password: str, capabilities: dict | None = None) -> list[Any]:
        self.session.feed(PROTOCOL_HEADER)
        self.session.take_output()
        props = {"capabilities": CLOSE_ON_FAILURE if capabilities is None else capabilities}
        return self.method(0, commands.Connection.StartOk(props, "PLAIN", f"\0{user}\0{password}", "en_US"))

    def connect(self, user: str = "guest", password: str = "guest", vhost: str = "/") -> list[Any]:
        (tune,) = self.login(user, password)
        assert isinstance(tune, commands.Connection.Tune), tune
        self.method(0, commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        return self.method(0, commands.Connection.Open(vhost))


def closed_with(frames: list[Any]) -> tuple[int, str, int, int]:
    (close,) = frames
    assert isinstance(close, (commands.Connection.Close, commands.Channel.Close)), frames
    return close.reply_code, close.reply_text, close.class_id, close.method_id


@pytest.fixture
def broker() -> Broker:
    b = new_broker()
    b.access.add_user("alice", "pw")
    b.access.add_vhost("tenant")
    b.access.set_permissions("alice", "tenant")
    return b


REFUSED = "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."


def test_wrong_password_and_unknown_user_look_the_same_and_are_counted(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    assert closed_with(Client(broker).login("alice", "wrong")) == (403, REFUSED, 0, 0)
    assert closed_with(Client(broker).login("nobody", "pw")) == (403, REFUSED, 0, 0)
    assert broker.access.failed_logins == 2
    logged = [r.getMessage() for r in caplog.records if "login refused" in r.getMessage()]
    assert logged == [
        "PLAIN login refused for user 'alice' from 127.0.0.1:40000: invalid credentials",
        "PLAIN login refused for user 'nobody' from 127.0.0.1:40000: invalid credentials",
    ]


def test_without_authentication_failure_close_a_refused_login_just_hangs_up(broker: Broker) -> None:
    client = Client(broker)
    assert client.login("alice", "wrong", capabilities={}) == []
    assert client.transport.closed


def test_guest_may_connect_only_from_loopback(broker: Broker) -> None:
    assert closed_with(Client(broker, "10.1.2.3:5555").login("guest", "guest")) == (403, REFUSED, 0, 0)
    assert isinstance(Client(broker, "[::1]:5555").connect()[0], commands.Connection.OpenOk)
    assert isinstance(Client(broker, "10.1.2.3:5555").connect("alice", "pw", "tenant")[0], commands.Connection.OpenOk)


def test_loopback_users_is_configurable() -> None:
    broker = new_broker(loopback_users=[])
    assert isinstance(Client(broker, "10.1.2.3:5555").connect()[0], commands.Connection.OpenOk)


def test_a_vhost_without_permissions_is_refused_with_530(broker: Broker) -> None:
    assert closed_with(Client(broker).connect("alice", "pw", "/")) == (
        530,
        "NOT_ALLOWED - access to vhost '/' refused for user 'alice'",
        10,
        40,
    )
    assert closed_with(Client(broker).connect("alice", "pw", "nope")) == (
        530,
        "NOT_ALLOWED - vhost nope not found",
        10,
        40,
    )


def test_deleting_a_vhost_closes_its_connections_with_320_and_leaves_others(broker: Broker) -> None:
    tenant, other = Client(broker), Client(broker)
    tenant.connect("alice", "pw", "tenant")
    other.connect()
    tenant.method(1, commands.Channel.Open())
    tenant.method(1, commands.Queue.Declare(queue="q"))
    broker.access.delete_vhost("tenant")
    assert closed_with([obj for _, obj in decode_frames(tenant.session.take_output())]) == (
        320,
        "CONNECTION_FORCED - vhost 'tenant' is deleted",
        0,
        0,
    )
    assert other.session.take_output() == b""
    assert "tenant" not in broker.vhosts
    assert closed_with(Client(broker).connect("alice", "pw", "tenant"))[0] == 530


def test_deleting_a_user_closes_its_connections_with_320(broker: Broker) -> None:
    alice = Client(broker)
    alice.connect("alice", "pw", "tenant")
    broker.access.delete_user("alice")
    assert closed_with([obj for _, obj in decode_frames(alice.session.take_output())]) == (
        320,
        "CONNECTION_FORCED - user 'alice' is deleted",
        0,
        0,
    )


def test_cleared_permissions_refuse_the_next_operation_on_an_open_connection(broker: Broker) -> None:
    alice = Client(broker)
    alice.connect("alice", "pw", "tenant")
    alice.method(1, commands.Channel.Open())
    broker.access.clear_permissions("alice", "tenant")
    assert closed_with(alice.method(1, commands.Queue.Declare(queue="q"))) == (
        403,
        "ACCESS_REFUSED - access to queue 'q' in vhost 'tenant' refused for user 'alice'",
        50,
        10,
    )


def test_vhost_max_connections(broker: Broker) -> None:
    broker.access.set_vhost_limits("tenant", {"max-connections": 1})
    Client(broker).connect("alice", "pw", "tenant")
    assert closed_with(Client(broker).connect("alice", "pw", "tenant")) == (
        530,
        "NOT_ALLOWED - access to vhost 'tenant' refused for user 'alice': connection limit (1) is reached",
        10,
        40,
    )
    assert isinstance(Client(broker).connect()[0], commands.Connection.OpenOk)  # another vhost


def test_vhost_max_queues_refuses_new_queues_only(broker: Broker) -> None:
    broker.access.set_vhost_limits("tenant", {"max-queues": 1})
    alice = Client(broker)
    alice.connect("alice", "pw", "tenant")
    alice.method(1, commands.Channel.Open())
    assert isinstance(alice.method(1, commands.Queue.Declare(queue="one"))[0], commands.Queue.DeclareOk)
    assert isinstance(alice.method(1, commands.Queue.Declare(queue="one"))[0], commands.Queue.DeclareOk)
    assert closed_with(alice.method(1, commands.Queue.Declare(queue="two"))) == (
        406,
        "PRECONDITION_FAILED - cannot declare queue 'two': queue limit in vhost 'tenant' (1) is reached",
        50,
        10,
    )


def test_node_and_per_user_connection_limits() -> None:
    broker = new_broker(max_connections_per_user=1, max_connections=2)
    broker.access.add_user("bob", "pw")
    broker.access.set_permissions("bob", "/")
    Client(broker).connect()
    assert closed_with(Client(broker).connect()) == (
        530,
        "NOT_ALLOWED - connection refused for user 'guest': user connection limit (1) is reached",
        10,
        40,
    )
    Client(broker).connect("bob", "pw")
    broker.access.add_user("carol", "pw")
    broker.access.set_permissions("carol", "/")
    assert closed_with(Client(broker).connect("carol", "pw")) == (
        530,
        "NOT_ALLOWED - connection refused: node connection limit (2) is reached",
        10,
        40,
    )


def test_user_limits_on_connections_and_channels_over_all_its_connections(broker: Broker) -> None:
    broker.access.add_vhost("other")
    broker.access.set_permissions("alice", "other")
    broker.access.set_user_limits("alice", {"max-connections": 2, "max-channels": 2})
    first, second = Client(broker), Client(broker)
    first.connect("alice", "pw", "tenant")
    second.connect("alice", "pw", "other")
    assert closed_with(Client(broker).connect("alice", "pw", "tenant")) == (
        530,
        "NOT_ALLOWED - connection refused for user 'alice': user connection limit (2) is reached",
        10,
        40,
    )
    assert isinstance(first.method(1, commands.Channel.Open())[0], commands.Channel.OpenOk)
    assert isinstance(second.method(1, commands.Channel.Open())[0], commands.Channel.OpenOk)
    assert closed_with(first.method(2, commands.Channel.Open())) == (
        530,
        "NOT_ALLOWED - number of channels opened for user 'alice' has reached the maximum allowed user limit of (2)",
        0,
        0,
    )
    assert isinstance(Client(broker).connect()[0], commands.Connection.OpenOk)  # other users are not limited


class UnsyncedStore:
    """A store whose fsync the test runs by hand: confirms wait until then."""

    def __init__(self) -> None:
        self.on_durable: list[Any] = []

    def put_queue(self, *args: Any) -> int:
        return 1

    def append(self, record: Any, queue_ids: list[int], on_durable: Any = None, on_failed: Any = None) -> int:
        self.on_durable.append(on_durable)
        return len(self.on_durable) - 1

    def ack(self, *args: Any) -> None:
        pass

    def ack_many(self, *args: Any) -> None:
        pass

    def fsync(self, count: int) -> None:
        done, self.on_durable = self.on_durable[:count], self.on_durable[count:]
        for callback in done:
            callback()


def test_reading_pauses_at_max_unconfirmed_publishes_until_half_are_confirmed() -> None:
    store = UnsyncedStore()
    broker = Broker(Settings(max_unconfirmed_publishes=4), store=store)
    client = Client(broker)
    client.connect()
    client.method(1, commands.Channel.Open())
    client.method(1, commands.Queue.Declare(queue="q", durable=True))
    client.method(1, commands.Confirm.Select())
    for _ in range(3):
        client.session.feed(publish_frames(1, "", "q", b"x", delivery_mode=2))
    assert client.transport.holds == set()
    client.session.feed(publish_frames(1, "", "q", b"x", delivery_mode=2))
    assert client.transport.holds == {"unconfirmed"}
    store.fsync(1)
    assert client.transport.holds == {"unconfirmed"}  # 3 outstanding: not yet half
    store.fsync(1)
    assert client.transport.holds == set()
    acks = [f for _, f in decode_frames(client.session.take_output()) if isinstance(f, commands.Basic.Ack)]
    assert acks[-1].delivery_tag == 2
