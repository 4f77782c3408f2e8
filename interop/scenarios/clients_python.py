"""The same ordinary tasks driven through each Python client's own API: pika's SelectConnection and
asyncio adapter, aio-pika and kombu."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pika
from pika.adapters.asyncio_connection import AsyncioConnection

from interop import pika_tools as pt
from interop.registry import scenario
from interop.scope import Scope, pika_session

# --- pika SelectConnection / asyncio adapter -------------------------------------------------------


def _async_roundtrip(url: str, adapter: str) -> Any:
    """Declare, confirm-publish 3 messages, consume and ack them, close — all by callbacks."""
    with Scope(url) as s:
        q = s.queue("q")
        log: list[Any] = []
        done = threading.Event()
        state: dict[str, Any] = {"confirmed": set(), "got": []}
        params = pt.params(url)

        def on_open(conn: Any) -> None:
            conn.channel(on_open_callback=on_channel)

        def on_confirm(m: Any) -> None:
            # acks may be coalesced (multiple=true): the observation is the set of confirmed seqs
            low = max(state["confirmed"], default=0) + 1 if m.multiple else m.delivery_tag
            state["confirmed"].update(range(low, m.delivery_tag + 1))

        def on_channel(ch: Any) -> None:
            state["ch"] = ch
            ch.confirm_delivery(lambda f: on_confirm(f.method))
            ch.queue_declare(q, callback=lambda f: on_declared(ch, f))

        def on_declared(ch: Any, f: Any) -> None:
            log.append(pt.summarize(f))
            for i in range(3):
                ch.basic_publish("", q, b"s%d" % i, pika.BasicProperties(message_id=str(i)))
            ch.basic_qos(prefetch_count=2, callback=lambda _f: ch.basic_consume(q, on_msg))

        def on_msg(ch: Any, m: Any, p: Any, b: bytes) -> None:
            state["got"].append(pt.msg_obs(m, p, b, with_props=True))
            ch.basic_ack(m.delivery_tag)
            if len(state["got"]) == 3:
                ch.connection.close()

        def on_closed(conn: Any, reason: Any) -> None:
            log.append(type(reason).__name__)
            done.set()
            conn.ioloop.stop()

        if adapter == "select":
            conn = pika.SelectConnection(params, on_open_callback=on_open, on_close_callback=on_closed)
            timer = threading.Timer(8, lambda: conn.ioloop.add_callback_threadsafe(conn.ioloop.stop))
            timer.start()
            conn.ioloop.start()
            timer.cancel()
        else:
            loop = asyncio.new_event_loop()
            try:
                conn = AsyncioConnection(
                    params, on_open_callback=on_open, on_close_callback=on_closed, custom_ioloop=loop
                )
                loop.call_later(8, loop.stop)
                loop.run_forever()
            finally:
                loop.close()
        return {"log": log, "got": state["got"], "confirmed": sorted(state["confirmed"]), "done": done.is_set()}


@scenario("client-pika")
def select_connection_roundtrip(url: str) -> Any:
    return _async_roundtrip(url, "select")


@scenario("client-pika")
def asyncio_adapter_roundtrip(url: str) -> Any:
    return _async_roundtrip(url, "asyncio")


@scenario("client-pika")
def blocking_consume_generator(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        for i in range(3):
            ch.basic_publish("", q, b"g%d" % i)
        got = []
        for m, p, b in ch.consume(q, inactivity_timeout=1):
            if m is None:
                break
            got.append(pt.msg_obs(m, p, b))
            ch.basic_ack(m.delivery_tag)
            if len(got) == 3:
                break
        ch.cancel()
        return got


# --- aio-pika -------------------------------------------------------------------------------------


def _aio(coro_fn: Any, url: str) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro_fn(url), 15)

    return asyncio.run(bounded())


def _aio_err(e: BaseException) -> dict[str, Any]:
    text = str(e.args[0]) if e.args else ""
    return {"error": type(e).__name__, "text": pt.reply_prefix(text) if isinstance(text, str) else text}


@scenario("client-aio-pika")
def aio_pika_publish_consume(url: str) -> Any:
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel()
                x = await ch.declare_exchange(s.exchange("t"), aio_pika.ExchangeType.TOPIC)
                q = await ch.declare_queue(s.queue("q"))
                await q.bind(x, "orders.*")
                for i, rk in enumerate(["orders.new", "orders.old", "users.new"]):
                    msg = aio_pika.Message(
                        b"m%d" % i,
                        content_type="text/plain",
                        headers={"i": i},
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    )
                    confirm = await x.publish(msg, rk)
                    _ = confirm
                got = []
                async with q.iterator(no_ack=False) as it:
                    async for m in it:
                        got.append(
                            {
                                "body": m.body.decode(),
                                "rk": m.routing_key,
                                "headers": m.headers,
                                "ct": m.content_type,
                                "mode": int(m.delivery_mode),
                                "redelivered": m.redelivered,
                            }
                        )
                        await m.ack()
                        if len(got) == 2:
                            break
                return got

    return _aio(run, url)


@scenario("client-aio-pika")
def aio_pika_passive_missing(url: str) -> Any:
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel()
                try:
                    await ch.declare_queue(s.name("missing"), passive=True)
                except Exception as e:  # aiormq's ChannelNotFoundEntity: class name + text are what we see
                    return _aio_err(e)
                return {"declared": True}

    return _aio(run, url)


@scenario("client-aio-pika")
def aio_pika_mandatory_return(url: str) -> Any:
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
                try:
                    await ch.default_exchange.publish(aio_pika.Message(b"x"), s.name("nowhere"), mandatory=True)
                except Exception as e:  # aio_pika.exceptions.DeliveryError carries the returned message
                    return {
                        "error": type(e).__name__,
                        "returned_body": getattr(getattr(e, "message", None), "body", b"").decode(),
                    }
                return {"returned": False}

    return _aio(run, url)


@scenario("client-aio-pika")
def aio_pika_rpc_with_exclusive_reply_queue(url: str) -> Any:
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel()
                await ch.set_qos(prefetch_count=1)
                server_q = await ch.declare_queue(s.queue("rpc"))
                reply_q = await ch.declare_queue(exclusive=True)
                s.track_queue(reply_q.name)

                async def serve(m: aio_pika.abc.AbstractIncomingMessage) -> None:
                    async with m.process():
                        await ch.default_exchange.publish(
                            aio_pika.Message(m.body.upper(), correlation_id=m.correlation_id), m.reply_to or ""
                        )

                await server_q.consume(serve)
                fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

                async def on_reply(m: aio_pika.abc.AbstractIncomingMessage) -> None:
                    await m.ack()
                    if not fut.done():
                        fut.set_result(
                            {"body": m.body.decode(), "correlation_id": m.correlation_id, "routing_key": m.routing_key}
                        )

                await reply_q.consume(on_reply)
                await ch.default_exchange.publish(
                    aio_pika.Message(b"hello", correlation_id="c1", reply_to=reply_q.name), server_q.name
                )
                return {"reply": await fut, "reply_queue": reply_q.name}

    return _aio(run, url)


@scenario("client-aio-pika")
def aio_pika_direct_reply_to(url: str) -> Any:
    """RabbitMQ's direct reply-to (capability direct_reply_to): consume amq.rabbitmq.reply-to no-ack."""
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel()
                server_q = await ch.declare_queue(s.queue("rpc"))
                seen: dict[str, Any] = {}

                async def serve(m: aio_pika.abc.AbstractIncomingMessage) -> None:
                    seen["reply_to_prefix"] = (m.reply_to or "")[:22]
                    await m.ack()
                    await ch.default_exchange.publish(aio_pika.Message(b"pong"), m.reply_to or "")

                await server_q.consume(serve)
                fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                reply = await ch.get_queue("amq.rabbitmq.reply-to", ensure=False)

                async def on_reply(m: aio_pika.abc.AbstractIncomingMessage) -> None:
                    if not fut.done():
                        fut.set_result(m.body.decode())

                await reply.consume(on_reply, no_ack=True)
                await ch.default_exchange.publish(
                    aio_pika.Message(b"ping", reply_to="amq.rabbitmq.reply-to"), server_q.name
                )
                return {"reply": await asyncio.wait_for(fut, 5), **seen}

    return _aio(run, url)


@scenario("client-aio-pika")
def aio_pika_transaction(url: str) -> Any:
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel(publisher_confirms=False)
                q = await ch.declare_queue(s.queue("q"))
                tx = ch.transaction()
                await tx.select()
                await ch.default_exchange.publish(aio_pika.Message(b"rolled-back"), q.name)
                await tx.rollback()
                await ch.default_exchange.publish(aio_pika.Message(b"committed"), q.name)
                await tx.commit()
                got = []
                while (m := await q.get(no_ack=True, fail=False)) is not None:
                    got.append(m.body.decode())
                return got

    return _aio(run, url)


@scenario("client-aio-pika")
def aio_pika_queue_get_and_counts(url: str) -> Any:
    import aio_pika

    async def run(url: str) -> Any:
        with Scope(url) as s:
            conn = await aio_pika.connect(url, timeout=5)
            async with conn:
                ch = await conn.channel()
                q = await ch.declare_queue(s.queue("q"), durable=True)
                for i in range(3):
                    await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), q.name)
                again = await ch.declare_queue(q.name, passive=True)
                m = await q.get(no_ack=False)
                await m.reject(requeue=True)
                m2 = await q.get(no_ack=True)
                empty_err = None
                await q.purge()
                try:
                    await q.get(no_ack=True)
                except aio_pika.exceptions.QueueEmpty as e:
                    empty_err = type(e).__name__
                return {
                    "count": again.declaration_result.message_count,
                    "first": m.body.decode(),
                    "second": m2.body.decode(),
                    "second_redelivered": m2.redelivered,
                    "empty": empty_err,
                }

    return _aio(run, url)


# --- kombu ----------------------------------------------------------------------------------------


def _kombu_url(url: str) -> str:
    return url.replace("amqp://", "pyamqp://", 1)


@scenario("client-kombu")
def kombu_producer_consumer(url: str) -> Any:
    from kombu import Connection, Consumer, Exchange, Producer, Queue

    with Scope(url) as s:
        x = Exchange(s.exchange("k"), type="direct", durable=False)
        q = Queue(s.queue("q"), x, routing_key="task", durable=False)
        got: list[Any] = []
        with Connection(_kombu_url(url), connect_timeout=5) as conn:
            ch = conn.channel()
            Producer(ch).publish(
                {"n": 1, "s": "ü"}, exchange=x, routing_key="task", declare=[q], serializer="json", headers={"h": "v"}
            )
            Producer(ch).publish("plain", exchange=x, routing_key="task", serializer="json")

            def on(body: Any, message: Any) -> None:
                got.append(
                    {
                        "body": body,
                        "ct": message.content_type,
                        "headers": message.headers,
                        "rk": message.delivery_info["routing_key"],
                    }
                )
                message.ack()

            with Consumer(ch, [q], callbacks=[on]):
                for _ in range(20):
                    if len(got) == 2:
                        break
                    try:
                        conn.drain_events(timeout=0.2)
                    except TimeoutError:
                        pass
        return got


@scenario("client-kombu")
def kombu_simple_queue(url: str) -> Any:
    with Scope(url) as s:
        from kombu import Connection

        name = s.queue("simple")
        s.track_exchange(name)  # SimpleQueue declares an exchange of the same name
        with Connection(_kombu_url(url), connect_timeout=5) as conn:
            sq = conn.SimpleQueue(name)
            for i in range(3):
                sq.put({"i": i})
            out = []
            for _ in range(3):
                m = sq.get(timeout=2)
                out.append(m.payload)
                m.ack()
            try:
                sq.get(block=False)
                empty = False
            except sq.Empty:
                empty = True
            sq.close()
            return {"got": out, "then_empty": empty}


@scenario("client-kombu")
def kombu_confirm_publish(url: str) -> Any:
    from kombu import Connection, Exchange, Producer, Queue

    with Scope(url) as s:
        q = Queue(s.queue("q"), Exchange(s.exchange("x"), "fanout"))
        with Connection(_kombu_url(url), transport_options={"confirm_publish": True}, connect_timeout=5) as c:
            p = Producer(c.channel())
            for i in range(5):
                p.publish({"i": i}, exchange=q.exchange, declare=[q])
            return {"count": q.bind(c.channel()).queue_declare(passive=True).message_count}


@scenario("client-kombu")
def kombu_passive_missing(url: str) -> Any:
    from kombu import Connection, Queue

    with Scope(url) as s, Connection(_kombu_url(url), connect_timeout=5) as c:
        try:
            Queue(s.name("missing"), channel=c.channel()).queue_declare(passive=True)
        except Exception as e:  # amqp.exceptions.NotFound: its class and code are the observation
            return {
                "error": type(e).__name__,
                "code": getattr(e, "code", None),
                "method": str(getattr(e, "method_name", None)),
            }
        return {"declared": True}


@scenario("client-kombu")
def kombu_topic_routing_and_ack_reject(url: str) -> Any:
    from kombu import Connection, Exchange, Queue

    with Scope(url) as s, Connection(_kombu_url(url), connect_timeout=5) as c:
        x = Exchange(s.exchange("topic"), type="topic")
        q = Queue(s.queue("q"), x, routing_key="*.error")
        ch = c.channel()
        q.bind(ch).declare()
        prod = c.Producer(ch)
        for rk in ("app.error", "app.info", "db.error"):
            prod.publish(rk, exchange=x, routing_key=rk)
        bq = q.bind(ch)
        m1 = bq.get()
        m1.reject(requeue=True)
        out = []
        while (m := bq.get()) is not None:
            out.append((m.payload, m.delivery_info["redelivered"]))
            m.ack()
        return out
