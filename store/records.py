"""The values that cross the store's interface. Nothing here knows AMQP: properties stay encoded bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.queue_state import OffsetRuns


@dataclass
class MessageRecord:
    exchange: str
    routing_key: str
    properties: bytes  # the content header's property bytes, verbatim
    body: bytes
    timestamp_ms: int
    expires_at_ms: int | None = None


@dataclass
class RecoveredMessage:
    offset: int
    record: MessageRecord
    redelivered: bool


@dataclass
class QueueEntry:
    """Catalogue row for a durable queue, with the messages it still holds."""

    queue_id: int
    vhost: str
    name: str
    auto_delete: bool
    arguments: dict[str, Any]
    messages: list[RecoveredMessage] = field(default_factory=list)  # offset order; un-acked, un-expired
    # A lazy open (load_records=False): the held offsets whose records were not read, all older than every
    # entry of `messages`; those of them that were delivered. `MessageStore.read_many` reads them.
    unloaded: list[int] = field(default_factory=list)
    # The same for a queue that holds a log (MessageStore's holds_log): its offsets as runs, never one by one.
    unloaded_runs: OffsetRuns | None = None
    unloaded_delivered: set[int] = field(default_factory=set)
    values: dict[str, bytes] = field(default_factory=dict)  # set_queue_value's keys, as last committed
    # How often each held message went back to the queue unacked (MessageStore.set_delivery_count).
    delivery_counts: dict[int, int] = field(default_factory=dict)


@dataclass
class AccessRows:
    """Users, vhosts and permissions as the catalogue holds them (text; JSON for tags and limits).
    `seeded`: the defaults (guest, "/") were written once, on this data dir's first start."""

    seeded: bool = False
    users: list[tuple[Any, ...]] = field(default_factory=list)  # name, password_hash, hashing_algorithm, tags, limits
    vhosts: list[tuple[Any, ...]] = field(default_factory=list)  # name, description, tags, limits, message_ids
    permissions: list[tuple[Any, ...]] = field(default_factory=list)  # user, vhost, configure, write, read
    topic_permissions: list[tuple[Any, ...]] = field(default_factory=list)  # user, vhost, exchange, write, read


@dataclass
class Recovered:
    exchanges: list[dict[str, Any]]
    queues: list[QueueEntry]
    bindings: list[dict[str, Any]]
    stats: dict[str, Any]
    access: AccessRows = field(default_factory=AccessRows)
    policies: list[str] = field(default_factory=list)  # JSON documents (store/catalog.py, policies)
    parameters: list[str] = field(default_factory=list)  # JSON documents (store/catalog.py, parameters)
