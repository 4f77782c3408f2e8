"""Dead-lettering: a message rejected, expired or pushed out by a length limit is republished to the
queue's x-dead-letter-exchange with an x-death history, as RabbitMQ 3.10 does it."""

from __future__ import annotations

import datetime
import struct
from typing import TYPE_CHECKING, Any, Protocol

from amqpd.broker.message import Message
from amqpd.protocol.constants import FLAG_EXPIRATION, FLAG_HEADERS
from amqpd.protocol.fastpath import shortstr
from amqpd.protocol.properties import encode_table, rewrite_properties

if TYPE_CHECKING:
    from amqpd.broker.entry import Entry
    from amqpd.broker.queues.queue import Queue


class Router(Protocol):
    """What dead-lettering needs of the broker: routing, the store, message bodies and the clock."""

    def has_exchange(self, vhost: str, name: str) -> bool: ...

    def route_to(self, vhost: str, exchange: str, msg: Message) -> list[Queue]:
        """The queues msg goes to from `exchange` (which exists)."""
        ...

    def enqueue(self, msg: Message, queues: list[Queue]) -> None:
        """Publish a routed message to these queues: every step of a publish after routing (Publisher.deliver:
        ids, deduplication, length limits, the store, the push)."""
        ...

    def body_of(self, msg: Message) -> bytes: ...

    def now_ms(self) -> int: ...


def dead_letter(router: Router, queue: Queue, entry: Entry, reason: str, dlx_name: str) -> None:
    if not router.has_exchange(queue.vhost, dlx_name):
        return  # RabbitMQ drops the message when the dead-letter exchange does not exist
    msg = entry.msg
    routing_key = queue.effective.get("x-dead-letter-routing-key") or msg.routing_key
    dead = _dead_message(router, msg, queue, reason, dlx_name, routing_key)
    deaths: list[dict[str, Any]] = dead.headers.get("x-death", []) if dead.headers else []
    targets = router.route_to(queue.vhost, dlx_name, dead)
    if reason != "rejected":  # a rejection is the application's choice, never a cycle to break
        targets = [q for q in targets if not _cycles(q, deaths)]
    if not targets:
        return
    router.enqueue(dead, targets)


def _dead_message(router: Router, msg: Message, queue: Queue, reason: str, dlx: str, routing_key: str) -> Message:
    headers = dict(msg.headers or {})
    deaths = [dict(d) for d in headers.get("x-death") or [] if isinstance(d, dict)]
    previous = next((d for d in deaths if d.get("queue") == queue.name and d.get("reason") == reason), None)
    if previous is not None:
        deaths.remove(previous)
        previous["count"] = int(previous.get("count", 0)) + 1  # the rest stays as at the first death
        deaths.insert(0, previous)
    else:
        death: dict[str, Any] = {
            "count": 1,
            "reason": reason,
            "queue": queue.name,
            "time": _now(router),
            "exchange": msg.exchange,
            "routing-keys": [_table_string(msg.routing_key), *_cc(headers)],  # BCC keys stay secret, as in RabbitMQ
        }
        expiration = msg.raw_property(FLAG_EXPIRATION)  # only this one: pamqp refuses some valid properties
        if expiration is not None:
            death["original-expiration"] = expiration.decode()
        deaths.insert(0, death)
    headers["x-death"] = deaths
    if "x-dead-letter-routing-key" in queue.arguments:
        headers.pop("CC", None)  # RabbitMQ: the dead-letter key alone routes the message then
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue.name)
    headers.setdefault("x-first-death-exchange", msg.exchange)
    body = router.body_of(msg)
    # The message's own TTL does not follow it to the dead-letter queue; every other property stays as sent.
    header = rewrite_properties(msg.header, len(body), {FLAG_HEADERS: encode_table(headers), FLAG_EXPIRATION: None})
    flags = struct.unpack_from(">H", header, 12)[0]
    dead = Message(dlx, routing_key, shortstr(dlx) + shortstr(routing_key), header, body, flags)
    dead.timestamp_ms = msg.timestamp_ms
    if "x-dead-letter-routing-key" not in queue.arguments:
        dead.bcc = msg.bcc  # routed again by all the original keys, BCC's included
    return dead


def _table_string(key: str) -> str | bytes:
    """A routing key as a table value: one with invalid UTF-8 (kept as surrogates) goes as its raw bytes."""
    try:
        key.encode()
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogateescape")
    return key


def _cycles(target: Queue, deaths: list[dict[str, Any]]) -> bool:
    """RabbitMQ's is_cycle: the message already died in `target`, and nothing in the deaths since
    then (that one included) was a client's rejection, so the loop would run forever on its own."""
    for i, death in enumerate(deaths):
        if death.get("queue") == target.name:
            return all(d.get("reason") != "rejected" for d in deaths[: i + 1])
    return False


def _cc(headers: dict[str, Any]) -> list[str]:
    cc = headers.get("CC")
    return [c for c in cc if isinstance(c, str)] if isinstance(cc, list) else []


def _now(router: Router) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(router.now_ms() // 1000, datetime.UTC)
