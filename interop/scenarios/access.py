"""Access control: the permissions matrix (each AMQP method that RabbitMQ checks × a user holding every
permission, or lacking configure, write or read), topic permissions, user_id and impersonator, vhost
access, password-less users and per-vhost limits. The users and vhosts are created on both brokers from
one definitions document (interop/access_users.py); what one of them may do is compared, reply text
included (RabbitMQ's 403 texts name the resource and the user)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions as pex

from interop import access_users as au
from interop import pika_tools as pt
from interop.registry import add, scenario
from interop.scope import Scope


def close_with_text(op: Callable[[], Any]) -> dict[str, Any]:
    """Like pt.expect_close, with the whole reply text: for access errors the text is the contract."""
    try:
        r = op()
        return {"ok": r if isinstance(r, dict) else pt.summarize(r)}
    except (pex.ChannelClosedByBroker, pex.ConnectionClosedByBroker) as e:
        obs = pt.close_obs(e)
        obs["text"] = e.reply_text
        return obs
    except pex.AMQPError as e:
        return pt.close_obs(e)


def as_user(url: str, profile: str, op: Callable[[Any, Scope], Any], setup: Callable[[Any, Scope], Any]) -> Any:
    """`setup` as guest (names from the scope, deleted afterwards), then `op` on a channel of `profile`."""
    with Scope(url) as s:
        admin = pt.connect(url)
        try:
            setup(admin.channel(), s)
        finally:
            pt.close_quietly(admin)
        conn = pt.connect(au.user_url(url, profile))
        try:
            return close_with_text(lambda: op(conn.channel(), s))
        finally:
            pt.close_quietly(conn)


def nothing(ch: Any, s: Scope) -> None:
    return None


def declare_q(ch: Any, s: Scope) -> None:
    ch.queue_declare(s.queue("q"))


def declare_q_bound(ch: Any, s: Scope) -> None:
    ch.queue_declare(s.queue("q"))
    ch.queue_bind(s.queue("q"), "amq.direct", "k")


def declare_x(ch: Any, s: Scope) -> None:
    ch.exchange_declare(s.exchange("x"), "fanout")


def declare_x_bound(ch: Any, s: Scope) -> None:
    ch.exchange_declare(s.exchange("x"), "fanout")
    ch.exchange_bind(s.exchange("x"), "amq.direct", "k")


def publish_then_sync(exchange: Callable[[Scope], str]) -> Callable[[Any, Scope], Any]:
    def op(ch: Any, s: Scope) -> Any:
        ch.basic_publish(exchange(s), s.queue("q"), b"x")
        return ch.exchange_declare("amq.direct", passive=True)  # needs no permission: surfaces a close

    return op


def server_named(ch: Any, s: Scope) -> Any:
    ok = ch.queue_declare("", exclusive=True)
    return {"declared": ok.method.queue.startswith("amq.gen-")}


def consume(ch: Any, s: Scope) -> Any:
    return {"tag": bool(ch.basic_consume(s.queue("q"), lambda *a: None))}


# method -> (op as the user, setup as guest)
MATRIX: dict[str, tuple[Callable[[Any, Scope], Any], Callable[[Any, Scope], Any]]] = {
    "queue_declare": (lambda ch, s: ch.queue_declare(s.queue("q")), nothing),
    "queue_declare_existing": (lambda ch, s: ch.queue_declare(s.queue("q")), declare_q),
    "queue_declare_server_named": (server_named, nothing),
    "queue_declare_passive": (lambda ch, s: ch.queue_declare(s.queue("q"), passive=True), declare_q),
    "queue_declare_dead_letter_exchange": (
        lambda ch, s: ch.queue_declare(s.queue("q"), arguments={"x-dead-letter-exchange": s.name("dlx")}),
        nothing,
    ),
    "queue_delete": (lambda ch, s: ch.queue_delete(s.queue("q")), declare_q),
    "queue_purge": (lambda ch, s: ch.queue_purge(s.queue("q")), declare_q),
    "queue_bind": (lambda ch, s: ch.queue_bind(s.queue("q"), "amq.direct", "k"), declare_q),
    "queue_unbind": (lambda ch, s: ch.queue_unbind(s.queue("q"), "amq.direct", "k"), declare_q_bound),
    "exchange_declare": (lambda ch, s: ch.exchange_declare(s.exchange("x"), "fanout"), nothing),
    "exchange_declare_alternate_exchange": (
        lambda ch, s: ch.exchange_declare(s.exchange("x"), "fanout", arguments={"alternate-exchange": s.name("ae")}),
        nothing,
    ),
    "exchange_declare_passive": (lambda ch, s: ch.exchange_declare("amq.direct", passive=True), nothing),
    "exchange_delete": (lambda ch, s: ch.exchange_delete(s.exchange("x")), declare_x),
    "exchange_bind": (lambda ch, s: ch.exchange_bind(s.exchange("x"), "amq.direct", "k"), declare_x),
    "exchange_unbind": (lambda ch, s: ch.exchange_unbind(s.exchange("x"), "amq.direct", "k"), declare_x_bound),
    "basic_publish": (publish_then_sync(lambda s: "amq.direct"), declare_q),
    "basic_publish_default_exchange": (publish_then_sync(lambda s: ""), declare_q),
    "basic_publish_missing_exchange": (publish_then_sync(lambda s: s.name("nowhere")), nothing),
    "basic_consume": (consume, declare_q),
    "basic_get": (lambda ch, s: ch.basic_get(s.queue("q")), declare_q),
}

for _method, (_op, _setup) in MATRIX.items():
    for _profile in ("full", "no-configure", "no-write", "no-read"):
        add(
            "access",
            f"{_method}__{_profile.replace('-', '_')}",
            lambda url, op=_op, setup=_setup, profile=_profile: as_user(url, profile, op, setup),
        )


# -- vhost access and logins ------------------------------------------------------------------------------


def connect_obs(url: str) -> Any:
    try:
        conn = pt.connect(url)
    except pex.ProbableAccessDeniedError as e:
        inner = e.args[0] if e.args else ""
        return {"refused": "access", "detail": str(inner)}
    except pex.AMQPConnectionError as e:
        return {"refused": type(e).__name__}
    pt.close_quietly(conn)
    return {"connected": True}


@scenario("access")
def user_without_permissions_on_the_vhost_is_refused_530(url: str) -> Any:
    return connect_obs(au.user_url(url, "none"))


@scenario("access")
def user_with_permissions_elsewhere_only_is_refused_530(url: str) -> Any:
    return connect_obs(au.user_url(url, "no-read", au.vhost("maxq")))


@scenario("access")
def password_made_by_amqpd_logs_in(url: str) -> Any:
    return connect_obs(au.user_url(url, "full"))


@scenario("access")
def wrong_password_is_refused(url: str) -> Any:
    return connect_obs(au.user_url(url, "full", password="wrong"))


@scenario("access")
def password_less_user_cannot_log_in_with_any_password(url: str) -> Any:
    return [connect_obs(au.user_url(url, "nopass", password=p)) for p in ("", "x")]


# -- topic permissions ----------------------------------------------------------------------------------


def topic_publish(key: str) -> Callable[[Any, Scope], Any]:
    def op(ch: Any, s: Scope) -> Any:
        ch.basic_publish("amq.topic", key.replace("{user}", au.user("topic")), b"x")
        return ch.exchange_declare("amq.topic", passive=True)

    return op


for _name, _key in (("own_prefix", "{user}.orders"), ("other_prefix", "someone.orders")):
    add("access", f"topic_publish_{_name}", lambda url, k=_key: as_user(url, "topic", topic_publish(k), nothing))
for _name, _key in (("public", "public.#"), ("private", "private.#")):
    add(
        "access",
        f"topic_bind_{_name}",
        lambda url, k=_key: as_user(url, "topic", lambda ch, s: ch.queue_bind(s.queue("q"), "amq.topic", k), declare_q),
    )


@scenario("access")
def topic_permission_does_not_restrict_other_exchanges(url: str) -> Any:
    return as_user(url, "topic", publish_then_sync(lambda s: "amq.direct"), declare_q)


# -- user_id ----------------------------------------------------------------------------------------------


def publish_user_id(user_id: str) -> Callable[[Any, Scope], Any]:
    def op(ch: Any, s: Scope) -> Any:
        ch.confirm_delivery()  # counts in declare-ok are settled only once the publish is confirmed
        ch.basic_publish("", s.queue("q"), b"x", pika.BasicProperties(user_id=user_id))
        ok = ch.queue_declare(s.queue("q"), passive=True)
        return {"ready": ok.method.message_count}

    return op


@scenario("access")
def user_id_of_another_user_is_refused_406(url: str) -> Any:
    return as_user(url, "full", publish_user_id("someone-else"), declare_q)


@scenario("access")
def user_id_of_the_user_is_accepted(url: str) -> Any:
    return as_user(url, "full", publish_user_id(au.user("full")), declare_q)


@scenario("access")
def impersonator_may_set_any_user_id(url: str) -> Any:
    return as_user(url, "impersonator", publish_user_id("someone-else"), declare_q)


# -- vhost limits -----------------------------------------------------------------------------------------


@scenario("access")
def vhost_max_queues_refuses_the_next_new_queue_406(url: str) -> Any:
    vurl = au.user_url(url, "full", au.vhost("maxq"))
    with Scope(url.rsplit("/", 1)[0] + "/" + quote(au.vhost("maxq"), safe="")) as s:  # guest cleans up
        conn = pt.connect(vurl)
        try:
            ch = conn.channel()
            first = close_with_text(lambda: ch.queue_declare(s.queue("one")))
            again = close_with_text(lambda: ch.queue_declare(s.queue("one")))
            second = close_with_text(lambda: ch.queue_declare(s.queue("two")))
            return {"first": first, "again": again, "second": second}
        finally:
            pt.close_quietly(conn)


@scenario("access")
def vhost_max_connections_refuses_the_next_connection_530(url: str) -> Any:
    vurl = au.user_url(url, "full", au.vhost("maxc"))
    first = pt.connect(vurl)
    try:
        return {"second": connect_obs(vurl)}
    finally:
        pt.close_quietly(first)


# -- which check comes first -------------------------------------------------------------------------------

ORDER: dict[str, tuple[str, Callable[[Any, Scope], Any], Callable[[Any, Scope], Any]]] = {
    # The reserved prefix is refused before the configure permission is looked at (queues)...
    "queue_declare_amq_prefix": ("no-configure", lambda ch, s: ch.queue_declare("amq." + s.name("q")), nothing),
    # ...but for a new exchange only after it (RabbitMQ checks the name once it knows the exchange is new).
    "exchange_declare_amq_prefix": (
        "no-configure",
        lambda ch, s: ch.exchange_declare("amq." + s.name("x"), "direct"),
        nothing,
    ),
    "exchange_delete_amq_direct": ("no-configure", lambda ch, s: ch.exchange_delete("amq.direct"), nothing),
    "exchange_declare_unknown_type": (
        "no-configure",
        lambda ch, s: ch.exchange_declare(s.exchange("x"), "no-such-type"),
        nothing,
    ),
    "queue_bind_default_exchange_without_write": (
        "no-write",
        lambda ch, s: ch.queue_bind(s.queue("q"), "", "k"),
        declare_q,
    ),
    "queue_bind_default_exchange": ("full", lambda ch, s: ch.queue_bind(s.queue("q"), "", "k"), declare_q),
    "queue_bind_missing_queue": ("full", lambda ch, s: ch.queue_bind(s.queue("q"), "amq.direct", "k"), nothing),
    "basic_consume_missing_queue_without_read": ("no-read", consume, nothing),
    "queue_delete_missing_without_configure": ("no-configure", lambda ch, s: ch.queue_delete(s.queue("q")), nothing),
}

for _name, (_profile, _op, _setup) in ORDER.items():
    add("access", f"order_{_name}", lambda url, p=_profile, op=_op, setup=_setup: as_user(url, p, op, setup))


# -- user limits (rabbitmqctl set_user_limits; definitions users[].limits) -----------------------------------


@scenario("access")
def user_max_connections_refuses_the_next_connection_530(url: str) -> Any:
    uurl = au.user_url(url, "limited")
    first = pt.connect(uurl)
    try:
        return {"second": connect_obs(uurl)}
    finally:
        pt.close_quietly(first)


@scenario("access")
def user_max_channels_closes_the_connection_530(url: str) -> Any:
    conn = pt.connect(au.user_url(url, "limited"))
    try:
        conn.channel()
        conn.channel()
        return close_with_text(conn.channel)
    finally:
        pt.close_quietly(conn)
