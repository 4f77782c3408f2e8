"""Delayed messages kept in the store (a durable exchange, persistent messages), driven without sockets
against a real MessageStore: what is written, what waits in memory, what is released."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakes import ClientChannel
from pamqp import commands

from amqpd.broker.broker import Broker
from amqpd.broker.routing.exchanges import DelayedExchange
from amqpd.config import Settings
from store import MessageStore

pytestmark = pytest.mark.anyio
T0 = 1_800_000_000_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def setup(tmp_path: Path, durable: bool, t0: int = T0) -> tuple[ClientChannel, MessageStore, list[int]]:
    store = MessageStore(tmp_path, fsync="none")
    await store.open()
    broker = Broker(Settings(), store=store)
    clock = [t0]
    broker.delayed.clock = lambda: clock[0]
    c = ClientChannel(broker)
    c.call(
        commands.Exchange.Declare(
            exchange="dx", exchange_type="x-delayed-message", durable=durable, arguments={"x-delayed-type": "direct"}
        )
    )
    c.declare_queue("q", durable=True)
    c.call(commands.Queue.Bind(queue="q", exchange="dx", routing_key="k"))
    return c, store, clock


def exchange(c: ClientChannel) -> DelayedExchange:
    ex = c.broker.vhosts["/"].exchanges["dx"]
    assert isinstance(ex, DelayedExchange)
    return ex


async def test_persistent_message_on_durable_exchange_waits_as_a_store_offset(tmp_path: Path) -> None:
    c, store, clock = await setup(tmp_path, durable=True)
    c.publish("dx", "k", b"body", headers={"x-delay": 100}, delivery_mode=2)
    ex = exchange(c)
    (waiting,) = ex.schedule.clear() or [None]  # peek: one item, and it is an offset, not a message
    assert isinstance(waiting, int)
    assert store.read(waiting).body == b"body" and store.read(waiting).exchange == "dx"
    ex.schedule.push(T0 + 100, waiting)
    clock[0] += 100
    assert c.broker.delayed.release_due(ex) == 1
    await store.reads_done()  # it is read back in the store's read worker
    (entry,) = c.broker.vhosts["/"].queues["q"].ready
    assert entry.msg.store_offset is not None and entry.msg.store_offset != waiting  # written for q
    assert entry.msg.headers == {"x-delay": -100}
    await store.close()


async def test_stored_ttl_counts_from_when_the_message_is_routed(tmp_path: Path) -> None:
    for durable in (True, False):  # stored while waiting, or held in memory
        published = int(time.time() * 1000) - 120_000  # the delay's clock: published two minutes ago
        c, store, clock = await setup(tmp_path / str(durable), durable=durable, t0=published)
        c.publish("dx", "k", b"m", headers={"x-delay": 60_000}, delivery_mode=2, expiration="1000")
        clock[0] += 60_000
        routed = int(time.time() * 1000)
        c.broker.delayed.release_due(exchange(c))
        await store.reads_done()
        (entry,) = c.broker.vhosts["/"].queues["q"].ready
        record = store.read(entry.msg.store_offset)  # type: ignore[arg-type]
        assert record.expires_at_ms is not None and record.expires_at_ms - record.timestamp_ms == 1000
        assert record.timestamp_ms >= routed  # not the publish time, from before the wait
        await store.close()
