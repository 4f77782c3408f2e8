"""Delivery limits: quorum queues' x-delivery-limit and x-delivery-count (RabbitMQ 3.10 is the reference),
and amqpd's extension of the argument to classic queues (RabbitMQ refuses it there)."""

from __future__ import annotations

import time
from typing import Any

import pika

from interop import pika_tools as pt
from interop.registry import scenario
from interop.scope import pika_session

QUORUM = {"x-queue-type": "quorum"}


def _without_time(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for g in got:  # x-death carries a timestamp: keep the rest
        for d in g.get("props", {}).get("headers", {}).get("x-death", []):
            d.pop("time", None)
    return got


def _wait_for(ch: Any, queue: str, count: int, limit: float = 5.0) -> None:
    """Dead-lettering out of a quorum queue is asynchronous on RabbitMQ: wait for it (bounded)."""
    deadline = time.monotonic() + limit
    while ch.queue_declare(queue, passive=True).method.message_count < count and time.monotonic() < deadline:
        pt.pump(ch.connection, 0.05)


def _limited(s: Any, ch: Any, limit: Any, dlq: str | None) -> str:
    q = s.queue("q")
    args: dict[str, Any] = {**QUORUM, "x-delivery-limit": limit}
    if dlq is not None:
        ch.queue_declare(dlq, durable=True)
        args.update({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    ch.queue_declare(q, durable=True, arguments=args)
    return q


def _get_nack_loop(ch: Any, q: str, times: int) -> list[dict[str, Any]]:
    seen = []
    for _ in range(times):
        m, p, b = ch.basic_get(q)
        if m is None:
            seen.append({"empty": True})
            break
        seen.append(pt.msg_obs(m, p, b, with_props=True))
        ch.basic_nack(m.delivery_tag, requeue=True)
    return seen


@scenario("delivery_limits")
def quorum_nack_past_limit_dead_letters(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        dlq = s.queue("dlq")
        q = _limited(s, ch, 2, dlq)
        ch.basic_publish("", q, b"poison", pika.BasicProperties(headers={"app": "v"}, delivery_mode=2))
        seen = _get_nack_loop(ch, q, 4)
        _wait_for(ch, dlq, 1)
        return {
            "seen": seen,
            "dead": _without_time(pt.get_all(ch, dlq, with_props=True)),
            "left": ch.queue_declare(q, passive=True).method.message_count,
        }


@scenario("delivery_limits")
def quorum_limit_without_dlx_drops(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        q = _limited(s, ch, 0, None)
        ch.basic_publish("", q, b"poison")
        seen = _get_nack_loop(ch, q, 2)
        return {"seen": seen, "left": ch.queue_declare(q, passive=True).method.message_count}


@scenario("delivery_limits")
def quorum_channel_close_counts_as_return(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        dlq = s.queue("dlq")
        q = _limited(s, ch, 1, dlq)
        ch.basic_publish("", q, b"m")
        seen = []
        for _ in range(3):
            other = conn.channel()
            m, p, _b = other.basic_get(q)
            if m is None:
                seen.append(None)
                break
            seen.append({"redelivered": m.redelivered, "count": (p.headers or {}).get("x-delivery-count")})
            other.close()
        _wait_for(ch, dlq, 1)
        return {"seen": seen, "dead": len(pt.get_all(ch, dlq))}


@scenario("delivery_limits")
def quorum_consumer_reject_requeue_loop(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        dlq = s.queue("dlq")
        q = _limited(s, ch, 3, dlq)
        ch.basic_publish("", q, b"poison")
        counts: list[Any] = []

        def on_message(c: Any, m: Any, p: Any, b: bytes) -> None:
            counts.append((p.headers or {}).get("x-delivery-count"))
            c.basic_reject(m.delivery_tag, requeue=True)

        tag = ch.basic_consume(q, on_message)
        _wait_for(ch, dlq, 1)
        ch.basic_cancel(tag)
        return {"counts": counts, "dead": pt.bodies(ch, dlq)}


@scenario("delivery_limits")
def quorum_recover_counts(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        q = s.queue("q")
        ch.queue_declare(q, durable=True, arguments=QUORUM)
        ch.basic_publish("", q, b"m")
        got = pt.consume_n(ch, q, 1)
        ch.basic_recover(requeue=True)
        again = pt.consume_n(ch, q, 1)
        return [{"redelivered": m.redelivered, "headers": pt.jsonable(p.headers)} for m, p, _ in got + again]


@scenario("delivery_limits")
def quorum_redeclare_other_limit_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = _limited(s, ch, 2, None)
        return pt.expect_close(lambda: ch.queue_declare(q, durable=True, arguments={**QUORUM, "x-delivery-limit": 3}))


def _classic_limit_extension(ref: Any, tgt: Any) -> str | None:
    """RabbitMQ 3.10 refuses x-delivery-limit on a classic queue (406, 'of queue type rabbit_classic_queue');
    amqpd honours it on any queue (issue 15): the message is dead-lettered after the limit, as on quorum."""
    if ref.get("declare", {}).get("code") != 406:
        return f"RabbitMQ now accepts x-delivery-limit on classic queues ({ref!r}): compare for equality"
    want = {"declare": {"ok": True}, "counts": [0, 1], "dead": ["m"]}
    return None if tgt == want else f"expected {want!r}, got {tgt!r}"


@scenario("delivery_limits", compare=_classic_limit_extension)
def classic_delivery_limit(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        q, dlq = s.queue("q"), s.queue("dlq")
        ch.queue_declare(dlq)
        args = {"x-delivery-limit": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
        declared = pt.expect_close(lambda: ch.queue_declare(q, arguments=args))
        if "code" in declared:
            return {"declare": declared}
        ch.basic_publish("", q, b"m")
        counts = [p.get("props", {}).get("headers", {}).get("x-delivery-count") for p in _get_nack_loop(ch, q, 3)]
        return {"declare": {"ok": True}, "counts": [c for c in counts if c is not None], "dead": pt.bodies(ch, dlq)}
