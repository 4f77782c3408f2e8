"""A day of churn changes nothing: connections, channels, queues, exchanges, consumers and stream readers that
come and go leave no trace in the broker. After many identical cycles, what the management API counts and
the broker's own objects (every instance of an amqpd or store class, in an embedded broker) are back to what
they were after the first cycle: anything kept per closed connection, channel, consumer or deleted queue
(a dict keyed by name or id, a sample, a timer) shows up as a difference here, long before it shows in RSS."""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Iterator

import aiormq
import httpx
import pytest
from pamqp.commands import Basic

from amqpd.testing.embedded import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

CYCLES = 40
SETTLE_S = 30.0  # bounded wait for closes, auto-deletes and the management sampler to catch up
OWN_MODULES = ("amqpd.", "store.")
STATS_INTERVAL_S = 0.1  # the management sampler keeps a sample per live object: taken often, so that it settles
STEADY_S = 1.0


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"stats_interval": STATS_INTERVAL_S}) as b:
        yield b


def broker_objects() -> Counter[str]:
    """Live instances of the broker's own classes, by class (the test process holds none of them)."""
    gc.collect()
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        cls = type(obj)
        module = cls.__module__ if isinstance(cls.__module__, str) else ""
        if module.startswith(OWN_MODULES):
            counts[f"{module}.{cls.__qualname__}"] += 1
    return counts


def object_totals(b: EmbeddedBroker) -> dict[str, int]:
    r = httpx.get(f"{b.management_url}/api/overview", auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return dict(r.json()["object_totals"])


async def declare_fixtures(url: str) -> None:
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.queue_declare("churn.dlq")
    dlx = {"x-message-ttl": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "churn.dlq"}
    await ch.queue_declare("churn.ttl", arguments=dlx)
    await ch.queue_declare("churn.stream", durable=True, arguments={"x-queue-type": "stream"})
    await ch.queue_declare("churn.delayed")
    delayed = {"x-delayed-type": "direct"}
    await ch.exchange_declare("churn.delay", exchange_type="x-delayed-message", arguments=delayed)
    await ch.queue_bind("churn.delayed", "churn.delay", routing_key="d")
    await conn.close()


async def one_cycle(url: str, n: int) -> None:
    """What the soak does to a broker, once: every object it makes is gone when it returns (the messages it
    publishes to the fixed queues excepted, which go with them)."""
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    got = asyncio.Event()

    async def ack(m: aiormq.abc.DeliveredMessage) -> None:
        await ch.basic_ack(m.delivery_tag)
        got.set()

    name = f"churn.tmp{n}"
    await ch.queue_declare(name)
    await ch.queue_bind(name, "amq.direct", routing_key=name)
    await ch.basic_publish(b"x", exchange="amq.direct", routing_key=name)
    ok = await ch.basic_consume(name, ack)
    await asyncio.wait_for(got.wait(), 10)
    await ch.basic_cancel(ok.consumer_tag)
    await ch.queue_delete(name)

    private = await ch.queue_declare("", exclusive=True)  # goes with the connection
    await ch.exchange_declare(f"churn.x{n}", exchange_type="topic", auto_delete=True)
    await ch.queue_bind(private.queue, f"churn.x{n}", routing_key="a.#")
    await ch.basic_publish(b"g", exchange=f"churn.x{n}", routing_key="a.b")
    await ch.basic_get(private.queue, no_ack=True)
    await ch.queue_unbind(private.queue, f"churn.x{n}", routing_key="a.#")  # the exchange auto-deletes

    auto = await ch.queue_declare(f"churn.auto{n}", auto_delete=True)
    consumer = await ch.basic_consume(auto.queue, ack)
    await ch.basic_cancel(consumer.consumer_tag)  # the queue auto-deletes

    await ch.basic_qos(prefetch_count=10)
    reader = await ch.basic_consume("churn.stream", ack, arguments={"x-stream-offset": "first"})
    await ch.basic_cancel(reader.consumer_tag)

    confirms = await conn.channel(publisher_confirms=True)
    persistent = Basic.Properties(delivery_mode=2)
    await confirms.basic_publish(b"t", routing_key="churn.ttl", properties=persistent)
    await confirms.basic_publish(b"s", routing_key="churn.stream")
    delay = Basic.Properties(headers={"x-delay": 1})
    await confirms.basic_publish(b"d", exchange="churn.delay", routing_key="d", properties=delay)
    await ch.close()
    await conn.close()


async def drop_fixtures(url: str, arrived: int) -> None:
    """Once the `arrived` dead-lettered and delayed messages are in, the fixed queues and exchange deleted:
    what is left then is what churn left behind."""
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    for queue in ("churn.dlq", "churn.delayed"):
        deadline = time.monotonic() + SETTLE_S
        while (await ch.queue_declare(queue, passive=True)).message_count < arrived:
            assert time.monotonic() < deadline, f"{queue} did not receive its {arrived} messages"
            await asyncio.sleep(0.05)
    for queue in ("churn.dlq", "churn.ttl", "churn.stream", "churn.delayed"):
        await ch.queue_delete(queue)
    await ch.exchange_delete("churn.delay")
    await conn.close()


def reading(b: EmbeddedBroker) -> tuple[Counter[str], dict[str, int]]:
    return broker_objects(), object_totals(b)


def steady(b: EmbeddedBroker) -> tuple[Counter[str], dict[str, int]]:
    """A reading that holds over several management samples (closes and auto-deletes done, samples taken)."""
    deadline = time.monotonic() + SETTLE_S
    last = reading(b)
    while True:
        time.sleep(STEADY_S)
        now = reading(b)
        if now == last or time.monotonic() > deadline:
            return now
        last = now


def settled(b: EmbeddedBroker, baseline: tuple[Counter[str], dict[str, int]]) -> tuple[Counter[str], dict[str, int]]:
    """Waits (bounded) until the reading is the baseline's again; the last one."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        now = reading(b)
        if now == baseline or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def churn(url: str, cycles: int) -> None:
    async def run() -> None:
        await declare_fixtures(url)
        for n in range(cycles):
            await one_cycle(url, n)
        await drop_fixtures(url, cycles)

    asyncio.run(run())


def test_many_cycles_of_churn_leave_the_broker_as_one_cycle_did(broker: EmbeddedBroker) -> None:
    churn(broker.url, 1)
    baseline = steady(broker)
    churn(broker.url, CYCLES)
    objects, totals = settled(broker, baseline)
    assert totals == baseline[1]
    before = baseline[0]
    differ = {k: (before[k], objects[k]) for k in before.keys() | objects.keys() if before[k] != objects[k]}
    assert differ == {}, "broker objects (before, after) that differ"


def connect_and_close(url: str, n: int, with_channel: bool) -> None:
    async def run() -> None:
        for _ in range(n):
            conn = await aiormq.connect(url)
            if with_channel:
                await conn.channel()
            await conn.close()

    asyncio.run(run())


def sessions_left_for_the_cyclic_gc(url: str, with_channel: bool) -> int:
    """Connections opened and closed with the cyclic GC off: the Sessions still in memory once the broker has
    seen them close are the ones only a full collection would free."""
    connect_and_close(url, 1, with_channel)
    before = settled_sessions()
    gc.disable()  # what the cyclic GC would free is counted, not freed
    try:
        connect_and_close(url, 20, with_channel)
        deadline = time.monotonic() + SETTLE_S
        while (left := live_sessions() - before) and time.monotonic() < deadline:
            time.sleep(0.05)  # the broker's side of a close may finish just after the client's
        return left
    finally:
        gc.enable()


# The broker collects cycles rarely (server/listener.py's GC thresholds): whatever a closed connection leaves in
# a reference cycle stays in memory until a full collection, and under connection churn RSS climbs meanwhile.
# So a closed connection must be freed by reference counting alone.


def test_a_closed_connection_is_freed_at_once_not_at_the_next_full_collection(broker: EmbeddedBroker) -> None:
    assert sessions_left_for_the_cyclic_gc(broker.url, with_channel=False) == 0


def test_a_closed_connection_with_a_channel_is_freed_at_once(broker: EmbeddedBroker) -> None:
    assert sessions_left_for_the_cyclic_gc(broker.url, with_channel=True) == 0


def settled_sessions() -> int:
    """Sessions left once the warm-up connection's close has finished on the broker's side too: counted too
    early, a Session that is still closing is in the baseline and its later release makes the difference
    negative."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        gc.collect()
        count = live_sessions()
        if count == 0 or time.monotonic() >= deadline:
            return count
        time.sleep(0.05)


def live_sessions() -> int:
    """Sessions that exist, garbage in a reference cycle included (no collection first)."""
    from amqpd.session.connection import Session

    return sum(1 for obj in gc.get_objects() if type(obj) is Session)
