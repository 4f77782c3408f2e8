"""Consuming: acks early and late, nack/reject/recover requeue positions, prefetch, basic.get, cancel."""

from __future__ import annotations

from typing import Any

from pamqp import commands as C

from interop import pika_tools as pt
from interop.rawamqp import RawConnection, until_close
from interop.registry import scenario
from interop.scope import Scope, pika_session


def _fill(ch: Any, q: str, n: int) -> None:
    ch.queue_declare(q)
    for i in range(n):
        ch.basic_publish("", q, b"m%d" % i)


def _obs(deliveries: list[tuple[Any, Any, bytes]]) -> list[dict[str, Any]]:
    return [pt.msg_obs(m, p, b) for m, p, b in deliveries]


@scenario("consume")
def consume_auto_ack_order(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 5)
        got = pt.consume_n(ch, q, 5, auto_ack=True)
        return {"got": _obs(got), "left": pt.summarize(ch.queue_declare(q, passive=True))}


@scenario("consume")
def consume_then_publish(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        got: list[Any] = []
        ch.basic_consume(q, lambda c, m, p, b: got.append(b.decode()), auto_ack=True)
        for i in range(3):
            ch.basic_publish("", q, b"late%d" % i)
        pt.settle(conn, lambda: len(got))
        return got


@scenario("consume")
def early_ack_each(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        got = pt.consume_n(ch, q, 3)
        for m, _, _ in got:
            ch.basic_ack(m.delivery_tag)
        return {"got": _obs(got), "after": pt.summarize(ch.queue_declare(q, passive=True))}


@scenario("consume")
def late_ack_multiple(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 4)
        got = pt.consume_n(ch, q, 4)
        ch.basic_ack(got[2][0].delivery_tag, multiple=True)
        ch.close()
        ch2 = conn.channel()
        return {"got": _obs(got), "left_after_close": pt.get_all(ch2, q)}


@scenario("consume")
def unacked_requeued_on_channel_close(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        pt.consume_n(ch, q, 3)
        ch.close()
        return pt.get_all(conn.channel(), q)


@scenario("consume")
def unacked_requeued_on_connection_close(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        c2 = pt.connect(url)
        m, _, _ = c2.channel().basic_get(q)
        c2.close()
        return pt.get_all(ch, q)


@scenario("consume")
def nack_requeue_keeps_position(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 4)
        m0, _, _ = ch.basic_get(q)
        m1, _, _ = ch.basic_get(q)
        ch.basic_nack(m1.delivery_tag, requeue=True)
        ch.basic_nack(m0.delivery_tag, requeue=True)
        return pt.get_all(ch, q)


@scenario("consume")
def nack_multiple_requeue(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 4)
        got = pt.consume_n(ch, q, 4)
        ch.basic_nack(got[2][0].delivery_tag, multiple=True, requeue=True)
        ch.basic_ack(got[3][0].delivery_tag)
        return pt.get_all(ch, q)


@scenario("consume")
def nack_without_requeue_drops(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 2)
        m, _, _ = ch.basic_get(q)
        ch.basic_nack(m.delivery_tag, requeue=False)
        return pt.get_all(ch, q)


@scenario("consume")
def reject_requeue_redelivers(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 2)
        m, _, _ = ch.basic_get(q)
        ch.basic_reject(m.delivery_tag, requeue=True)
        return pt.get_all(ch, q)


@scenario("consume")
def reject_without_requeue_drops(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 2)
        m, _, _ = ch.basic_get(q)
        ch.basic_reject(m.delivery_tag, requeue=False)
        return pt.get_all(ch, q)


@scenario("consume")
def redelivery_to_consumer(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 2)
        seen: list[Any] = []

        def on(c: Any, m: Any, p: Any, b: bytes) -> None:
            seen.append(pt.msg_obs(m, p, b))
            if len(seen) == 1:
                c.basic_nack(m.delivery_tag, requeue=True)
            else:
                c.basic_ack(m.delivery_tag)

        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(q, on)
        pt.settle(conn, lambda: len(seen))
        return seen


@scenario("consume")
def recover_requeue_true(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        ch.basic_get(q)
        ch.basic_get(q)
        ch.basic_recover(requeue=True)
        return pt.get_all(ch, q)


@scenario("consume")
def recover_redelivers_to_consumer(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 2)
        seen: list[Any] = []
        ch.basic_consume(q, lambda c, m, p, b: seen.append(pt.msg_obs(m, p, b)))
        pt.settle(conn, lambda: len(seen))
        ch.basic_recover(requeue=True)
        pt.settle(conn, lambda: len(seen))
        return seen


@scenario("consume")
def ack_unknown_tag_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):

        def op() -> Any:
            ch.basic_ack(99)
            return ch.queue_declare("", exclusive=True)

        r = pt.expect_close(op)
        return r


@scenario("consume")
def double_ack_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 1)
        m, _, _ = ch.basic_get(q)

        def op() -> Any:
            ch.basic_ack(m.delivery_tag)
            ch.basic_ack(m.delivery_tag)
            return ch.queue_declare(q, passive=True)

        return pt.expect_close(op)


@scenario("consume")
def ack_on_other_channel_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 1)
        m, _, _ = ch.basic_get(q)
        other = conn.channel()

        def op() -> Any:
            other.basic_ack(m.delivery_tag)
            return other.queue_declare(q, passive=True)

        return pt.expect_close(op)


@scenario("consume")
def multiple_ack_zero_acks_all(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        for _ in range(3):
            ch.basic_get(q)
        ch.basic_ack(0, multiple=True)
        ch.close()
        return pt.summarize(conn.channel().queue_declare(q, passive=True))


# --- prefetch -------------------------------------------------------------------------------------


@scenario("prefetch")
def prefetch_count_limits_unacked(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 10)
        ch.basic_qos(prefetch_count=3)
        got: list[Any] = []
        ch.basic_consume(q, lambda c, m, p, b: got.append(m))
        pt.settle(conn, lambda: len(got))
        return {"before_ack": len(got)}


@scenario("prefetch")
def prefetch_ack_releases_one(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 10)
        ch.basic_qos(prefetch_count=3)
        got: list[Any] = []
        ch.basic_consume(q, lambda c, m, p, b: got.append(m))
        pt.settle(conn, lambda: len(got))
        n1 = len(got)
        ch.basic_ack(got[0].delivery_tag)
        pt.settle(conn, lambda: len(got))
        n2 = len(got)
        ch.basic_ack(got[-1].delivery_tag, multiple=True)
        pt.settle(conn, lambda: len(got))
        return [n1, n2, len(got)]


@scenario("prefetch")
def prefetch_per_consumer(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q1, q2 = s.queue("q1"), s.queue("q2")
        _fill(ch, q1, 10)
        _fill(ch, q2, 10)
        ch.basic_qos(prefetch_count=2)  # global=False: applies to each new consumer
        a: list[Any] = []
        b: list[Any] = []
        ch.basic_consume(q1, lambda c, m, p, body: a.append(m))
        ch.basic_consume(q2, lambda c, m, p, body: b.append(m))
        pt.settle(conn, lambda: (len(a), len(b)))
        return {"consumer1": len(a), "consumer2": len(b)}


@scenario("prefetch")
def prefetch_global_shared(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q1, q2 = s.queue("q1"), s.queue("q2")
        _fill(ch, q1, 10)
        _fill(ch, q2, 10)
        ch.basic_qos(prefetch_count=3, global_qos=True)
        a: list[Any] = []
        b: list[Any] = []
        ch.basic_consume(q1, lambda c, m, p, body: a.append(m))
        pt.settle(conn, lambda: len(a))
        ch.basic_consume(q2, lambda c, m, p, body: b.append(m))
        pt.settle(conn, lambda: (len(a), len(b)))
        return {"total": len(a) + len(b), "first": len(a)}


@scenario("prefetch")
def prefetch_global_and_per_consumer(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q1, q2 = s.queue("q1"), s.queue("q2")
        _fill(ch, q1, 10)
        _fill(ch, q2, 10)
        ch.basic_qos(prefetch_count=5, global_qos=True)
        ch.basic_qos(prefetch_count=2)
        a: list[Any] = []
        b: list[Any] = []
        ch.basic_consume(q1, lambda c, m, p, body: a.append(m))
        ch.basic_consume(q2, lambda c, m, p, body: b.append(m))
        pt.settle(conn, lambda: (len(a), len(b)))
        return {"consumer1": len(a), "consumer2": len(b)}


@scenario("prefetch")
def prefetch_zero_unlimited(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 50)
        ch.basic_qos(prefetch_count=0)
        got = pt.consume_n(ch, q, 50, timeout=2)
        return len(got)


@scenario("prefetch")
def prefetch_ignored_by_basic_get(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 5)
        ch.basic_qos(prefetch_count=1)
        return len(pt.get_all(ch, q, ack=False))


@scenario("prefetch")
def prefetch_ignored_with_no_ack(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 8)
        ch.basic_qos(prefetch_count=2)
        return len(pt.consume_n(ch, q, 8, auto_ack=True))


@scenario("prefetch")
def round_robin_two_consumers(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        a: list[str] = []
        b: list[str] = []
        ch.basic_consume(q, lambda c, m, p, body: a.append(body.decode()), auto_ack=True)
        ch.basic_consume(q, lambda c, m, p, body: b.append(body.decode()), auto_ack=True)
        for i in range(6):
            ch.basic_publish("", q, b"m%d" % i)
        pt.settle(conn, lambda: (len(a), len(b)))
        return {"a": a, "b": b}


# --- basic.get ------------------------------------------------------------------------------------


@scenario("get")
def get_empty(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        m, p, b = ch.basic_get(q)
        return {"empty": m is None}


@scenario("get")
def get_message_count(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        return pt.get_all(ch, q)


@scenario("get")
def get_missing_queue_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.basic_get(s.name("missing")))


@scenario("get")
def get_without_ack_then_ack(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 2)
        m, _, _ = ch.basic_get(q, auto_ack=False)
        ch.basic_ack(m.delivery_tag)
        return {"tag": m.delivery_tag, "after": pt.summarize(ch.queue_declare(q, passive=True))}


@scenario("get")
def delivery_tags_shared_between_get_and_consume(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        _fill(ch, q, 3)
        m, _, _ = ch.basic_get(q)
        got = pt.consume_n(ch, q, 2)
        return [m.delivery_tag] + [g[0].delivery_tag for g in got]


# --- cancel ---------------------------------------------------------------------------------------


@scenario("cancel")
def cancel_returns_ok_and_stops(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()  # declare-ok's message_count is only settled for confirmed publishes
        q = s.queue("q")
        ch.queue_declare(q)
        got: list[Any] = []
        tag = ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
        ch.basic_cancel(tag)
        ch.basic_publish("", q, b"after-cancel")
        pt.pump(conn, 0.2)
        return {"got": len(got), "queue": pt.summarize(ch.queue_declare(q, passive=True))}


@scenario("cancel")
def cancel_unknown_tag_ok(url: str) -> Any:
    """pika's BlockingChannel refuses unknown tags client-side, so this one speaks raw frames."""
    with RawConnection(url) as c:
        c.handshake()
        c.open_channel(1)
        got = c.rpc(1, C.Basic.Cancel(consumer_tag="never-seen"))
        return {"reply": getattr(got, "name", got), "tag": getattr(got, "consumer_tag", None)}


@scenario("cancel")
def server_cancel_on_queue_delete(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        cancelled: list[Any] = []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.NAME))
        ch.basic_consume(q, lambda *a: None, consumer_tag="my-tag")
        other = conn.channel()
        other.queue_delete(q)
        pt.settle(conn, lambda: len(cancelled))
        return {"cancelled": cancelled, "consumer_tags": ch.consumer_tags}


@scenario("cancel")
def consumer_count_in_declare_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        for _ in range(3):
            ch.basic_consume(q, lambda *a: None)
        return pt.summarize(conn.channel().queue_declare(q, passive=True))


@scenario("cancel")
def exclusive_consumer_conflict_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_consume(q, lambda *a: None, exclusive=True)
        other = conn.channel()
        return pt.expect_close(lambda: other.basic_consume(q, lambda *a: None))


@scenario("cancel")
def exclusive_consumer_refused_when_others_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_consume(q, lambda *a: None)
        other = conn.channel()
        return pt.expect_close(lambda: other.basic_consume(q, lambda *a: None, exclusive=True))


@scenario("cancel")
def consume_missing_queue_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.basic_consume(s.name("missing"), lambda *a: None))


@scenario("cancel")
def reused_consumer_tag_530(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        with RawConnection(url) as c:
            c.handshake()
            c.open_channel(1)
            c.rpc(1, C.Basic.Consume(queue=q, consumer_tag="dup"))
            c.send(1, C.Basic.Consume(queue=q, consumer_tag="dup"))
            return until_close(c)


@scenario("cancel")
def server_generated_consumer_tag(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        with RawConnection(url) as c:
            c.handshake()
            c.open_channel(1)
            ok = c.rpc(1, C.Basic.Consume(queue=q, consumer_tag=""))
            return {"reply": ok.name, "tag": ok.consumer_tag}


@scenario("prefetch")
def consumer_priorities(url: str) -> Any:
    """Capability consumer_priorities: the higher x-priority consumer gets messages while it has room."""
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_qos(prefetch_count=2)
        low: list[str] = []
        high: list[str] = []
        ch.basic_consume(q, lambda c, m, p, b: low.append(b.decode()), arguments={"x-priority": 1})
        ch.basic_consume(q, lambda c, m, p, b: high.append(b.decode()), arguments={"x-priority": 10})
        for i in range(5):
            ch.basic_publish("", q, b"m%d" % i)
        pt.settle(conn, lambda: (len(low), len(high)))
        return {"high": high, "low": low}


@scenario("consume")
def consume_nowait_and_declare_nowait(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        q = s.queue("q")
        c.handshake()
        c.open_channel(1)
        c.send(1, C.Queue.Declare(queue=q, nowait=True))
        c.send(1, C.Basic.Consume(queue=q, consumer_tag="nw", no_ack=True, nowait=True))
        c.publish(1, "", q, b"nowait")
        seen = []
        for _ in range(3):
            r = c.recv_method(2)
            if isinstance(r, str):
                seen.append(r)
                break
            seen.append(r[1].name)
            if r[1].name == "ContentBody":
                break
        return seen


@scenario("handshake", timeout=25)
def heartbeats_keep_idle_connection_alive(url: str) -> Any:
    with pika_session(url, heartbeat=1) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        pt.pump(conn, 4.0)  # pika answers heartbeats while pumping; the server must not give up
        ch.basic_publish("", q, b"still-alive")
        return {"open": conn.is_open, "got": pt.bodies(ch, q)}
