"""Delayed delivery: messages a delayed exchange holds back (exchanges/delayed.py), kept durable through
the store, timed by one timer per exchange, and routed when due.

Durability: a durable delayed exchange has a holder in the store, a queue entry named
`amq.delayed-message/<exchange>` (clients cannot declare `amq.*` queues, so no client queue can collide).
A persistent message published to it is appended to the store for that holder and confirmed after the
fsync that covers it; the exchange then keeps only (due time, offset). The due time is not stored apart:
it is the record's publish time plus its `x-delay` header, both in the record, so a restart after a clean
stop or kill -9 rebuilds the schedule from the records (and a message whose time came while the broker was
down is routed at once). When it is due it is read back, routed, written for the durable queues it reaches
and acked for the holder in the same commit batch, so it is delivered once.

Transient messages, and any message on a non-durable exchange, wait in memory only (lost with the broker,
as everything transient is).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from amqpd.broker.message import Message
from amqpd.broker.publish.publisher import UNATTENDED, Publisher
from amqpd.broker.routing.exchanges.delayed import DELAY_HEADER, DelayedExchange, delay_of
from amqpd.broker.store_reads import read_in_worker
from amqpd.broker.stored_message import message_from_record
from amqpd.protocol.constants import FLAG_HEADERS
from amqpd.protocol.field_tables import table_entries
from amqpd.protocol.methods import MAX_TABLE_DEPTH
from amqpd.protocol.properties import PropertyScan, rewrite_properties
from store import MessageRecord

if TYPE_CHECKING:
    from amqpd.broker.routing.vhost import VirtualHost

log = logging.getLogger("amqpd.delayed")
BATCH = 2_000  # messages routed per timer callback: a burst all due at once does not stall the loop


class Host(Protocol):
    """What delayed delivery needs of the broker (which owns it: this module is below broker.py)."""

    store: Any
    vhosts: dict[str, VirtualHost]
    publisher: Publisher

    def now_ms(self) -> int: ...

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Any: ...

    def body_of(self, msg: Message) -> bytes: ...


class DelayedDelivery:
    def __init__(self, broker: Host) -> None:
        self.broker = broker
        # Unix ms: due times survive restarts, so they are wall-clock times; the broker's clock, which tests
        # inject, so that TTLs and due times move together.
        self.clock = broker.now_ms
        # Releases waiting for their stored messages to be read back, or behind one that is, in order:
        # [exchange, due, records (None: not read yet)]
        self._line: deque[list[Any]] = deque()

    # -- publishing ---------------------------------------------------------------------------------------

    def delay(self, ex: DelayedExchange, msg: Message, delay_ms: int, on_durable: Callable[[], None] | None) -> bool:
        """Hold msg for delay_ms; True when on_durable will fire once it is stored (else the caller confirms)."""
        now = self.clock()
        store = self.broker.store
        if msg.persistent and ex.store_id is not None and store is not None:
            body = msg.body if msg.body is not None else self.broker.body_of(msg)
            record = MessageRecord(msg.exchange, msg.routing_key, msg.header, body, now)
            offset = store.append(record, [ex.store_id], on_durable)
            self._push(ex, now + delay_ms, offset)
            return on_durable is not None
        self._push(ex, now + delay_ms, msg)
        return False

    def _push(self, ex: DelayedExchange, due: int, item: Message | int) -> None:
        ex.schedule.push(due, item)
        if ex.timer_due is None or due < ex.timer_due:
            self._arm(ex)

    def _arm(self, ex: DelayedExchange) -> None:
        if ex.timer is not None:
            ex.timer.cancel()
            ex.timer = None
        due = ex.schedule.next_due()
        ex.timer_due = due
        if due is not None:
            ex.timer = self.broker.schedule(max(0.0, (due - self.clock()) / 1000), lambda: self._on_timer(ex))

    def _on_timer(self, ex: DelayedExchange) -> None:
        self.release_due(ex)

    # -- when messages are due ------------------------------------------------------------------------------

    def release_due(self, ex: DelayedExchange) -> int:
        """Route the messages that are due (at most BATCH; the rest on the next turn); returns how many. The
        stored ones are read back by the store's read worker first (the loop never reads the disk); while a
        read is under way, later releases wait behind it, so messages due in order are routed in order."""
        ex.timer = ex.timer_due = None
        due = ex.schedule.pop_due(self.clock(), BATCH)
        stored = [item for _, item in due if isinstance(item, int)]
        store = self.broker.store
        if (stored or self._line) and store is not None and _loop_running():
            waiting = [ex, due, None if stored else {}]
            self._line.append(waiting)
            if stored:
                done = partial(self._stored_read, waiting)
                read_in_worker(store, "reading delayed messages back", done, self._read_stored, stored)
            self._arm(ex)
            return len(due)
        try:
            self._release(ex, due, self._read_stored(stored))
        finally:
            self._arm(ex)  # whatever went wrong with one message, the rest keep their timer
        return len(due)

    def _stored_read(self, waiting: list[Any], records: dict[int, Any]) -> None:
        """A release's messages are in (one tried again after a failed read may come after later ones): the
        releases at the head of the line that are ready go, in order."""
        waiting[2] = records
        line = self._line
        while line and line[0][2] is not None:
            ex, due, found = line.popleft()
            self._release(ex, due, found)

    def _release(self, ex: DelayedExchange, due: list[tuple[int, Any]], records: dict[int, Any]) -> None:
        vhost = self._vhost_of(ex)
        for _, item in due:
            msg = item if isinstance(item, Message) else self._from_record(item, records.get(item))
            if msg is not None and vhost is not None:
                self._route(vhost, ex, msg)
            if isinstance(item, int) and ex.store_id is not None and self.broker.store is not None:
                self.broker.store.ack(ex.store_id, item)

    def _vhost_of(self, ex: DelayedExchange) -> VirtualHost | None:
        for vhost in self.broker.vhosts.values():
            if vhost.exchanges.get(ex.name) is ex:
                return vhost
        return None

    def _read_stored(self, offsets: list[int]) -> dict[int, MessageRecord | None]:
        """Due messages are scattered over the log (due order is not publish order): read each through the
        sparse index rather than walking the whole stretch between them as read_many would."""
        store = self.broker.store
        if not offsets or store is None:
            return {}
        found: dict[int, MessageRecord | None] = {}
        for offset in offsets:
            try:
                found[offset] = store.read(offset)
            except KeyError:  # gone from the store (damage): dropped and logged by the caller
                found[offset] = None
        return found

    def _from_record(self, offset: int, record: MessageRecord | None) -> Message | None:
        if record is None:
            log.error("a delayed message (store offset %d) could not be read back and was dropped", offset)
            return None
        s = message_from_record(record, offset)
        # A fresh message: the queues it reaches store it for themselves, and its TTL counts from now.
        return Message(s.exchange, s.routing_key, s.route, s.header, s.body or b"", s.flags)

    def _route(self, vhost: VirtualHost, ex: DelayedExchange, msg: Message) -> None:
        """Route as the plugin does when the time comes: with x-delay swapped to -delay (so it is not delayed
        again), to whatever the bindings say now; nobody to route to: it is dropped, as in the plugin."""
        self.broker.publisher.publish(UNATTENDED, vhost, _swap_delay_header(msg), False, 0, released=True)

    # -- recovery -----------------------------------------------------------------------------------------

    def recover(self, ex: DelayedExchange, store_id: int, offsets: list[int], records: dict[int, Any]) -> int:
        """Rebuild the exchange's schedule from its holder's messages (offset order: publish order).
        records: those recovery already read; the rest are read here, a batch at a time."""
        ex.store_id = store_id
        store = self.broker.store
        count = 0
        for start in range(0, len(offsets), BATCH):
            batch = offsets[start : start + BATCH]
            missing = [o for o in batch if o not in records]
            read = dict(zip(missing, store.read_many(missing), strict=True)) if missing and store else {}
            for offset in batch:
                record = records.get(offset) or read.get(offset)
                if record is None:
                    if store is not None:
                        store.ack(store_id, offset)  # unreadable: do not carry it to the next restart
                    continue
                due = record.timestamp_ms + (delay_of(message_from_record(record, offset).headers) or 0)
                ex.schedule.push(due, offset)
                count += 1
        self._arm(ex)
        return count


def _swap_delay_header(msg: Message) -> Message:
    """x-delay := -delay as a signedint, the table sorted by key: what the plugin's swap_delay_header
    (rabbit_misc:set_table_value) sends. Every other value keeps its bytes and type."""
    delay = delay_of(msg.headers)
    if delay is None:
        return msg
    value = b"I" + struct.pack(">i", -delay) if delay <= 2**31 else b"l" + struct.pack(">q", -delay)
    entries = dict(_entries(msg))
    entries[DELAY_HEADER.encode()] = value
    return _with_entries(msg, sorted(entries.items()))


def _entries(msg: Message) -> list[tuple[bytes, bytes]]:
    raw = PropertyScan(msg.header, msg.flags).headers_raw
    return table_entries(raw, MAX_TABLE_DEPTH) if raw else []


def _with_entries(msg: Message, entries: list[tuple[bytes, bytes]]) -> Message:
    body = msg.body or b""
    inner = b"".join(bytes((len(key),)) + key + value for key, value in entries)
    table = struct.pack(">I", len(inner)) + inner if entries else None
    header = rewrite_properties(msg.header, len(body), {FLAG_HEADERS: table})
    flags = struct.unpack_from(">H", header, 12)[0]
    # A fresh message (timestamp 0): stored for its queues from now, its TTL counting from now.
    return Message(msg.exchange, msg.routing_key, msg.route, header, body, flags)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop (unit tests): read now
        return False
    return True
