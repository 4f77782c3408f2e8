"""The broker's objects as RabbitMQ 3.10's management API shows them: the JSON field names that rabbitmqadmin,
Flower, KEDA and Terraform's provider read. Plain functions of broker state; no HTTP here."""

from __future__ import annotations

import base64
import datetime
import hashlib
import operator
import os
import shutil
import socket
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from amqpd import __version__
from amqpd.broker.access.definitions import VHOST_FIELD
from amqpd.broker.delivery.unacked import taken_count
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.exchanges import EXCHANGE_TYPES, DelayedExchange, Exchange
from amqpd.broker.streams.stream import StreamQueue
from amqpd.mgmt.listing import KeptOrder
from amqpd.mgmt.stats import (
    Rates,
    channel_counts,
    connection_counts,
    depth_rates,
    exchange_counts,
    message_stats,
    queue_counts,
)

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.delivery.consumer import Consumer, Outlet
    from amqpd.broker.routing.vhost import VirtualHost
    from amqpd.session.channel import Channel
    from amqpd.session.connection import Session

# The management API version amqpd speaks (tools compare it, e.g. to pick endpoints).
API_VERSION = "3.10.8"
NODE = f"amqpd@{socket.gethostname().split('.')[0]}"
EXCHANGE_DESCRIPTIONS = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
    "x-federation-upstream": "Federation upstream helper exchange",
}


def jsonable(value: Any) -> Any:
    """An AMQP field value as JSON: tables and arrays recursively, bytes as text, decimals as numbers."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def timestamp(seconds: float) -> str:
    """RabbitMQ's idle_since form: RFC 3339 with milliseconds."""
    t = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}+00:00"


# -- queues ---------------------------------------------------------------------------------------------------


def queue_type(q: Queue) -> str:
    kind = q.arguments.get("x-queue-type")
    return kind if kind in ("quorum", "stream") else "classic"


def queue_info(q: Queue, rates: Rates, details: bool = False) -> dict[str, Any]:
    sample = rates.of(q)
    policy = q.policy
    ready, unacked = len(q.ready), q.unacked
    messages_rate, ready_rate, unacked_rate = depth_rates([sample])
    info: dict[str, Any] = {
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner is not None,
        "arguments": jsonable(q.arguments),
        "node": NODE,
        "type": queue_type(q),
        "state": "running",
        "consumers": len(q.consumers),
        "consumer_capacity": 1.0 if q.consumers else 0.0,
        "consumer_utilisation": 1.0 if q.consumers else 0.0,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "message_bytes": q.ready_bytes + q.unacked_bytes,
        "message_bytes_ready": q.ready_bytes,
        "message_bytes_unacknowledged": q.unacked_bytes,
        "messages_details": {"rate": messages_rate},
        "messages_ready_details": {"rate": ready_rate},
        "messages_unacknowledged_details": {"rate": unacked_rate},
        "policy": policy.name if policy is not None else None,
        "operator_policy": None,
        "effective_policy_definition": dict(policy.definition) if policy is not None else {},
        "exclusive_consumer_tag": q.exclusive_consumer.tag if q.exclusive_consumer else None,
        "single_active_consumer_tag": q.consumers[0].tag if q.single_active and q.consumers else None,
        "head_message_timestamp": None,
        "recoverable_slaves": None,
        "message_stats": message_stats(queue_counts(q), sample),
    }
    if sample is not None and sample.idle_since is not None and not q.consumers:
        info["idle_since"] = timestamp(sample.idle_since)
    if isinstance(q, StreamQueue):
        info["stream"] = q.stream_stats()  # offsets, first timestamp, size, segments, consumers' offsets
    if details:
        info["consumer_details"] = [consumer_info(c) for c in q.consumers]
        info["incoming"] = []
        info["deliveries"] = []
    return info


def queues_in_order(vhosts: Iterable[VirtualHost]) -> KeptOrder[Queue]:
    """The vhosts' queues in the listings' default order (by vhost, then name), read a slice at a time from
    each vhost's kept order of names: a page costs its rows and one step per vhost."""
    ordered = sorted(vhosts, key=lambda v: v.name)

    def read(start: int, stop: int) -> list[Queue]:
        found: list[Queue] = []
        for v in ordered:
            size = len(v.queues)
            if start < size and stop > 0:
                found += [v.queues[n] for n in v.queues.names_in_order(max(0, start), min(stop, size))]
            start, stop = start - size, stop - size
        return found

    return KeptOrder(sum(len(v.queues) for v in ordered), read)


def queue_fields(rates: Rates) -> dict[str, Callable[[Queue], Any]]:
    """queue_info's fields that sorting and filtering a queue list need, read straight from a queue (each equal
    to queue_info's value): a page of 10,000 queues then builds only the rows it shows."""

    def rate(key: str) -> Callable[[Queue], Any]:
        def read(q: Queue) -> float:
            sample = rates.of(q)
            return sample.rate(key) if sample is not None else 0.0

        return read

    fields: dict[str, Callable[[Queue], Any]] = {
        "name": operator.attrgetter("name"),
        "vhost": operator.attrgetter("vhost"),
        "type": queue_type,
        "state": lambda q: "running",
        "durable": lambda q: q.durable,
        "auto_delete": lambda q: q.auto_delete,
        "exclusive": lambda q: q.exclusive_owner is not None,
        "consumers": lambda q: len(q.consumers),
        "messages": lambda q: len(q.ready) + q.unacked,
        "messages_ready": lambda q: len(q.ready),
        "messages_unacknowledged": lambda q: q.unacked,
        "message_bytes_ready": lambda q: q.ready_bytes,
        "message_bytes_unacknowledged": lambda q: q.unacked_bytes,
        "message_bytes": lambda q: q.ready_bytes + q.unacked_bytes,
        "policy": lambda q: q.policy.name if q.policy is not None else None,
    }

    def count(key: str) -> Callable[[Queue], int]:
        return lambda q: queue_counts(q)[key]

    for key in ("publish", "deliver_get", "ack"):
        fields[f"message_stats.{key}"] = count(key)
        fields[f"message_stats.{key}_details.rate"] = rate(key)
    return fields


# -- exchanges and bindings -------------------------------------------------------------------------------------


def exchange_info(vhost: str, ex: Exchange, rates: Rates | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "name": ex.name,
        "vhost": vhost,
        "type": ex.type_name,
        "durable": ex.durable,
        "auto_delete": ex.auto_delete,
        "internal": ex.internal,
        "arguments": jsonable(ex.arguments),
        "user_who_performed_action": "rmq-internal" if ex.name == "" or ex.name.startswith("amq.") else "",
        "policy": ex.policy.name if ex.policy is not None else None,
    }
    if ex.publish_in or ex.publish_out:  # as RabbitMQ: no message_stats until something was published
        info["message_stats"] = message_stats(exchange_counts(ex), rates.of(ex) if rates is not None else None)
    if isinstance(ex, DelayedExchange):
        # The delayed-message plugin adds messages_delayed to its exchanges' info (rabbit_exchange:info/1
        # appends the type's own items); next_delivery_due (Unix ms, null when none wait) is amqpd's.
        info["messages_delayed"] = ex.waiting_count()
        info["next_delivery_due"] = ex.next_due_ms()
    return info


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """The key naming one binding in /api/bindings/.../{props}: the routing key URL-quoted (with ~ escaped),
    then ~ and a digest of the arguments when there are any (RabbitMQ's pack_binding_props)."""
    if not routing_key and not arguments:
        return "~"
    key = urllib.parse.quote_plus(routing_key).replace("~", "%7E")
    if not arguments:
        return key
    digest = hashlib.sha256(repr(sorted(jsonable(arguments).items())).encode()).digest()[:12]
    return key + "~" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def binding_info(vhost: str, source: str, dest: Queue | Exchange, key: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": dest.name,
        "destination_type": "queue" if isinstance(dest, Queue) else "exchange",
        "routing_key": key,
        "arguments": jsonable(args),
        "properties_key": properties_key(key, args),
    }


def bindings(v: VirtualHost) -> Iterator[dict[str, Any]]:
    """Every binding of a vhost, the implicit default-exchange ones first, as RabbitMQ lists them."""
    for q in v.queues.values():
        yield binding_info(v.name, "", q, q.name, {})
    for name, ex in v.exchanges.items():
        if name == "":
            continue
        for dest, key, args in ex.bindings():
            if isinstance(dest, (Queue, Exchange)):
                yield binding_info(v.name, name, dest, key, args)


# -- connections, channels, consumers -----------------------------------------------------------------------------


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port) if port.isdigit() else 0


def connection_name(s: Session) -> str:
    return f"{s.peer} -> {s.local}"


def connection_info(s: Session, rates: Rates | None = None) -> dict[str, Any]:
    peer_host, peer_port = _split(s.peer)
    host, port = _split(s.local)
    props = jsonable(s.client_properties)
    info: dict[str, Any] = {
        "name": connection_name(s),
        "node": NODE,
        "vhost": s.vhost.name if s.vhost is not None else "/",
        "user": s.user,
        "user_who_performed_action": s.user,
        "state": "blocked" if s.blocked_by_alarm else "running",
        "channels": len(s.channels),
        "peer_host": peer_host,
        "peer_port": peer_port,
        "host": host,
        "port": port,
        "protocol": "AMQP 0-9-1",
        "type": "network",
        "ssl": s.tls,
        "auth_mechanism": "PLAIN",
        "client_properties": props,
        "connected_at": int(s.connected_at * 1000),
        "frame_max": s.frame_max,
        "channel_max": s.channel_max,
        "timeout": s.heartbeat,
        **message_stats(connection_counts(s), rates.of(s) if rates is not None else None),
        "recv_cnt": s.recv_cnt,
        "send_cnt": s.send_cnt,
    }
    if isinstance(props.get("connection_name"), str):
        info["user_provided_name"] = props["connection_name"]
    return info


def channel_name(ch: Channel | Outlet) -> str:
    return f"{connection_name(ch.conn)} ({ch.id})"  # type: ignore[arg-type]


def channel_info(ch: Channel, rates: Rates) -> dict[str, Any]:
    s: Any = ch.conn
    peer_host, peer_port = _split(s.peer)
    return {
        "name": channel_name(ch),
        "number": ch.id,
        "node": NODE,
        "vhost": ch.vhost.name,
        "user": s.user,
        "user_who_performed_action": s.user,
        "connection_details": {"name": connection_name(s), "peer_host": peer_host, "peer_port": peer_port},
        "state": "running",
        "consumer_count": len(ch.consumers),
        "messages_unacknowledged": len(ch.unacked),
        "messages_unconfirmed": len(ch.confirms.pending),
        "messages_uncommitted": len(ch.transaction.publishes),
        "acks_uncommitted": sum(taken_count(taken) for _kind, taken, _requeue in ch.transaction.acks),
        "prefetch_count": ch.prefetch_count,
        "global_prefetch_count": ch.global_prefetch,
        "confirm": ch.confirm,
        "transactional": ch.tx,
        "pending_raft_commands": 0,
        "message_stats": message_stats(channel_counts(ch), rates.of(ch)),
    }


def consumer_info(c: Consumer) -> dict[str, Any]:
    ch = c.channel
    s: Any = ch.conn
    peer_host, peer_port = _split(s.peer)
    return {
        "consumer_tag": c.tag,
        "queue": {"name": c.queue.name, "vhost": c.queue.vhost},
        "channel_details": {
            "name": channel_name(ch),
            "number": ch.id,
            "node": NODE,
            "connection_name": connection_name(s),
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": s.user,
        },
        "ack_required": not c.no_ack,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch,
        "arguments": jsonable(c.arguments),
        "active": True,
        "activity_status": "up",
    }


def sessions(broker: Broker) -> list[Session]:
    return sorted(broker.connections, key=lambda s: s.connected_at)


def channels(broker: Broker) -> Iterator[Channel]:
    for s in sessions(broker):
        yield from s.channels.values()


# -- vhosts, overview, nodes ---------------------------------------------------------------------------------------


def totals(broker: Broker) -> dict[str, int]:
    """Broker-wide message counts since start: closed channels' plus live ones'."""
    t = broker.closed_totals
    counts = {"publish": t.published, "deliver_get": t.delivered, "ack": t.acked, "confirm": t.confirmed}
    for ch in channels(broker):
        for key, value in channel_counts(ch).items():
            counts[key] += value
    return counts


def vhost_info(broker: Broker, v: VirtualHost, rates: Rates | None = None) -> dict[str, Any]:
    ready = sum(len(q.ready) for q in v.queues.values())
    unacked = sum(q.unacked for q in v.queues.values())
    record = broker.access.vhosts.get(v.name)  # description and tags live with the access model
    description, tags = (record.description, list(record.tags)) if record is not None else ("", [])
    return {
        "name": v.name,
        "description": description,
        "tags": tags,
        "metadata": {"description": description, "tags": tags},
        "default_queue_type": "undefined",
        "tracing": False,
        VHOST_FIELD: v.message_ids,
        "cluster_state": {NODE: "running"},
        **message_counts(ready, unacked, _depth_rates(v.queues.values(), rates)),
    }


def message_counts(ready: int, unacked: int, rates: tuple[float, float, float]) -> dict[str, Any]:
    """RabbitMQ's message totals, each with how fast it changes (the queues' sampled lengths, summed)."""
    return {
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "messages_details": {"rate": rates[0]},
        "messages_ready_details": {"rate": rates[1]},
        "messages_unacknowledged_details": {"rate": rates[2]},
    }


def _depth_rates(queues: Iterable[Queue], rates: Rates | None) -> tuple[float, float, float]:
    return depth_rates(rates.of(q) for q in queues) if rates is not None else (0.0, 0.0, 0.0)


def exchange_types() -> list[dict[str, Any]]:
    return [{"name": t, "description": EXCHANGE_DESCRIPTIONS.get(t, ""), "enabled": True} for t in EXCHANGE_TYPES]


def overview(broker: Broker, rates: Rates, listeners: list[dict[str, Any]]) -> dict[str, Any]:
    queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
    ready = sum(len(q.ready) for q in queues)
    unacked = sum(q.unacked for q in queues)
    return {
        "management_version": API_VERSION,
        "rabbitmq_version": API_VERSION,
        "product_name": "amqpd",
        "product_version": __version__,
        "rates_mode": "basic",
        "cluster_name": NODE,
        "node": NODE,
        "disable_stats": False,
        "enable_queue_totals": False,
        "exchange_types": exchange_types(),
        "message_stats": message_stats(totals(broker), rates.total),
        "queue_totals": message_counts(ready, unacked, _depth_rates(queues, rates)),
        "object_totals": {
            "connections": len(broker.connections),
            "channels": sum(len(s.channels) for s in broker.connections),
            "exchanges": sum(len(v.exchanges) for v in broker.vhosts.values()),
            "queues": len(queues),
            "consumers": sum(len(q.consumers) for q in queues),
        },
        "listeners": listeners,
        "contexts": [],
    }


def node_info(broker: Broker) -> dict[str, Any]:
    import resource
    import time

    settings = broker.settings
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "name": NODE,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "uptime": int((time.time() - broker.started_at) * 1000),
        "processors": os.cpu_count() or 1,
        "mem_used": rss,
        "mem_alarm": "memory" in broker.alarms,
        "disk_free": _disk_free(settings.data_dir),
        "disk_free_limit": settings.disk_free_limit,
        "disk_free_alarm": "disk" in broker.alarms,
        "partitions": [],
        "rates_mode": "basic",
        "exchange_types": exchange_types(),
        "auth_mechanisms": [
            {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": True},
            {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": True},
        ],
        "applications": [{"name": "amqpd", "description": "AMQP 0-9-1 broker", "version": __version__}],
        "being_drained": False,
    }


def _disk_free(path: str) -> int | None:
    """Bytes free where the data lives (None without a data directory, or when it cannot be read)."""
    if not path:
        return None
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
