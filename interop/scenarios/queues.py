"""Queues: flags, passive, redeclare mismatches, server-named, exclusivity, purge/delete, arguments."""

from __future__ import annotations

from typing import Any

from interop import pika_tools as pt
from interop.registry import add, scenario
from interop.scope import Scope, pika_session


@scenario("queues")
def declare_ok_counts(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()  # counts in *-ok replies are only settled for confirmed publishes
        q = s.queue("q")
        first = pt.summarize(ch.queue_declare(q))
        for i in range(3):
            ch.basic_publish("", q, b"%d" % i)
        again = pt.summarize(ch.queue_declare(q))
        passive = pt.summarize(ch.queue_declare(q, passive=True))
        return {"first": first, "again": again, "passive": passive}


@scenario("queues")
def server_named_queue(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        r = ch.queue_declare("", exclusive=True)
        name = s.track_queue(r.method.queue)
        ch.basic_publish("", name, b"to-self")
        return {"declare": pt.summarize(r), "got": pt.get_all(ch, name)}


@scenario("queues")
def two_server_named_queues_differ(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        a = s.track_queue(ch.queue_declare("", exclusive=True).method.queue)
        b = s.track_queue(ch.queue_declare("", exclusive=True).method.queue)
        return {"a": a, "b": b, "differ": a != b}


@scenario("queues")
def passive_missing_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_declare(s.name("missing"), passive=True))


def _mismatch(first: dict[str, Any], second: dict[str, Any]) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            q = s.queue("q")
            ch.queue_declare(q, **first)
            return pt.expect_close(lambda: ch.queue_declare(q, **second))

    return run


_MISMATCHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("same_flags_ok", {"durable": True}, {"durable": True}),
    ("durable_406", {"durable": True}, {"durable": False}),
    ("auto_delete_406", {}, {"auto_delete": True}),
    ("exclusive_mismatch", {"exclusive": True}, {"exclusive": False}),
    ("ttl_argument_406", {"arguments": {"x-message-ttl": 1000}}, {"arguments": {"x-message-ttl": 2000}}),
    ("argument_added_406", {}, {"arguments": {"x-max-length": 5}}),
    ("argument_removed_406", {"arguments": {"x-max-length": 5}}, {}),
    ("passive_ignores_flags", {"durable": True}, {"passive": True, "durable": False}),
]
for _name, _a, _b in _MISMATCHES:
    add("queues", f"redeclare_{_name}", _mismatch(_a, _b))


@scenario("queues")
def declare_amq_prefix_403(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_declare("amq.interop." + s.token))


@scenario("queues")
def exclusive_from_other_connection_405(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("ex")
        ch.queue_declare(q, exclusive=True)
        other = pt.connect(url)
        try:
            och = other.channel()
            return {
                "declare": pt.expect_close(lambda: och.queue_declare(q)),
                "passive": pt.expect_close(lambda: other.channel().queue_declare(q, passive=True)),
                "consume": pt.expect_close(lambda: other.channel().basic_consume(q, lambda *a: None)),
                "delete": pt.expect_close(lambda: other.channel().queue_delete(q)),
            }
        finally:
            pt.close_quietly(other)


@scenario("queues")
def exclusive_queue_gone_after_close(url: str) -> Any:
    with Scope(url) as s:
        q = s.queue("ex")
        conn = pt.connect(url)
        conn.channel().queue_declare(q, exclusive=True)
        conn.close()
        check = pt.connect(url)
        try:
            return pt.expect_close(lambda: check.channel().queue_declare(q, passive=True))
        finally:
            pt.close_quietly(check)


@scenario("queues")
def auto_delete_after_last_consumer(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("ad")
        ch.queue_declare(q, auto_delete=True)
        before = pt.expect_close(lambda: ch.queue_declare(q, passive=True))
        tag = ch.basic_consume(q, lambda *a: None)
        ch.basic_cancel(tag)
        pt.pump(conn, 0.1)
        after = pt.expect_close(lambda: ch.queue_declare(q, passive=True))
        return {"before_consume": before, "after_cancel": after}


@scenario("queues")
def purge_returns_count(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()  # counts in *-ok replies are only settled for confirmed publishes
        q = s.queue("q")
        ch.queue_declare(q)
        for _i in range(5):
            ch.basic_publish("", q, b"x")
        r = pt.summarize(ch.queue_purge(q))
        return {"purge": r, "after": pt.summarize(ch.queue_declare(q, passive=True))}


@scenario("queues")
def purge_missing_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_purge(s.name("missing")))


@scenario("queues")
def purge_keeps_unacked(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()  # counts in *-ok replies are only settled for confirmed publishes
        q = s.queue("q")
        ch.queue_declare(q)
        for i in range(3):
            ch.basic_publish("", q, b"%d" % i)
        m, _, _ = ch.basic_get(q)
        purged = pt.summarize(ch.queue_purge(q))
        ch.basic_nack(m.delivery_tag, requeue=True)
        return {"purged": purged, "left": pt.get_all(ch, q)}


@scenario("queues")
def delete_returns_count(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()  # counts in *-ok replies are only settled for confirmed publishes
        q = s.queue("q")
        ch.queue_declare(q)
        for _i in range(4):
            ch.basic_publish("", q, b"x")
        return pt.summarize(ch.queue_delete(q))


@scenario("queues")
def delete_missing_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_delete(s.name("missing")))


@scenario("queues")
def delete_if_empty_refused_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_publish("", q, b"x")
        return pt.expect_close(lambda: ch.queue_delete(q, if_empty=True))


@scenario("queues")
def delete_if_unused_refused_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_consume(q, lambda *a: None)
        other = conn.channel()
        return pt.expect_close(lambda: other.queue_delete(q, if_unused=True))


@scenario("queues")
def bind_missing_queue_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_bind(s.name("missing"), "amq.direct", "k"))


@scenario("queues")
def bind_missing_exchange_404(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        return pt.expect_close(lambda: ch.queue_bind(q, s.name("missing"), "k"))


@scenario("queues")
def unbind_missing_binding_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        return pt.expect_close(lambda: ch.queue_unbind(q, "amq.direct", "never"))


@scenario("queues")
def max_length_drops_head(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-max-length": 3})
        for i in range(6):
            ch.basic_publish("", q, b"%d" % i)
        return pt.bodies(ch, q)


@scenario("queues")
def max_length_reject_publish_nacks(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
        ch.confirm_delivery()
        out = []
        for i in range(4):
            try:
                ch.basic_publish("", q, b"%d" % i)
                out.append("ack")
            except Exception as e:  # pika raises NackError for a nacked publish — that is the observation
                out.append(type(e).__name__)
        return {"confirms": out, "left": pt.bodies(ch, q)}


@scenario("queues")
def message_ttl_expires(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-message-ttl": 50})
        ch.basic_publish("", q, b"old")
        pt.pump(conn, 0.3)
        ch.basic_publish("", q, b"new")
        return pt.bodies(ch, q)


@scenario("queues")
def per_message_expiration(url: str) -> Any:
    import pika

    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50"))
        ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="60000"))
        pt.pump(conn, 0.3)
        return pt.get_all(ch, q, with_props=True)


@scenario("queues")
def dead_letter_on_reject(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q, dlx, dlq = s.queue("q"), s.exchange("dlx"), s.queue("dlq")
        ch.exchange_declare(dlx, "fanout")
        ch.queue_declare(dlq)
        ch.queue_bind(dlq, dlx)
        ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx})
        ch.basic_publish("", q, b"bad")
        m, _, _ = ch.basic_get(q)
        ch.basic_reject(m.delivery_tag, requeue=False)
        pt.pump(conn, 0.1)
        got = pt.get_all(ch, dlq, with_props=True)
        for g in got:  # x-death carries a timestamp: keep the rest
            for d in g["props"].get("headers", {}).get("x-death", []):
                d.pop("time", None)
        return got


@scenario("queues")
def invalid_argument_type_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_declare(s.queue("q"), arguments={"x-max-length": "ten"}))


@scenario("queues")
def negative_ttl_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.queue_declare(s.queue("q"), arguments={"x-message-ttl": -1}))


@scenario("queues")
def unicode_queue_name(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()  # counts in *-ok replies are only settled for confirmed publishes
        q = s.queue("очередь-日本-🐇")
        ch.queue_declare(q)
        ch.basic_publish("", q, "héllo wörld ✓".encode())
        return {"declare": pt.summarize(ch.queue_declare(q, passive=True)), "got": pt.get_all(ch, q)}


@scenario("queues")
def unicode_exchange_and_routing_key(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("обмен-交換"), s.queue("q")
        ch.exchange_declare(x, "topic")
        ch.queue_declare(q)
        ch.queue_bind(q, x, "ключ.*.日本")
        ch.basic_publish(x, "ключ.é.日本", b"1")
        ch.basic_publish(x, "ключ.é.中国", b"2")
        return pt.get_all(ch, q)


@scenario("queues")
def long_queue_name_255(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        q = s.track_queue(q + "x" * (255 - len(q)))
        return pt.summarize(ch.queue_declare(q))


@scenario("queues")
def durable_queue_declare_durable_exchange_bind(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q, x = s.queue("q"), s.exchange("x")
        ch.exchange_declare(x, "direct", durable=True)
        ch.queue_declare(q, durable=True)
        ch.queue_bind(q, x, "k")
        import pika

        ch.basic_publish(x, "k", b"p", pika.BasicProperties(delivery_mode=2))
        return pt.get_all(ch, q, with_props=True)


# --- more queue arguments clients use ---------------------------------------------------------------


@scenario("queues")
def max_priority_orders_by_priority(url: str) -> Any:
    import pika

    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-max-priority": 5})
        for i, prio in enumerate([0, 3, 9, 1, 5, 3]):
            ch.basic_publish("", q, b"%d-p%d" % (i, prio), pika.BasicProperties(priority=prio))
        return pt.bodies(ch, q)


@scenario("queues")
def max_length_bytes_drops_head(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-max-length-bytes": 10})
        for i in range(4):
            ch.basic_publish("", q, b"%04d" % i)
        return pt.bodies(ch, q)


@scenario("queues")
def queue_expires_when_unused(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-expires": 100})
        pt.pump(conn, 0.6)
        return pt.expect_close(lambda: ch.queue_declare(q, passive=True))


@scenario("queues")
def ttl_expiry_dead_letters_with_routing_key(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q, dlx, dlq = s.queue("q"), s.exchange("dlx"), s.queue("dlq")
        ch.exchange_declare(dlx, "direct")
        ch.queue_declare(dlq)
        ch.queue_bind(dlq, dlx, "expired")
        ch.queue_declare(
            q, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "expired"}
        )
        ch.basic_publish("", q, b"will-expire")
        pt.pump(conn, 0.4)
        got = pt.get_all(ch, dlq, with_props=True)
        for g in got:
            for d in g["props"].get("headers", {}).get("x-death", []):
                d.pop("time", None)
        return got


@scenario("queues")
def max_length_dead_letters_overflow(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q, dlq = s.queue("q"), s.queue("dlq")
        ch.queue_declare(dlq)
        ch.queue_declare(
            q, arguments={"x-max-length": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
        )
        for i in range(3):
            ch.basic_publish("", q, b"%d" % i)
        pt.pump(conn, 0.2)
        return {"q": pt.bodies(ch, q), "dlq": pt.bodies(ch, dlq)}


@scenario("queues")
def single_active_consumer(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q, arguments={"x-single-active-consumer": True})
        a: list[str] = []
        b: list[str] = []
        ta = ch.basic_consume(q, lambda c, m, p, body: a.append(body.decode()), auto_ack=True)
        ch.basic_consume(q, lambda c, m, p, body: b.append(body.decode()), auto_ack=True)
        for i in range(3):
            ch.basic_publish("", q, b"s%d" % i)
        pt.pump(conn, 0.3)
        ch.basic_cancel(ta)
        ch.basic_publish("", q, b"after-cancel")
        pt.pump(conn, 0.3)
        return {"first": a, "second": b}


@scenario("queues")
def queue_mode_lazy_accepted(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        r = pt.expect_close(lambda: ch.queue_declare(q, arguments={"x-queue-mode": "lazy"}))
        return r


@scenario("queues")
def unknown_x_argument_ignored(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        return pt.expect_close(lambda: ch.queue_declare(q, arguments={"x-interop-unknown": 1, "plain": "v"}))


@scenario("queues")
def classic_queue_type_explicit(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        return pt.expect_close(lambda: ch.queue_declare(q, arguments={"x-queue-type": "classic"}))
