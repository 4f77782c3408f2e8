"""The broker's side of disk faults, in process, with a real store whose I/O seam fails: publishers get nacks
(never acks) for what could not be stored, consumers still get those messages, and backpressure from the
store pauses reading from publishers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import FakeTransport, decode_frames, publish_frames
from pamqp import commands

from amqpd.broker.broker import Broker
from amqpd.config import Settings
from amqpd.session.connection import Session
from store import MessageStore
from tests.store.faulty_io import FailingIO
from tests.unit.test_session import PROTOCOL_HEADER

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class HoldingTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.holds: set[object] = set()

    def hold_reading(self, reason: object) -> None:
        self.holds.add(reason)

    def release_reading(self, reason: object) -> None:
        self.holds.discard(reason)


class Client:
    def __init__(self, broker: Broker) -> None:
        self.transport = HoldingTransport()
        self.session = Session(broker, self.transport, "test-peer")
        self.send(PROTOCOL_HEADER)
        self.method(0, commands.Connection.StartOk({"product": "t"}, "PLAIN", "\0guest\0guest", "en_US"))
        self.method(0, commands.Connection.TuneOk(2047, 131072, 0))
        self.method(0, commands.Connection.Open("/"))
        self.method(1, commands.Channel.Open())

    def send(self, data: bytes) -> list[Any]:
        self.session.feed(data)
        return self.output()

    def output(self) -> list[Any]:
        return [obj for _, obj in decode_frames(self.session.take_output())]

    def method(self, channel: int, method: Any) -> list[Any]:
        from pamqp import frame

        return self.send(frame.marshal(method, channel))


async def open_broker(tmp_path: Path, io: FailingIO, **store_options: Any) -> tuple[MessageStore, Broker]:
    store = MessageStore(tmp_path, io=io, **store_options)
    await store.open()
    return store, Broker(Settings(data_dir=str(tmp_path)), store=store)


async def test_a_publish_the_store_could_not_write_is_nacked_and_still_delivered(tmp_path: Path) -> None:
    store, broker = await open_broker(tmp_path, FailingIO(fail_write=2))  # header ok, first batch fails
    pub = Client(broker)
    pub.method(1, commands.Queue.Declare(queue="q", durable=True))
    pub.method(1, commands.Confirm.Select())
    pub.send(publish_frames(1, "", "q", b"lost", delivery_mode=2))
    await store.flush()
    pub.session.channels[1].emit_confirms()
    confirms = [f for f in pub.output() if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack))]
    assert [(type(f).__name__, f.delivery_tag) for f in confirms] == [("Nack", 1)]
    pub.send(publish_frames(1, "", "q", b"kept", delivery_mode=2))
    await store.flush()
    pub.session.channels[1].emit_confirms()
    confirms = [f for f in pub.output() if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack))]
    assert [(type(f).__name__, f.delivery_tag) for f in confirms] == [("Ack", 2)]
    # Both are in the queue (the nacked one from memory): a consumer gets them in order.
    sub = Client(broker)
    bodies = []
    for _ in range(2):
        frames = sub.method(1, commands.Basic.Get(queue="q", no_ack=True))
        bodies.append(frames[-1].value)
    assert bodies == [b"lost", b"kept"]
    await store.close()


async def test_store_pressure_pauses_reading_from_publishers_until_it_is_written(tmp_path: Path) -> None:
    store, broker = await open_broker(tmp_path, FailingIO(), max_unwritten_bytes=4096)
    pub = Client(broker)
    idle = Client(broker)
    pub.method(1, commands.Queue.Declare(queue="q", durable=True))
    for _ in range(10):
        pub.send(publish_frames(1, "", "q", b"x" * 1000, delivery_mode=2))
    assert "store" in pub.transport.holds
    assert "store" not in idle.transport.holds  # it never published
    late = Client(broker)
    late.send(publish_frames(1, "", "q", b"x", delivery_mode=2))
    assert "store" in late.transport.holds
    await store.flush()
    assert "store" not in pub.transport.holds and "store" not in late.transport.holds
    await store.close()


async def test_a_transaction_the_store_could_not_write_closes_the_channel_instead_of_commit_ok(
    tmp_path: Path,
) -> None:
    # RabbitMQ's complete_tx for a failed transaction: channel.close 406 "partial tx completion" on tx.commit
    store, broker = await open_broker(tmp_path, FailingIO(fail_write=2))  # header ok, first batch fails
    pub = Client(broker)
    pub.method(1, commands.Queue.Declare(queue="q", durable=True))
    pub.method(1, commands.Tx.Select())
    pub.send(publish_frames(1, "", "q", b"lost", delivery_mode=2))
    assert pub.method(1, commands.Tx.Commit()) == []  # nothing until the store has answered
    await store.flush()
    out = pub.output()
    assert not any(isinstance(f, commands.Tx.CommitOk) for f in out)
    closes = [f for f in out if isinstance(f, commands.Channel.Close)]
    assert [(c.reply_code, c.reply_text, c.class_id, c.method_id) for c in closes] == [
        (406, "PRECONDITION_FAILED - partial tx completion", 90, 20)
    ]
    # the connection and its other channels go on: a new channel's transaction commits once the store writes
    pub.method(1, commands.Channel.CloseOk())
    pub.method(2, commands.Channel.Open())
    pub.method(2, commands.Tx.Select())
    pub.send(publish_frames(2, "", "q", b"kept", delivery_mode=2))
    pub.method(2, commands.Tx.Commit())
    await store.flush()
    assert any(isinstance(f, commands.Tx.CommitOk) for f in pub.output())
    await store.close()
