"""Exchanges: declare/redeclare/delete of each type, exchange-to-exchange bindings, alternate exchanges."""

from __future__ import annotations

from functools import partial
from typing import Any

import pika

from interop import pika_tools as pt
from interop.registry import add, scenario
from interop.scope import pika_session

TYPES = ("direct", "fanout", "topic", "headers")


def _declare_each(xtype: str) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            x = s.exchange(xtype)
            q = s.queue("q")
            ok = ch.exchange_declare(x, xtype)
            passive = ch.exchange_declare(x, xtype, passive=True)
            ch.queue_declare(q)
            args = {"x-match": "all", "k": "v"} if xtype == "headers" else None
            ch.queue_bind(q, x, routing_key="rk", arguments=args)
            props = pika.BasicProperties(headers={"k": "v"})
            ch.basic_publish(x, "rk", b"m1", props)
            ch.basic_publish(x, "other", b"m2", props)
            return {"declare": pt.summarize(ok), "passive": pt.summarize(passive), "got": pt.bodies(ch, q)}

    return run


for _t in TYPES:
    add("exchanges", f"declare_and_route_{_t}", _declare_each(_t))


def _mismatch(first: dict[str, Any], second: dict[str, Any]) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            x = s.exchange("x")
            ch.exchange_declare(x, **first)
            return pt.expect_close(lambda: ch.exchange_declare(x, **second))

    return run


_MISMATCHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("same_args_ok", {"exchange_type": "direct"}, {"exchange_type": "direct"}),
    ("type_mismatch_406", {"exchange_type": "direct"}, {"exchange_type": "fanout"}),
    ("durable_mismatch_406", {"exchange_type": "direct", "durable": True}, {"exchange_type": "direct"}),
    ("auto_delete_mismatch_406", {"exchange_type": "topic"}, {"exchange_type": "topic", "auto_delete": True}),
    ("internal_mismatch_406", {"exchange_type": "topic"}, {"exchange_type": "topic", "internal": True}),
    (
        "arguments_mismatch_406",
        {"exchange_type": "direct", "arguments": {"alternate-exchange": "a"}},
        {"exchange_type": "direct", "arguments": {"alternate-exchange": "b"}},
    ),
]
for _name, _a, _b in _MISMATCHES:
    add("exchanges", f"redeclare_{_name}", _mismatch(_a, _b))


@scenario("exchanges")
def passive_missing_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare(s.name("missing"), passive=True))


@scenario("exchanges")
def passive_ignores_type(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("x")
        ch.exchange_declare(x, "fanout")
        return pt.expect_close(lambda: ch.exchange_declare(x, "topic", passive=True))


@scenario("exchanges")
def unknown_type_503_connection_error(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare(s.exchange("x"), "no-such-type"))


@scenario("exchanges")
def declare_amq_prefix_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare("amq.interop-" + s.token, "direct"))


@scenario("exchanges")
def delete_missing_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_delete(s.name("missing")))


@scenario("exchanges")
def delete_amq_direct_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_delete("amq.direct"))


@scenario("exchanges")
def delete_if_unused_refused_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("x"), s.queue("q")
        ch.exchange_declare(x, "direct")
        ch.queue_declare(q)
        ch.queue_bind(q, x, "k")
        return pt.expect_close(lambda: ch.exchange_delete(x, if_unused=True))


@scenario("exchanges")
def delete_if_unused_when_unused_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("x")
        ch.exchange_declare(x, "direct")
        r = pt.expect_close(lambda: ch.exchange_delete(x, if_unused=True))
        return {"delete": r, "after": pt.expect_close(lambda: ch.exchange_declare(x, passive=True))}


@scenario("exchanges")
def predeclared_exchanges_exist(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        out = {}
        for name, t in [
            ("amq.direct", "direct"),
            ("amq.fanout", "fanout"),
            ("amq.topic", "topic"),
            ("amq.headers", "headers"),
            ("amq.match", "headers"),
        ]:
            out[name] = pt.expect_close(partial(ch.exchange_declare, name, t, passive=True))
            if "closed" in out[name]:
                ch = conn.channel()
        return out


@scenario("exchanges")
def redeclare_amq_direct_same_type_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare("amq.direct", "direct", durable=True))


@scenario("exchanges")
def redeclare_amq_topic_durable_ok(url: str) -> Any:
    """Apps (MQTT bridges, STOMP users) redeclare amq.topic with its own flags: RabbitMQ says ok."""
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare("amq.topic", "topic", durable=True))


@scenario("exchanges")
def redeclare_amq_direct_other_type(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare("amq.direct", "fanout", durable=True))


@scenario("exchanges")
def redeclare_amq_direct_not_durable(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.exchange_declare("amq.direct", "direct", durable=False))


@scenario("exchanges")
def internal_exchange_publish_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("internal")
        ch.exchange_declare(x, "fanout", internal=True)

        def pub() -> Any:
            ch.basic_publish(x, "", b"x")
            return ch.queue_declare("", exclusive=True)  # a round trip to observe the async close

        return pt.expect_close(pub)


@scenario("exchanges")
def internal_exchange_reached_through_e2e(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        front, inner, q = s.exchange("front"), s.exchange("inner"), s.queue("q")
        ch.exchange_declare(front, "direct")
        ch.exchange_declare(inner, "fanout", internal=True)
        ch.queue_declare(q)
        ch.exchange_bind(inner, front, "k")
        ch.queue_bind(q, inner)
        ch.basic_publish(front, "k", b"through")
        ch.basic_publish(front, "other", b"not")
        return pt.bodies(ch, q)


@scenario("exchanges")
def bind_to_default_exchange_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        return pt.expect_close(lambda: ch.queue_bind(q, "", "k"))


@scenario("exchanges")
def auto_delete_exchange_goes_with_last_binding(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("ad"), s.queue("q")
        ch.exchange_declare(x, "direct", auto_delete=True)
        ch.queue_declare(q)
        ch.queue_bind(q, x, "a")
        ch.queue_bind(q, x, "b")
        ch.queue_unbind(q, x, "a")
        still = pt.expect_close(lambda: ch.exchange_declare(x, passive=True))
        ch.queue_unbind(q, x, "b")
        gone = pt.expect_close(lambda: ch.exchange_declare(x, passive=True))
        return {"after_first_unbind": still, "after_last_unbind": gone}


# --- exchange-to-exchange bindings ---------------------------------------------------------------


@scenario("e2e")
def direct_to_fanout(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        src, dst, q1, q2 = s.exchange("src"), s.exchange("dst"), s.queue("q1"), s.queue("q2")
        ch.exchange_declare(src, "direct")
        ch.exchange_declare(dst, "fanout")
        for q in (q1, q2):
            ch.queue_declare(q)
            ch.queue_bind(q, dst)
        ch.exchange_bind(dst, src, "go")
        for rk in ("go", "stop", "go"):
            ch.basic_publish(src, rk, rk.encode())
        return {"q1": pt.bodies(ch, q1), "q2": pt.bodies(ch, q2)}


@scenario("e2e")
def topic_to_topic_keeps_routing_key(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        a, b, q = s.exchange("a"), s.exchange("b"), s.queue("q")
        ch.exchange_declare(a, "topic")
        ch.exchange_declare(b, "topic")
        ch.queue_declare(q)
        ch.exchange_bind(b, a, "eu.#")
        ch.queue_bind(q, b, "*.fr.*")
        for rk in ("eu.fr.paris", "eu.de.berlin", "us.fr.paris", "eu.fr"):
            ch.basic_publish(a, rk, rk.encode())
        return pt.get_all(ch, q)


@scenario("e2e")
def chain_of_three(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x1, x2, x3, q = s.exchange("x1"), s.exchange("x2"), s.exchange("x3"), s.queue("q")
        for x in (x1, x2, x3):
            ch.exchange_declare(x, "fanout")
        ch.queue_declare(q)
        ch.exchange_bind(x2, x1)
        ch.exchange_bind(x3, x2)
        ch.queue_bind(q, x3)
        ch.basic_publish(x1, "k", b"deep")
        return pt.get_all(ch, q)


@scenario("e2e")
def cycle_delivers_once(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x1, x2, q = s.exchange("x1"), s.exchange("x2"), s.queue("q")
        ch.exchange_declare(x1, "fanout")
        ch.exchange_declare(x2, "fanout")
        ch.queue_declare(q)
        ch.exchange_bind(x2, x1)
        ch.exchange_bind(x1, x2)
        ch.queue_bind(q, x1)
        ch.queue_bind(q, x2)
        ch.basic_publish(x1, "k", b"once")
        return pt.bodies(ch, q)


@scenario("e2e")
def diamond_delivers_once(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        top, left, right, q = s.exchange("top"), s.exchange("l"), s.exchange("r"), s.queue("q")
        for x in (top, left, right):
            ch.exchange_declare(x, "fanout")
        ch.queue_declare(q)
        ch.exchange_bind(left, top)
        ch.exchange_bind(right, top)
        ch.queue_bind(q, left)
        ch.queue_bind(q, right)
        ch.basic_publish(top, "", b"one")
        return pt.bodies(ch, q)


@scenario("e2e")
def unbind_stops_routing(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        a, b, q = s.exchange("a"), s.exchange("b"), s.queue("q")
        ch.exchange_declare(a, "direct")
        ch.exchange_declare(b, "fanout")
        ch.queue_declare(q)
        ch.queue_bind(q, b)
        ch.exchange_bind(b, a, "k")
        ch.basic_publish(a, "k", b"before")
        ch.exchange_unbind(b, a, "k")
        ch.basic_publish(a, "k", b"after")
        return pt.bodies(ch, q)


@scenario("e2e")
def bind_missing_source_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        b = s.exchange("b")
        ch.exchange_declare(b, "fanout")
        return pt.expect_close(lambda: ch.exchange_bind(b, s.name("missing"), "k"))


@scenario("e2e")
def bind_missing_destination_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        a = s.exchange("a")
        ch.exchange_declare(a, "fanout")
        return pt.expect_close(lambda: ch.exchange_bind(s.name("missing"), a, "k"))


@scenario("e2e")
def unbind_missing_binding_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        a, b = s.exchange("a"), s.exchange("b")
        ch.exchange_declare(a, "direct")
        ch.exchange_declare(b, "direct")
        return pt.expect_close(lambda: ch.exchange_unbind(b, a, "never-bound"))


@scenario("e2e")
def headers_to_queue_through_e2e(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        a, h, q = s.exchange("a"), s.exchange("h"), s.queue("q")
        ch.exchange_declare(a, "fanout")
        ch.exchange_declare(h, "headers")
        ch.queue_declare(q)
        ch.exchange_bind(h, a)
        ch.queue_bind(q, h, arguments={"x-match": "any", "color": "red"})
        ch.basic_publish(a, "", b"red", pika.BasicProperties(headers={"color": "red"}))
        ch.basic_publish(a, "", b"blue", pika.BasicProperties(headers={"color": "blue"}))
        return pt.bodies(ch, q)


# --- alternate exchanges -----------------------------------------------------------------------------


@scenario("exchanges")
def alternate_exchange_catches_unroutable(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, ae, q, qa = s.exchange("x"), s.exchange("ae"), s.queue("q"), s.queue("qa")
        ch.exchange_declare(ae, "fanout")
        ch.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
        ch.queue_declare(q)
        ch.queue_declare(qa)
        ch.queue_bind(q, x, "known")
        ch.queue_bind(qa, ae)
        ch.basic_publish(x, "known", b"routed")
        ch.basic_publish(x, "unknown", b"alternate")
        return {"q": pt.get_all(ch, q), "alternate": pt.get_all(ch, qa)}


@scenario("exchanges")
def alternate_exchange_suppresses_mandatory_return(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, ae, qa = s.exchange("x"), s.exchange("ae"), s.queue("qa")
        ch.exchange_declare(ae, "fanout")
        ch.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
        ch.queue_declare(qa)
        ch.queue_bind(qa, ae)
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b.decode()))
        ch.basic_publish(x, "nowhere", b"m", mandatory=True)
        pt.pump(conn, 0.2)
        return {"returned": returned, "alternate": pt.bodies(ch, qa)}


@scenario("exchanges")
def alternate_exchange_missing_drops(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("x")
        ch.exchange_declare(x, "direct", arguments={"alternate-exchange": s.name("missing-ae")})
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, pt.reply_prefix(m.reply_text))))
        ch.basic_publish(x, "nowhere", b"m", mandatory=True)
        pt.pump(conn, 0.2)
        return {"returned": returned}
