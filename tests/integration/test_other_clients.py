"""Other real clients: pika's SelectConnection and asyncio adapter, aio-pika, py-amqp via kombu."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import aio_pika
import kombu
import pika
import pytest
from pika.adapters.asyncio_connection import AsyncioConnection

WAIT = 15.0


def _kombu_url(amqpd_url: str) -> str:
    return amqpd_url.replace("amqp://", "pyamqp://", 1)


# --- pika SelectConnection / AsyncioConnection -------------------------------------------------------------


def test_select_connection_sees_return_before_confirm_and_every_publish_confirmed(params: pika.URLParameters) -> None:
    events: list[tuple] = []
    state: dict = {}

    def fail(reason: str) -> None:
        state["error"] = reason
        conn.ioloop.stop()

    def on_open(c: pika.SelectConnection) -> None:
        c.channel(on_open_callback=on_channel)

    def on_channel(ch: pika.channel.Channel) -> None:
        state["ch"] = ch
        ch.add_on_return_callback(lambda _c, m, _p, body: events.append(("return", m.reply_code, body)))
        ch.confirm_delivery(on_confirm, callback=lambda _f: ch.queue_declare("", exclusive=True, callback=on_queue))

    def on_queue(frame: pika.frame.Method) -> None:
        ch = state["ch"]
        q = frame.method.queue
        ch.basic_publish("", q, b"1", mandatory=True)
        ch.basic_publish("amq.direct", f"unbound-{uuid.uuid4().hex}", b"2", mandatory=True)
        ch.basic_publish("", q, b"3", mandatory=True)

    def on_confirm(frame: pika.frame.Method) -> None:
        m = frame.method
        events.append((type(m).__name__, m.delivery_tag, m.multiple))
        confirmed = {
            t for kind, tag, multiple in events if kind == "Ack" for t in (range(1, tag + 1) if multiple else [tag])
        }
        if confirmed >= {1, 2, 3}:
            conn.ioloop.stop()

    conn = pika.SelectConnection(
        params,
        on_open_callback=on_open,
        on_open_error_callback=lambda _c, e: fail(f"open failed: {e!r}"),
        on_close_callback=lambda _c, reason: fail(f"closed: {reason!r}"),
    )
    timer = conn.ioloop.call_later(WAIT, lambda: fail("timed out"))
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    error = state.get("error")
    if conn.is_open:
        conn.close()
        conn.ioloop.start()  # runs until the close completes
    assert error is None, error
    assert [e for e in events if e[0] == "Nack"] == []
    kinds = [e[0] for e in events]
    assert kinds.count("return") == 1 and events[kinds.index("return")] == ("return", 312, b"2")

    def first_ack_covering(tag: int) -> int:
        return next(
            i for i, (kind, t, multiple) in enumerate(events) if kind == "Ack" and (t == tag or (multiple and t >= tag))
        )

    assert kinds.index("return") < first_ack_covering(2)


def test_asyncio_adapter_publish_and_consume(params: pika.URLParameters) -> None:
    async def scenario() -> list[bytes]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[bytes]] = loop.create_future()
        got: list[bytes] = []

        def on_message(ch: pika.channel.Channel, method, _props, body: bytes) -> None:
            got.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(got) == 3 and not done.done():
                done.set_result(got)

        def on_queue(ch: pika.channel.Channel, frame: pika.frame.Method) -> None:
            q = frame.method.queue
            ch.basic_consume(q, lambda c, m, p, b: on_message(c, m, p, b))
            for body in (b"a", b"b", b"c"):
                ch.basic_publish("", q, body)

        def on_channel(ch: pika.channel.Channel) -> None:
            ch.queue_declare("", exclusive=True, callback=lambda f: on_queue(ch, f))

        def on_error(_c: object, exc: BaseException) -> None:
            if not done.done():
                done.set_exception(AssertionError(f"connection failed: {exc!r}"))

        conn = AsyncioConnection(
            params,
            on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
            on_open_error_callback=on_error,
            on_close_callback=on_error,
            custom_ioloop=loop,
        )
        try:
            return await asyncio.wait_for(done, WAIT)
        finally:
            if conn.is_open:
                conn.close()

    assert asyncio.run(scenario()) == [b"a", b"b", b"c"]


# --- aio-pika ---------------------------------------------------------------------------------------------


def test_aio_pika_publish_and_consume_round_trip(amqpd_url: str) -> None:
    async def scenario() -> list[tuple[bytes, str | None, dict]]:
        async with await aio_pika.connect(amqpd_url) as conn:
            ch = await conn.channel()  # publisher confirms on by default
            queue = await ch.declare_queue("", exclusive=True)
            for i in range(5):
                await ch.default_exchange.publish(
                    aio_pika.Message(f"m{i}".encode(), content_type="text/plain", headers={"i": i}),
                    routing_key=queue.name,
                )
            got = []
            async with queue.iterator() as it:
                async for message in it:
                    async with message.process():
                        got.append((message.body, message.content_type, dict(message.headers)))
                    if len(got) == 5:
                        break
            return got

    got = asyncio.run(asyncio.wait_for(scenario(), WAIT))
    assert got == [(f"m{i}".encode(), "text/plain", {"i": i}) for i in range(5)]


def test_aio_pika_topic_exchange_get_and_reject(amqpd_url: str) -> None:
    async def scenario() -> tuple[bytes, bool]:
        async with await aio_pika.connect(amqpd_url) as conn:
            ch = await conn.channel()
            ex = await ch.declare_exchange(f"it.aio.{uuid.uuid4().hex}", aio_pika.ExchangeType.TOPIC, auto_delete=True)
            queue = await ch.declare_queue("", exclusive=True)
            await queue.bind(ex, "orders.*")
            await ex.publish(aio_pika.Message(b"order"), routing_key="orders.new")
            first = await queue.get(timeout=5)
            await first.reject(requeue=True)
            again = await queue.get(timeout=5)
            await again.ack()
            await ex.delete()
            return again.body, again.redelivered

    assert asyncio.run(asyncio.wait_for(scenario(), WAIT)) == (b"order", True)


def test_aio_pika_unroutable_mandatory_publish_raises_delivery_error(amqpd_url: str) -> None:
    async def scenario() -> int:
        async with await aio_pika.connect(amqpd_url) as conn:
            ch = await conn.channel(on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await ch.default_exchange.publish(
                    aio_pika.Message(b"x"), routing_key=f"no-such-queue-{uuid.uuid4().hex}", mandatory=True
                )
            return info.value.message.delivery.reply_code

    assert asyncio.run(asyncio.wait_for(scenario(), WAIT)) == 312


# --- kombu (py-amqp transport) -----------------------------------------------------------------------------


def test_kombu_producer_consumer_round_trip(amqpd_url: str, name: Callable[[str], str]) -> None:
    exchange = kombu.Exchange(name("kx"), type="direct", auto_delete=True, durable=False)
    queue = kombu.Queue(name("kq"), exchange, routing_key="k", auto_delete=True, durable=False)
    received: list[tuple[object, str]] = []
    with kombu.Connection(_kombu_url(amqpd_url), connect_timeout=10) as conn:
        with conn.Consumer(queue, callbacks=[lambda body, msg: (received.append((body, msg.content_type)), msg.ack())]):
            producer = conn.Producer(serializer="json")
            for i in range(3):
                producer.publish({"n": i}, exchange=exchange, routing_key="k", declare=[queue], retry=False)
            while len(received) < 3:
                conn.drain_events(timeout=WAIT)
    assert received == [({"n": i}, "application/json") for i in range(3)]


def test_kombu_simple_queue_round_trip(amqpd_url: str, name: Callable[[str], str]) -> None:
    qname = name("simple")
    with kombu.Connection(_kombu_url(amqpd_url), connect_timeout=10) as conn:
        q = conn.SimpleQueue(qname, queue_opts={"durable": False}, exchange_opts={"durable": False})
        try:
            q.put({"hello": "world"})
            q.put("text")
            m1 = q.get(block=True, timeout=WAIT)
            m2 = q.get(block=True, timeout=WAIT)
            assert (m1.payload, m2.payload) == ({"hello": "world"}, "text")
            m1.ack()
            m2.ack()
            with pytest.raises(q.Empty):
                q.get(block=False)
        finally:
            q.close()  # cancels the consumer first: deleting its queue under it would cancel it server-side
            conn.default_channel.queue_delete(qname)
            conn.default_channel.exchange_delete(qname)
