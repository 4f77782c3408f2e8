"""Publisher flow control by consumer pace (amqpd/broker/queues/flow.py), without sockets: a publisher and a consumer
on their own connections, the event loop's turns moved by hand (broker.turns.tick() is one turn in which
something was read). A publisher pauses while a deep queue's consumers come back for more within PACE_TURNS
turns (they wait on the broker), never behind consumers that are slow on their own, a queue nobody consumes
from, or a stream."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakes import ClientChannel, Conn, new_broker, publish_frames
from pamqp import commands, frame

from amqpd.broker.broker import Broker
from amqpd.broker.queues.flow import PACE_TURNS, TurnClock
from amqpd.broker.queues.queue import Queue

HIGH, LOW = 8, 4


@pytest.fixture(autouse=True)
def low_water_marks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Small thresholds, so a handful of messages makes a deep queue (streams keep their own: never)."""
    monkeypatch.setattr(Queue, "FLOW_HIGH", HIGH)
    monkeypatch.setattr(Queue, "FLOW_LOW", LOW)
    yield


@pytest.fixture
def broker() -> Broker:
    return new_broker()


@pytest.fixture
def pub(broker: Broker) -> ClientChannel:
    c = ClientChannel(broker)
    c.declare_queue("q")
    return c


def consumer(broker: Broker, prefetch: int = 1, no_ack: bool = False) -> ClientChannel:
    c = ClientChannel(broker)
    c.call(commands.Basic.Qos(prefetch_count=prefetch))
    c.consume("q", "worker", no_ack=no_ack)
    return c


def publish(pub: ClientChannel, n: int, queue: str = "q") -> None:
    for i in range(n):
        pub.publish("", queue, b"%d" % i)


def turns(broker: Broker, n: int = 1) -> None:
    for _ in range(n):
        broker.turns.tick()


def ack_all(con: ClientChannel) -> int:
    """The consumer acks everything it was given; how many that was."""
    got = con.deliveries()
    if got:
        con.ack(got[-1][0].delivery_tag, multiple=True)
    return len(got)


def depth(broker: Broker) -> int:
    q: Any = broker.vhosts["/"].queues["q"]
    return q.message_count


def test_a_consumer_that_comes_back_within_a_turn_pauses_a_publisher_that_outruns_it(
    broker: Broker, pub: ClientChannel
) -> None:
    con = consumer(broker, prefetch=2)
    turns(broker, 2 * PACE_TURNS)  # the broker has been running a while
    publish(pub, HIGH)  # two go out, the rest wait: the consumer is out of room
    turns(broker)
    assert ack_all(con) == 2  # back for more one turn later: it waits on the broker, not on itself
    assert pub.conn.paused_by == set()  # not deep yet
    publish(pub, HIGH)
    assert depth(broker) > HIGH
    assert pub.conn.paused_by == {"q"}


def test_a_backlog_behind_a_consumer_slow_on_its_own_never_pauses_publishers(
    broker: Broker, pub: ClientChannel
) -> None:
    """RabbitMQ keeps accepting behind consumers whose prefetch is full because they process slowly."""
    con = consumer(broker, prefetch=2)
    for _ in range(5):
        publish(pub, HIGH)
        turns(broker, PACE_TURNS + 1)
        assert ack_all(con) == 2
    publish(pub, HIGH)
    assert depth(broker) > 4 * HIGH
    assert pub.conn.paused_by == set()


def test_a_consumer_at_its_prefetch_limit_that_never_acks_does_not_pause_publishers(
    broker: Broker, pub: ClientChannel
) -> None:
    consumer(broker, prefetch=1)
    publish(pub, 3 * HIGH)
    assert depth(broker) == 3 * HIGH - 1
    assert pub.conn.paused_by == set()


def test_a_queue_nobody_consumes_from_keeps_accepting(broker: Broker, pub: ClientChannel) -> None:
    for _ in range(3):
        publish(pub, 2 * HIGH)
        turns(broker)
    assert depth(broker) == 6 * HIGH
    assert pub.conn.paused_by == set()


def paused_publisher(broker: Broker, pub: ClientChannel, prefetch: int = 2) -> ClientChannel:
    con = consumer(broker, prefetch=prefetch)
    publish(pub, HIGH)
    turns(broker)
    ack_all(con)
    publish(pub, HIGH)
    assert pub.conn.paused_by == {"q"}
    return con


def test_a_paused_publisher_goes_on_once_the_backlog_drains_below_the_low_water_mark(
    broker: Broker, pub: ClientChannel
) -> None:
    con = paused_publisher(broker, pub)
    while depth(broker) >= LOW:
        assert pub.conn.paused_by == {"q"}  # hysteresis: still paused between the marks
        turns(broker)
        assert ack_all(con) == 2
    assert pub.conn.paused_by == set()
    assert broker.vhosts["/"].queues["q"].throttled == set()


def test_housekeeping_lets_a_publisher_behind_quiet_consumers_go_on(broker: Broker, pub: ClientChannel) -> None:
    """broker.check_flow (once per alarm_interval) releases every paused publisher; it pauses again only once
    the consumers have come back quickly while it is read."""
    paused_publisher(broker, pub)
    broker.check_flow()
    assert pub.conn.paused_by == set()
    publish(pub, HIGH)  # the consumers have gone quiet: nothing shows they wait on the broker
    assert pub.conn.paused_by == set()


def test_after_housekeeping_a_publisher_behind_consumers_the_broker_starves_pauses_again(
    broker: Broker, pub: ClientChannel
) -> None:
    con = paused_publisher(broker, pub)
    broker.check_flow()
    publish(pub, HIGH)
    turns(broker)
    assert ack_all(con) == 2  # back within a turn while the publisher is read
    assert pub.conn.paused_by == set()
    publish(pub, 1)
    assert pub.conn.paused_by == {"q"}


def test_a_burst_behind_a_slow_consumer_goes_on_after_housekeeping(broker: Broker, pub: ClientChannel) -> None:
    """While the publisher was paused, nothing else was read, so a slow consumer's acks came a turn apart
    and looked quick. Once released, its publishes are read between the acks, which then come many turns
    apart: tasks behind busy workers keep flowing in, as RabbitMQ takes them."""
    con = paused_publisher(broker, pub)
    for _ in range(3):
        turns(broker)
        assert ack_all(con) == 2  # nothing else read in between: a turn apart
        assert pub.conn.paused_by == {"q"}
    broker.check_flow()
    for _ in range(3):
        publish(pub, HIGH)
        turns(broker, PACE_TURNS + 1)  # the publisher's reads between the worker's acks
        assert ack_all(con) == 2
        assert pub.conn.paused_by == set()


def test_a_paused_publisher_stays_paused_after_one_slow_return(broker: Broker, pub: ClientChannel) -> None:
    """One slow return does not release it (the queue stays above the low-water mark): hysteresis."""
    con = paused_publisher(broker, pub)
    turns(broker, PACE_TURNS + 1)
    assert ack_all(con) == 2
    assert depth(broker) >= LOW
    assert pub.conn.paused_by == {"q"}


def test_a_publisher_goes_on_when_the_consumer_cancels(broker: Broker, pub: ClientChannel) -> None:
    con = paused_publisher(broker, pub)
    con.call(commands.Basic.Cancel(consumer_tag="worker"))
    assert pub.conn.paused_by == set()


def test_a_no_ack_consumer_whose_socket_stays_full_does_not_pause_publishers(
    broker: Broker, pub: ClientChannel
) -> None:
    con = consumer(broker, no_ack=True)
    con.conn.writable = False  # it reads slower than we write
    for _ in range(4):
        publish(pub, HIGH)
        turns(broker)
    assert depth(broker) == 4 * HIGH
    assert pub.conn.paused_by == set()


def test_a_no_ack_consumer_whose_socket_drains_within_a_turn_pauses_a_publisher_that_outruns_it(
    broker: Broker, pub: ClientChannel
) -> None:
    con = consumer(broker, no_ack=True)
    con.conn.writable = False
    publish(pub, 2)
    turns(broker)
    con.conn.writable = True  # drained in the next turn: the consumer waits on the broker
    con.ch.resume_deliveries()
    assert depth(broker) == 0
    con.conn.writable = False
    publish(pub, HIGH + 1)
    assert pub.conn.paused_by == {"q"}


def test_a_stream_never_pauses_its_publishers(broker: Broker) -> None:
    """A stream's length is history, not a backlog; consumers read at their own offsets."""
    pub = ClientChannel(broker)
    pub.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
    con = ClientChannel(broker)
    con.call(commands.Basic.Qos(prefetch_count=1))
    con.consume("s", "reader", arguments={"x-stream-offset": "first"})
    for _ in range(4):
        publish(pub, HIGH, queue="s")
        turns(broker)
        ack_all(con)
    assert broker.vhosts["/"].queues["s"].message_count == 4 * HIGH
    assert pub.conn.paused_by == set()


def test_publishes_read_in_one_group_pause_their_publisher_too(broker: Broker) -> None:
    """Over a session: a read of many publishes, each with its own properties, goes to the queue as one group
    (Queue.take_group); the consumer acks in the next turn."""
    pub, con = Conn(broker), Conn(broker)
    pub.send(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    con.send(frame.marshal(commands.Basic.Qos(prefetch_count=2), 1))
    con.send(frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="w"), 1))
    turns(broker, 2 * PACE_TURNS)

    def group(n: int) -> bytes:
        return b"".join(publish_frames(1, "", "q", b"x", message_id=str(i)) for i in range(n))

    pub.send(group(HIGH))
    turns(broker)
    con.send(frame.marshal(commands.Basic.Ack(2, multiple=True), 1))
    assert pub.session.transport.holds == set()
    pub.send(group(HIGH))
    assert depth(broker) > HIGH
    assert pub.session.transport.holds == {broker.vhosts["/"].queues["q"]}


def test_a_turn_in_which_many_connections_were_read_counts_once() -> None:
    clock = TurnClock()
    scheduled: list[Callable[[], None]] = []
    for _ in range(3):  # three connections read in one turn of the loop
        clock.start(scheduled.append)
    assert len(scheduled) == 1
    scheduled.pop()()  # the loop comes round
    clock.start(scheduled.append)
    assert (clock.now, len(scheduled)) == (1, 1)


def test_a_consumer_overdue_now_does_not_pause_publishers_for_having_been_quick(
    broker: Broker, pub: ClientChannel
) -> None:
    con = consumer(broker, prefetch=2)
    publish(pub, HIGH)
    turns(broker)
    assert ack_all(con) == 2  # quick once ...
    turns(broker, PACE_TURNS + 1)  # ... and not back since, while the publisher is read
    publish(pub, HIGH)
    assert depth(broker) > HIGH
    assert pub.conn.paused_by == set()


def test_publishers_pause_while_the_broker_is_saturated_and_go_on_when_it_is_not(
    broker: Broker, pub: ClientChannel
) -> None:
    """The second reason to pause (server/load.py): the broker's CPU is saturated, whatever the consumers' pace."""
    consumer(broker, prefetch=1)  # never acks: slow on its own
    broker.set_busy(True)
    publish(pub, HIGH + 2)
    assert pub.conn.paused_by == {"q"}  # reading more publishes would starve the deliveries
    broker.set_busy(False)
    assert pub.conn.paused_by == set()


def test_a_publisher_paused_for_its_consumers_pace_stays_paused_when_the_broker_has_time_to_spare(
    broker: Broker, pub: ClientChannel
) -> None:
    paused_publisher(broker, pub)
    broker.set_busy(False)
    assert pub.conn.paused_by == {"q"}
