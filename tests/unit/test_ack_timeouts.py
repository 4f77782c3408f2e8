"""The once-an-interval consumer_timeout check (server/alarms.py) visits only the channels that held unacked
deliveries since the last check, and still closes an overdue one with 406 as RabbitMQ does."""

from __future__ import annotations

from fakes import Conn, decode_frames, new_broker, publish_frames
from pamqp import commands, frame

from amqpd.broker.broker import Broker
from amqpd.server.alarms import Alarms

TIMEOUT_MS = 1_000


def consumer(broker: Broker, queue: str) -> Conn:
    c = Conn(broker)
    c.send(frame.marshal(commands.Queue.Declare(queue=queue), 1))
    c.send(frame.marshal(commands.Basic.Consume(queue=queue, consumer_tag="c"), 1))
    c.session.take_output()
    return c


def publish(broker: Broker, queue: str, n: int) -> None:
    p = Conn(broker)
    p.send(b"".join(publish_frames(1, "", queue, b"m%d" % i) for i in range(n)))


def closes(c: Conn) -> list[commands.Channel.Close]:
    return [m for _, m in decode_frames(c.session.take_output()) if isinstance(m, commands.Channel.Close)]


def test_only_channels_holding_unacked_deliveries_are_watched_and_an_overdue_one_closes_with_406() -> None:
    broker = new_broker(consumer_timeout=TIMEOUT_MS)
    alarms = Alarms(broker, broker.settings)
    idle = [Conn(broker) for _ in range(5)]  # open channels with nothing unacked
    busy = consumer(broker, "q")
    broker.clock = 100.0
    publish(broker, "q", 3)
    busy_ch = busy.session.channels[1]
    assert list(broker.connections.unacked_channels) == [busy_ch]

    busy.send(frame.marshal(commands.Basic.Ack(3, multiple=True), 1))
    alarms.check_ack_timeouts(100.0)
    assert not broker.connections.unacked_channels  # nothing unacked: off the watch

    broker.clock = 200.0
    publish(broker, "q", 1)  # its first unacked delivery since: back on the watch
    alarms.check_ack_timeouts(200.0 + TIMEOUT_MS / 1000 / 2)
    assert closes(busy) == []
    alarms.check_ack_timeouts(200.0 + TIMEOUT_MS / 1000 + 0.5)
    (close,) = closes(busy)
    assert close.reply_code == 406
    assert close.reply_text.startswith("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out")
    assert not broker.connections.unacked_channels
    assert all(c.session.channels for c in idle)  # the idle ones are untouched
    assert broker.vhosts["/"].queues["q"].message_count == 1  # the overdue delivery went back


def test_a_channel_closed_with_unacked_deliveries_leaves_the_watch() -> None:
    broker = new_broker(consumer_timeout=TIMEOUT_MS)
    alarms = Alarms(broker, broker.settings)
    busy = consumer(broker, "q")
    publish(broker, "q", 2)
    busy.send(frame.marshal(commands.Channel.Close(200, "bye", 0, 0), 1))
    alarms.check_ack_timeouts(broker.clock + 3600)
    assert not broker.connections.unacked_channels
    assert [m for _, m in decode_frames(busy.session.take_output()) if isinstance(m, commands.Channel.Close)] == []
