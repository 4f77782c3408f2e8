"""What the management API does to the broker, as plain functions: declare, delete, purge, publish, get and
peek, with RabbitMQ's checks (they raise the same AMQPErrors a channel would). No HTTP here.

The API acts as RabbitMQ's management plugin does: not as a client connection, so it may delete or purge
an exclusive queue, but basic.get on one is refused as it would be for another connection.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pamqp import commands
from pamqp.header import ContentHeader

from amqpd import errors
from amqpd.broker.entry import Entry
from amqpd.broker.message import Message
from amqpd.broker.publish.publisher import UNATTENDED
from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.exchanges import Exchange
from amqpd.mgmt.objects import jsonable
from amqpd.protocol.fastpath import shortstr
from amqpd.protocol.properties import decode_properties

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.routing.vhost import VirtualHost
    from store import MessageRecord

ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


# -- queues and exchanges --------------------------------------------------------------------------------------


def delete_queue(vhost: VirtualHost, name: str, if_empty: bool, if_unused: bool) -> None:
    q = vhost.queue(name)
    if if_unused and q.consumers:
        raise errors.precondition_failed(f"queue '{name}' in vhost '{vhost.name}' in use")
    if if_empty and (q.ready or q.unacked):
        raise errors.precondition_failed(f"queue '{name}' in vhost '{vhost.name}' not empty")
    vhost.remove_queue(q)


def purge_queue(vhost: VirtualHost, name: str) -> int:
    q = vhost.queue(name)
    return vhost.purge_queue(name, q.exclusive_owner)


def destination(vhost: VirtualHost, kind: str, name: str) -> Queue | Exchange:
    return vhost.queue(name) if kind == "q" else vhost.exchange(name)


# -- publish ----------------------------------------------------------------------------------------------------


def payload_bytes(payload: Any, encoding: str) -> bytes:
    if not isinstance(payload, str):
        raise ValueError("payload must be a string")
    if encoding == "string":
        return payload.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("payload is not valid base64") from None
    raise ValueError(f"payload_encoding must be string or base64, not {encoding!r}")


PROPERTY_NAMES = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
)


def encode_header(properties: dict[str, Any], body_size: int) -> bytes:
    """A content-header payload from the API's `properties` object (RabbitMQ's names)."""
    unknown = set(properties) - set(PROPERTY_NAMES)
    if unknown:
        raise ValueError(f"unknown properties: {', '.join(sorted(unknown))}")
    values = {k: v for k, v in properties.items() if v is not None}
    if "timestamp" in values:  # seconds since the epoch in JSON, a datetime for the codec
        stamp = values["timestamp"]
        if not isinstance(stamp, int) or isinstance(stamp, bool) or not 0 <= stamp < 2**63:
            raise ValueError(f"timestamp must be seconds since the epoch, not {stamp!r}")
        values["timestamp"] = datetime.datetime.fromtimestamp(stamp, datetime.UTC)
    try:
        return ContentHeader(0, body_size, commands.Basic.Properties(**values)).marshal()
    except (TypeError, ValueError, OverflowError, struct.error) as exc:
        raise ValueError(f"invalid properties: {exc}") from None


async def publish(
    broker: Broker, vhost: VirtualHost, exchange: str, routing_key: str, properties: dict[str, Any], body: bytes
) -> bool:
    """Publish one message as a client would (through the broker's Publisher, with nobody to confirm to); True
    when it reached a queue. A persistent message is on disk before this returns (the API's answer is its
    confirm)."""
    ex = vhost.exchange(exchange)
    if ex.internal:
        raise errors.access_refused(f"cannot publish to internal exchange '{exchange}' in vhost '{vhost.name}'")
    header = encode_header(properties, len(body))
    flags = int.from_bytes(header[12:14], "big")
    msg = Message(exchange, routing_key, shortstr(exchange) + shortstr(routing_key), header, body, flags)
    routed = bool(vhost.route(ex, msg))
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if broker.publisher.publish(UNATTENDED, vhost, msg, False, 0, _resolver(done)):
        await done
    return routed


# -- get and peek -----------------------------------------------------------------------------------------------


@dataclass
class Fetched:
    entry: Entry
    message_count: int  # ready messages left behind it, as basic.get-ok says
    redelivered: bool  # as it was when taken (requeueing it flags it for next time)


def message_json(
    broker: Broker,
    entry: Entry,
    message_count: int,
    encoding: str,
    truncate: int | None,
    redelivered: bool | None = None,
) -> dict[str, Any]:
    """A message as /api/queues/{v}/{q}/get answers: payload as text when it is UTF-8 (encoding auto), else
    base64; properties with RabbitMQ's names."""
    msg = entry.msg
    body = broker.body_of(msg)
    shown = body[:truncate] if truncate is not None else body
    text: str | None = None
    if encoding == "auto":
        try:
            text = shown.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return {
        "payload_bytes": len(body),
        "redelivered": entry.redelivered if redelivered is None else redelivered,
        "exchange": msg.exchange,
        "routing_key": msg.routing_key,
        "message_count": message_count,
        "properties": properties_json(msg.header),
        "payload": text if text is not None else base64.b64encode(shown).decode(),
        "payload_encoding": "string" if text is not None else "base64",
    }


def record_json(offset: int, record: MessageRecord, encoding: str) -> dict[str, Any]:
    """A stream's message as peek shows it: message_json's fields plus its offset and append time (ms)."""
    text: str | None = None
    if encoding == "auto":
        try:
            text = record.body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return {
        "offset": offset,
        "timestamp": record.timestamp_ms,
        "payload_bytes": len(record.body),
        "redelivered": False,
        "exchange": record.exchange,
        "routing_key": record.routing_key,
        "properties": properties_json(record.properties),
        "payload": text if text is not None else base64.b64encode(record.body).decode(),
        "payload_encoding": "string" if text is not None else "base64",
    }


def properties_json(header: bytes) -> dict[str, Any]:
    props = decode_properties(header)
    out: dict[str, Any] = {}
    for name in PROPERTY_NAMES:
        value = getattr(props, name, None)
        if value is None:
            continue
        if name == "timestamp":
            value = int(value.timestamp())
        out[name] = jsonable(value)
    return out


async def get(broker: Broker, vhost: VirtualHost, name: str, count: int, ackmode: str) -> list[Fetched]:
    """Take up to count messages; the requeue modes put them back (redelivered, in place), the others
    settle them (ack) or drop them (reject: dead-lettered), as a channel would. Paged-out bodies are read
    back first (in the store's read worker), while the store still holds them for the queue."""
    if ackmode not in ACK_MODES:
        raise ValueError(f"ackmode must be one of {', '.join(ACK_MODES)}")
    q = vhost.queue(name)
    if q.exclusive_owner is not None:
        vhost.check_exclusive(q, object())  # another connection's exclusive queue: 405, as RabbitMQ's
    taken: list[Fetched] = []
    for _ in range(count):
        await broker.ready_to_take(q)
        entry = q.get()
        if entry is None:
            break
        q.delivered += 1
        taken.append(Fetched(entry, len(q.ready), entry.redelivered))
    lost = set(await broker.page_in([f.entry.msg for f in taken]))
    if lost:  # damaged on disk: gone from the queue, as a consumer's delivery would drop them
        for f in taken:
            if f.entry.msg in lost:
                q.hooks.unreadable(q, f.entry)
        taken = [f for f in taken if f.entry.msg not in lost]
    entries = [f.entry for f in taken]
    if ackmode.endswith("requeue_true"):
        q.requeue(entries)
    elif ackmode.startswith("ack"):
        for entry in entries:
            q.hooks.settled(q, entry)
    else:
        for entry in entries:
            q.hooks.dropped(q, entry, "rejected")
    return taken


async def peek(broker: Broker, vhost: VirtualHost, name: str, count: int, start: int = 0) -> list[Entry]:
    """Ready messages from position `start`, left exactly where they are: not taken, not flagged redelivered,
    not reordered (beyond RabbitMQ, which can only get-and-requeue). What the store holds is read in its read
    worker."""
    q = vhost.queue(name)
    ready = q.ready
    if not isinstance(ready, Backlog):
        entries = list(itertools.islice(iter(ready), start, start + count))
        lost = await broker.page_in([e.msg for e in entries])
        q.lost(lost)  # damaged on disk: not shown, and dropped as they reach the head
        return [e for e in entries if e.msg not in lost] if lost else entries
    # A backlog holds its tail as store offsets: read those records without touching the queue.
    wanted = ready.queued()[start : start + count]
    offsets = sorted(item for item in wanted if isinstance(item, int))
    loaded = dict(zip(offsets, await broker.read_messages(offsets), strict=True))
    lost = await broker.page_in([item.msg for item in wanted if not isinstance(item, int)])
    q.lost(lost)
    shown: list[Entry] = []
    for item in wanted:
        if isinstance(item, int):
            msg = loaded[item]
            if msg is not None:
                shown.append(Entry(msg, 0, None))
        elif item.msg not in lost:
            shown.append(item)
    return shown


# -- moving messages ---------------------------------------------------------------------------------------------

MOVE_BATCH = 500


def death_origin(msg: Message) -> tuple[str, str] | None:
    """Where a dead-lettered message was first published: the exchange and first routing key of its most recent
    x-death entry (RabbitMQ puts the newest first)."""
    deaths = (msg.headers or {}).get("x-death")
    if not isinstance(deaths, list) or not deaths or not isinstance(deaths[0], dict):
        return None
    exchange, keys = deaths[0].get("exchange"), deaths[0].get("routing-keys")
    if isinstance(exchange, bytes):
        exchange = exchange.decode()
    if not isinstance(exchange, str) or not isinstance(keys, list) or not keys:
        return None
    key = keys[0].decode() if isinstance(keys[0], bytes) else keys[0]
    return (exchange, key) if isinstance(key, str) else None


async def move(
    broker: Broker, vhost: VirtualHost, source: str, count: int | None, target: tuple[str, str] | None
) -> tuple[int, errors.AMQPError | None]:
    """Republish up to `count` ready messages of `source` (all when None) to target=(exchange, routing key), or,
    target None, to where each one's x-death says it came from; each one leaves `source` only once the
    republished copy is routed and, when persistent, on disk. A message with nowhere to go stops the move and
    stays at the head of `source`. Returns how many moved, and what stopped the move early."""
    q = vhost.queue(source)
    moved = 0
    while count is None or moved < count:
        batch = await _take(broker, q, MOVE_BATCH if count is None else min(MOVE_BATCH, count - moved))
        if not batch:
            break
        done, error = await _republish(broker, vhost, batch, target)
        for entry in batch[:done]:
            q.hooks.settled(q, entry)
        if done < len(batch):
            q.requeue(batch[done:])
        moved += done
        if error is not None:
            return moved, error
    return moved, None


async def _take(broker: Broker, q: Queue, n: int) -> list[Entry]:
    taken = []
    for _ in range(n):
        await broker.ready_to_take(q)  # a backlog's next part read in the store's read worker first
        entry = q.get()
        if entry is None:
            break
        taken.append(entry)
    return taken


async def _republish(
    broker: Broker, vhost: VirtualHost, batch: list[Entry], target: tuple[str, str] | None
) -> tuple[int, errors.AMQPError | None]:
    """Publish each entry's message to its destination and wait for the disk; (how many went, the error that
    stopped the rest)."""
    waits: list[asyncio.Future[None]] = []
    loop = asyncio.get_running_loop()
    for i, entry in enumerate(batch):
        old = entry.msg
        dest = target if target is not None else death_origin(old)
        if dest is None:
            error = errors.precondition_failed("message has no x-death header naming where it came from")
            return await _settled(waits, i, error)
        ex = vhost.exchanges.get(dest[0])
        copy = Message(
            dest[0], dest[1], shortstr(dest[0]) + shortstr(dest[1]), old.header, broker.body_of(old), old.flags
        )
        if ex is None or not vhost.route(ex, copy):
            error = errors.precondition_failed(
                f"no queue to take messages published to exchange '{dest[0]}' "
                f"with routing key '{dest[1]}' in vhost '{vhost.name}'"
            )
            return await _settled(waits, i, error)
        done: asyncio.Future[None] = loop.create_future()
        if broker.publisher.publish(UNATTENDED, vhost, copy, False, 0, _resolver(done)):
            waits.append(done)
    return await _settled(waits, len(batch), None)


def _resolver(future: asyncio.Future[None]) -> Callable[[], None]:
    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    return resolve


async def _settled(
    waits: list[asyncio.Future[None]], n: int, error: errors.AMQPError | None
) -> tuple[int, errors.AMQPError | None]:
    if waits:
        await asyncio.gather(*waits)
    return n, error
