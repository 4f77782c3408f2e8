"""Routing: direct, fanout, topic patterns (`*`, `#`, empty words), headers x-match variants, CC/BCC,
the default exchange, several bindings of one queue."""

from __future__ import annotations

from typing import Any

import pika

from interop import pika_tools as pt
from interop.registry import add, scenario
from interop.scope import pika_session

# (pattern, routing keys published): each key's match is observed, so one scenario covers a pattern.
TOPIC_CASES: dict[str, tuple[str, list[str]]] = {
    "exact": ("a.b.c", ["a.b.c", "a.b", "a.b.c.d", "A.b.c"]),
    "star_middle": ("a.*.c", ["a.b.c", "a.c", "a..c", "a.b.b.c", "a.bb.c"]),
    "star_only": ("*", ["a", "", "a.b", "."]),
    "hash_only": ("#", ["a", "", "a.b.c", ".", ".."]),
    "hash_tail": ("a.#", ["a", "a.b", "a.b.c", "b.a", "a."]),
    "hash_head": ("#.z", ["z", "a.z", "a.b.z", "z.a", ".z"]),
    "hash_middle": ("a.#.z", ["a.z", "a.b.z", "a.b.c.z", "a.b", "az"]),
    "two_hashes": ("#.b.#", ["b", "a.b", "b.c", "a.b.c", "a.c", "a.bb.c"]),
    "star_star": ("*.*", ["a.b", "a", "a.b.c", ".", "a."]),
    "star_hash": ("*.#", ["a", "a.b", "", "."]),
    "hash_star": ("#.*", ["a", "a.b", "", "."]),
    "empty_pattern": ("", ["", "a", "."]),
    "empty_word_in_pattern": ("a..c", ["a..c", "a.b.c", "a.c"]),
    "leading_empty_word": (".a", [".a", "a", "x.a"]),
    "trailing_empty_word": ("a.", ["a.", "a", "a.x"]),
    "star_empty_words": ("*.*.*", ["..", "a..", "a.b.c", "a.b"]),
    "hash_hash": ("#.#", ["", "a", "a.b.c"]),
    "literal_hash_like": ("a#.b", ["a#.b", "ax.b", "a.b"]),
    "star_at_end": ("a.b.*", ["a.b.c", "a.b", "a.b.c.d", "a.b."]),
    "unicode_words": ("日本.*.東京", ["日本.x.東京", "日本.東京"]),
    "long_key": ("x.#", ["x." + ".".join(["w"] * 60), "y." + ".".join(["w"] * 60)]),
}


def _topic_case(pattern: str, keys: list[str]) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            x, q = s.exchange("t"), s.queue("q")
            ch.exchange_declare(x, "topic")
            ch.queue_declare(q)
            ch.queue_bind(q, x, pattern)
            for i, k in enumerate(keys):
                ch.basic_publish(x, k, str(i).encode())
            got = {m["body"] for m in pt.get_all(ch, q)}
            return {k: str(i) in got for i, k in enumerate(keys)}

    return run


for _n, (_p, _k) in TOPIC_CASES.items():
    add("topic", _n, _topic_case(_p, _k))


@scenario("topic")
def overlapping_bindings_one_delivery(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("t"), s.queue("q")
        ch.exchange_declare(x, "topic")
        ch.queue_declare(q)
        for p in ("a.*", "#", "a.b", "*.b"):
            ch.queue_bind(q, x, p)
        ch.basic_publish(x, "a.b", b"once")
        return pt.bodies(ch, q)


@scenario("topic")
def unbind_one_of_several_patterns(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("t"), s.queue("q")
        ch.exchange_declare(x, "topic")
        ch.queue_declare(q)
        ch.queue_bind(q, x, "a.*")
        ch.queue_bind(q, x, "#.b")
        ch.queue_unbind(q, x, "a.*")
        for k in ("a.b", "a.c", "z.b"):
            ch.basic_publish(x, k, k.encode())
        return pt.bodies(ch, q)


@scenario("topic")
def many_queues_fanout_by_pattern(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("t")
        ch.exchange_declare(x, "topic")
        pats = ["#", "stock.#", "stock.*.nyse", "*.usd.*", "stock.usd.nyse", "fx.#"]
        qs = {}
        for i, p in enumerate(pats):
            q = s.queue(f"q{i}")
            ch.queue_declare(q)
            ch.queue_bind(q, x, p)
            qs[p] = q
        for k in ("stock.usd.nyse", "stock.eur.nyse", "fx.usd.spot", "bond"):
            ch.basic_publish(x, k, k.encode())
        return {p: pt.bodies(ch, q) for p, q in qs.items()}


# --- headers exchange ---------------------------------------------------------------------------

H_MSGS: list[dict[str, Any] | None] = [
    {"a": 1, "b": "two"},
    {"a": 1},
    {"b": "two"},
    {"a": 2, "b": "two"},
    {},
    None,
    {"a": 1, "b": "two", "c": True},
    {"x-extra": "y", "a": 1},
    {"a": "1", "b": "two"},
]

HEADERS_CASES: dict[str, dict[str, Any]] = {
    "all": {"x-match": "all", "a": 1, "b": "two"},
    "any": {"x-match": "any", "a": 1, "b": "two"},
    "default_is_all": {"a": 1, "b": "two"},
    "all_empty": {"x-match": "all"},
    "any_empty": {"x-match": "any"},
    "all_with_x": {"x-match": "all-with-x", "a": 1, "x-extra": "y"},
    "any_with_x": {"x-match": "any-with-x", "x-extra": "y"},
    "all_ignores_x_keys": {"x-match": "all", "a": 1, "x-extra": "y"},
    "any_ignores_x_keys": {"x-match": "any", "x-extra": "y"},
    "bool_value": {"x-match": "all", "c": True},
    "void_value_matches_presence": {"x-match": "all", "b": None},
}


def _headers_case(args: dict[str, Any]) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            x, q = s.exchange("h"), s.queue("q")
            ch.exchange_declare(x, "headers")
            ch.queue_declare(q)
            ch.queue_bind(q, x, "ignored", arguments=args)
            for i, h in enumerate(H_MSGS):
                ch.basic_publish(x, "any-key", str(i).encode(), pika.BasicProperties(headers=h))
            got = {m["body"] for m in pt.get_all(ch, q)}
            return [str(i) in got for i in range(len(H_MSGS))]

    return run


for _n, _a in HEADERS_CASES.items():
    add("headers", _n, _headers_case(_a))


@scenario("headers")
def invalid_x_match_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("h"), s.queue("q")
        ch.exchange_declare(x, "headers")
        ch.queue_declare(q)
        return pt.expect_close(lambda: ch.queue_bind(q, x, "", arguments={"x-match": "some"}))


# --- direct / fanout / default ------------------------------------------------------------------


@scenario("routing")
def default_exchange_routes_by_queue_name(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_publish("", q, b"direct-to-queue")
        ch.basic_publish("", s.name("nobody"), b"lost")
        return pt.get_all(ch, q)


@scenario("routing")
def amq_direct_routes(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.queue_bind(q, "amq.direct", s.name("rk"))
        ch.basic_publish("amq.direct", s.name("rk"), b"via amq.direct")
        return pt.get_all(ch, q)


@scenario("routing")
def direct_multiple_keys_same_queue(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("d"), s.queue("q")
        ch.exchange_declare(x, "direct")
        ch.queue_declare(q)
        ch.queue_bind(q, x, "k1")
        ch.queue_bind(q, x, "k2")
        ch.queue_bind(q, x, "k1")  # idempotent
        for k in ("k1", "k2", "k3", "K1", ""):
            ch.basic_publish(x, k, k.encode() or b"empty")
        return pt.bodies(ch, q)


@scenario("routing")
def direct_empty_routing_key(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("d"), s.queue("q")
        ch.exchange_declare(x, "direct")
        ch.queue_declare(q)
        ch.queue_bind(q, x, "")
        ch.basic_publish(x, "", b"empty-key")
        ch.basic_publish(x, "a", b"a-key")
        return pt.bodies(ch, q)


@scenario("routing")
def fanout_ignores_key_to_all_queues(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("f")
        ch.exchange_declare(x, "fanout")
        qs = [s.queue(f"q{i}") for i in range(3)]
        for q in qs:
            ch.queue_declare(q)
            ch.queue_bind(q, x, "whatever")
        ch.basic_publish(x, "other", b"all")
        return [pt.get_all(ch, q) for q in qs]


@scenario("routing")
def cc_header_routes_and_stays(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q1, q2 = s.exchange("d"), s.queue("q1"), s.queue("q2")
        ch.exchange_declare(x, "direct")
        for q, k in ((q1, "main"), (q2, "copy")):
            ch.queue_declare(q)
            ch.queue_bind(q, x, k)
        ch.basic_publish(x, "main", b"cc", pika.BasicProperties(headers={"CC": ["copy"]}))
        return {"q1": pt.get_all(ch, q1, with_props=True), "q2": pt.get_all(ch, q2, with_props=True)}


@scenario("routing")
def bcc_header_routes_and_is_removed(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q1, q2 = s.exchange("d"), s.queue("q1"), s.queue("q2")
        ch.exchange_declare(x, "direct")
        for q, k in ((q1, "main"), (q2, "hidden")):
            ch.queue_declare(q)
            ch.queue_bind(q, x, k)
        ch.basic_publish(x, "main", b"bcc", pika.BasicProperties(headers={"BCC": ["hidden"], "keep": 1}))
        return {"q1": pt.get_all(ch, q1, with_props=True), "q2": pt.get_all(ch, q2, with_props=True)}


@scenario("routing")
def queue_delete_removes_bindings(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("f"), s.queue("q")
        ch.exchange_declare(x, "fanout")
        ch.queue_declare(q)
        ch.queue_bind(q, x)
        ch.queue_delete(q)
        ch.queue_declare(q)
        ch.basic_publish(x, "", b"after-recreate")
        return pt.bodies(ch, q)


@scenario("routing")
def exchange_delete_removes_bindings(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x, q = s.exchange("f"), s.queue("q")
        ch.exchange_declare(x, "fanout")
        ch.queue_declare(q)
        ch.queue_bind(q, x)
        ch.exchange_delete(x)
        ch.exchange_declare(x, "fanout")
        ch.basic_publish(x, "", b"after-recreate")
        return pt.bodies(ch, q)


@scenario("routing")
def publish_order_kept_in_queue(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        for i in range(200):
            ch.basic_publish("", q, b"%03d" % i)
        got = pt.bodies(ch, q)
        return {"n": len(got), "in_order": got == [f"{i:03d}" for i in range(200)]}
