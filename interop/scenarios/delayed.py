"""The x-delayed-message exchange of rabbitmq_delayed_message_exchange. The reference RabbitMQ has no such
plugin (it refuses the type: 503 COMMAND_INVALID), so each scenario checks that refusal on the reference
and the plugin's documented behaviour on amqpd (README.md of
https://github.com/rabbitmq/rabbitmq-delayed-message-exchange: "The Basics", "Routing"; the x-delay
header reads -delay on delivery: src/rabbit_delayed_message_utils.erl swap_delay_header)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika

from interop import pika_tools as pt
from interop.registry import scenario
from interop.scope import pika_session


def _plugin_behaviour(want: Any) -> Callable[[Any, Any], str | None]:
    def compare(ref: Any, tgt: Any) -> str | None:
        if not (isinstance(ref, dict) and ref.get("code") == 503 and ref.get("closed") == "connection"):
            return f"the reference now accepts x-delayed-message ({ref!r}): compare for equality"
        return None if tgt == want else f"expected the plugin's behaviour {want!r}, got {tgt!r}"

    return compare


def _declare(ch: Any, name: str, kind: str = "direct") -> dict[str, Any] | None:
    close = pt.expect_close(lambda: ch.exchange_declare(name, "x-delayed-message", arguments={"x-delayed-type": kind}))
    return close if "code" in close else None


@scenario("delayed", compare=_plugin_behaviour({"order": ["now", "100ms", "400ms"], "x-delay": [None, -100, -400]}))
def delayed_messages_arrive_in_due_order(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("dx"), s.queue("q")
        refused = _declare(ch, x)
        if refused:
            return refused
        ch.queue_declare(q)
        ch.queue_bind(q, x, "k")
        for body, delay in ((b"400ms", 400), (b"100ms", 100), (b"now", None)):
            headers = {"x-delay": delay} if delay is not None else {}
            ch.basic_publish(x, "k", body, pika.BasicProperties(headers=headers))
        got = pt.consume_n(ch, q, 3, timeout=5, auto_ack=True)
        return {
            "order": [b.decode() for _m, _p, b in got],
            "x-delay": [(p.headers or {}).get("x-delay") for _m, p, _b in got],
        }


@scenario("delayed", compare=_plugin_behaviour({"code": 406, "closed": "channel"}))
def delayed_exchange_needs_x_delayed_type(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        close = pt.expect_close(lambda: ch.exchange_declare(s.exchange("dx"), "x-delayed-message"))
        if close.get("code") == 503:
            return close
        return {"code": close.get("code"), "closed": close.get("closed")}


@scenario("delayed", compare=_plugin_behaviour({"a": ["m"], "b": []}))
def delayed_exchange_routes_as_its_x_delayed_type(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, a, b = s.exchange("tx"), s.queue("a"), s.queue("b")
        refused = _declare(ch, x, "topic")
        if refused:
            return refused
        for q, key in ((a, "orders.#"), (b, "payments.*")):
            ch.queue_declare(q)
            ch.queue_bind(q, x, key)
        ch.basic_publish(x, "orders.eu.new", b"m", pika.BasicProperties(headers={"x-delay": 50}))
        pt.consume_n(ch, a, 1, timeout=3, auto_ack=False)  # waits for the delay; left unacked, requeued
        ch.basic_recover(requeue=True)
        pt.pump(conn, 0.1)
        return {"a": pt.bodies(ch, a), "b": pt.bodies(ch, b)}
