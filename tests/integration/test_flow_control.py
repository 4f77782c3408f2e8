"""Publisher flow control over real sockets: a publisher that outruns a consumer which acks everything as it
reads is paused, the queue's depth stays within the flow thresholds plus one read of publishes, and every
message is confirmed and delivered once, in order.

The broker runs in this process, on the same event loop as both clients, so the turns of that loop (the unit
of consumer pace, amqpd/broker/queues/flow.py) are the same on every run: the consumer acks in the callback that
reads its deliveries, so it always comes back within PACE_TURNS turns; the publisher writes all its
publishes at once, so every turn reads a full socket buffer of them. Nothing here depends on timing: the
wait_for bound only turns a hang into a failure."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pamqp import commands, frame, header
from pamqp.body import ContentBody

from amqpd.broker.broker import Broker
from amqpd.broker.queues.queue import Queue
from amqpd.config import Settings
from amqpd.protocol.constants import PROTOCOL_HEADER
from amqpd.server.connection import AMQPServerProtocol
from amqpd.session.channel import Channel

HIGH, LOW = 2_000, 1_000
MESSAGES = 12_000
BODY = 1024
PREFETCH = 50
READ = 256 * 1024  # what asyncio reads from a socket in one turn
# A paused publisher is no longer read, but what one read brought in is still published.
BOUND = HIGH + READ // BODY


@pytest.fixture
def flow_thresholds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(Queue, "FLOW_HIGH", HIGH)
    monkeypatch.setattr(Queue, "FLOW_LOW", LOW)
    yield


@pytest.fixture
def depths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The queue's depth after every publish that could pause its publisher (Channel.publish_flow)."""
    seen: list[int] = []
    flow = Channel.publish_flow

    def watched(self: Channel, q: Queue) -> None:
        seen.append(len(q.ready))
        flow(self, q)

    monkeypatch.setattr(Channel, "publish_flow", watched)
    return seen


class Client(asyncio.Protocol):
    """A raw AMQP client: frames out as given, frames in to on_frame (called in data_received, so whatever
    it writes goes out in the same turn of the loop)."""

    def __init__(self, on_frame: Callable[[Client, Any], None]) -> None:
        self.on_frame = on_frame
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.opened = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(PROTOCOL_HEADER)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            try:
                used, channel, obj = frame.unmarshal(self.buf)
            except Exception:  # pamqp: not a whole frame yet
                return
            self.buf = self.buf[used:]
            self.handshake(obj) or self.on_frame(self, obj)

    def handshake(self, obj: Any) -> bool:
        if isinstance(obj, commands.Connection.Start):
            self.send(0, commands.Connection.StartOk({}, "PLAIN", "\0guest\0guest", "en_US"))
        elif isinstance(obj, commands.Connection.Tune):
            self.send(0, commands.Connection.TuneOk(obj.channel_max, obj.frame_max, 0))
            self.send(0, commands.Connection.Open("/"))
        elif isinstance(obj, commands.Connection.OpenOk):
            self.send(1, commands.Channel.Open())
        elif isinstance(obj, commands.Channel.OpenOk):
            self.opened.set_result(None)
        else:
            return False
        return True

    def send(self, channel: int, *objs: Any) -> None:
        assert self.transport is not None
        self.transport.write(b"".join(frame.marshal(o, channel) for o in objs))


def publishes(n: int) -> bytes:
    props = commands.Basic.Properties(delivery_mode=1)
    out = []
    for i in range(n):
        body = i.to_bytes(4, "big") * (BODY // 4)
        out.append(frame.marshal(commands.Basic.Publish(0, "", "q"), 1))
        out.append(frame.marshal(header.ContentHeader(0, len(body), props), 1))
        out.append(frame.marshal(ContentBody(body), 1))
    return b"".join(out)


async def run_flow(broker: Broker) -> tuple[list[int], int, int]:
    """(bodies' indexes in delivery order, messages confirmed, nacks)."""
    loop = asyncio.get_running_loop()
    registry: set[AMQPServerProtocol] = set()
    server = await loop.create_server(lambda: AMQPServerProtocol(broker, registry), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    got: list[int] = []
    confirmed = [0, 0]
    done = loop.create_future()

    def consume(c: Client, obj: Any) -> None:
        if isinstance(obj, ContentBody):
            got.append(int.from_bytes(obj.value[:4], "big"))
            c.send(1, commands.Basic.Ack(len(got)))  # acks as it reads: it waits on the broker, not on itself
            if len(got) == MESSAGES and not done.done():
                done.set_result(None)

    def confirm(c: Client, obj: Any) -> None:
        if isinstance(obj, commands.Basic.Ack):
            confirmed[0] = obj.delivery_tag if obj.multiple else confirmed[0] + 1
        elif isinstance(obj, commands.Basic.Nack):
            confirmed[1] += 1

    try:
        _, con = await loop.create_connection(lambda: Client(consume), "127.0.0.1", port)
        _, pub = await loop.create_connection(lambda: Client(confirm), "127.0.0.1", port)
        await asyncio.gather(con.opened, pub.opened)
        con.send(1, commands.Queue.Declare(queue="q"), commands.Basic.Qos(prefetch_count=PREFETCH))
        con.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
        pub.send(1, commands.Confirm.Select())
        assert pub.transport is not None
        pub.transport.write(publishes(MESSAGES))  # all at once: every turn reads a full buffer of them
        await asyncio.wait_for(done, 60)
        while confirmed[0] + confirmed[1] < MESSAGES:  # confirms go out the turn after the publish
            await asyncio.sleep(0)
        return got, confirmed[0], confirmed[1]
    finally:
        for p in list(registry):
            if p.transport is not None:
                p.transport.abort()
        server.close()


def test_a_publisher_that_outruns_an_acking_consumer_is_held_to_the_flow_thresholds_and_loses_nothing(
    flow_thresholds: None, depths: list[int]
) -> None:
    broker = Broker(Settings())
    got, acked, nacked = asyncio.run(run_flow(broker))
    assert got == list(range(MESSAGES))  # every message, once, in order
    assert (acked, nacked) == (MESSAGES, 0)  # never refused
    assert max(depths) > HIGH  # the publisher did outrun the consumer ...
    assert max(depths) <= BOUND  # ... and was paused before the queue grew past the thresholds
