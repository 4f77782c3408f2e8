"""Rebuild durable exchanges, queues, bindings and messages from what the store recovered.

It runs before the listeners open, so no client waits on it; what it reads back all the same (a backlog's
head slice, the messages of queues that need them all up front, a delayed exchange's schedule) is read in
the store's read worker, and only decoded on the loop."""

from __future__ import annotations

import logging
from itertools import chain
from typing import Any

from amqpd.broker.queues.backlog import Backlog
from amqpd.broker.queues.queue import Queue
from amqpd.broker.routing.exchanges import DelayedExchange, make_exchange
from amqpd.broker.routing.exchanges.delayed import HOLDER_PREFIX
from amqpd.broker.stored_message import message_from_record
from amqpd.broker.streams.args import is_stream
from amqpd.broker.streams.stream import StreamQueue

log = logging.getLogger("amqpd.recovery")


async def restore(broker: Any, recovered: Any, crashed: bool = False) -> tuple[int, int]:
    """crashed: the last run ended without a clean stop. Delivered-marks written since its last commit are
    lost, so every message is flagged redelivered (as RabbitMQ does after a crash): a consumer may have
    seen any of them. After a clean stop the flags are exact. Returns (queues, messages) recovered. Timers
    (TTL, delayed releases) start once everything is back: the reads let other work run in between."""
    broker.hold_timers()
    try:
        return await _restore(broker, recovered, crashed)
    finally:
        broker.start_timers()


async def _restore(broker: Any, recovered: Any, crashed: bool) -> tuple[int, int]:
    broker.attach_access(getattr(recovered, "access", None))
    for x in recovered.exchanges:
        vhost = broker.vhosts.get(x["vhost"])
        if vhost is not None and x["name"] not in vhost.exchanges:
            vhost.exchanges[x["name"]] = make_exchange(
                x["type"],
                x["name"],
                durable=True,
                auto_delete=x["auto_delete"],
                internal=x["internal"],
                arguments=x["arguments"],
            )
    count = 0
    for entry in recovered.queues:
        vhost = broker.vhosts.get(entry.vhost)
        if vhost is None:
            continue
        if is_stream(entry.arguments):
            count += _restore_stream(broker, vhost, entry)
            continue
        if entry.name.startswith(HOLDER_PREFIX):
            count += await _restore_delayed(broker, vhost, entry)
            continue
        q: Queue = Queue(
            entry.vhost,
            entry.name,
            durable=True,
            auto_delete=entry.auto_delete,
            arguments=entry.arguments,
            hooks=vhost.hooks,
        )
        q.store_id = entry.queue_id
        if q.dedup is not None:
            q.dedup.attach(broker.store, entry.queue_id, entry.values)
        q.recovered_counts = dict(entry.delivery_counts)
        vhost.queues[entry.name] = q
        count += await _restore_messages(broker, q, entry, crashed)
    for vhost in broker.vhosts.values():  # a durable delayed exchange always has its holder from here on
        for ex in vhost.exchanges.values():
            if isinstance(ex, DelayedExchange) and ex.durable:
                vhost.hold_delayed(ex)
    for b in recovered.bindings:
        vhost = broker.vhosts.get(b["vhost"])
        if vhost is None:
            continue
        source = vhost.exchanges.get(b["source"])
        table = vhost.queues if b["destination_kind"] == "queue" else vhost.exchanges
        dest = table.get(b["destination"])
        if source is not None and dest is not None:
            source.bind(dest, b["routing_key"], b["arguments"])
    broker.policies.load(getattr(recovered, "policies", []))
    broker.parameters.load(getattr(recovered, "parameters", []))
    for name, vhost in list(broker.vhosts.items()):
        broker.apply_policies(name)
        vhost.set_message_ids(vhost.message_ids)  # the queues recovered above take their vhost's setting
    log.debug(
        "recovered %d exchanges, %d queues, %d bindings, %d messages after a %s; %s",
        len(recovered.exchanges),
        len(recovered.queues),
        len(recovered.bindings),
        count,
        "crash" if crashed else "clean stop",
        recovered.stats,
    )
    return len(recovered.queues), count


def _restore_stream(broker: Any, vhost: Any, entry: Any) -> int:
    q = StreamQueue(
        entry.vhost,
        entry.name,
        arguments=entry.arguments,
        hooks=vhost.hooks,
        store=broker.store,
        store_id=entry.queue_id,
    )
    older = entry.unloaded if entry.unloaded_runs is None else entry.unloaded_runs
    q.adopt(chain(older, (rm.offset for rm in entry.messages)), entry.values)
    if q.dedup is not None:
        q.dedup.attach(broker.store, entry.queue_id, entry.values)
    vhost.queues[entry.name] = q
    return len(q.ready)


async def _restore_delayed(broker: Any, vhost: Any, entry: Any) -> int:
    """A delayed exchange's waiting messages (publish/delayed_release.py), a batch at a time; a holder whose
    exchange is gone (deleted in a batch that did not commit the holder's deletion) is deleted now."""
    ex = vhost.exchanges.get(entry.name[len(HOLDER_PREFIX) :])
    store = broker.store
    if not isinstance(ex, DelayedExchange) or not ex.durable:
        store.delete_queue(entry.queue_id)
        return 0
    offsets = [*entry.unloaded, *(rm.offset for rm in entry.messages)]
    known = {rm.offset: rm.record for rm in entry.messages}
    count = 0
    for start in range(0, len(offsets), Backlog.BATCH):
        batch = offsets[start : start + Backlog.BATCH]
        records = {o: known[o] for o in batch if o in known}
        missing = [o for o in batch if o not in records]
        if missing:  # None for one the store cannot give: recover() drops it
            records.update(zip(missing, await store.in_reader(store.read_many, missing), strict=True))
        count += int(broker.delayed.recover(ex, entry.queue_id, batch, records))
    return count


async def _restore_messages(broker: Any, q: Queue, entry: Any, crashed: bool) -> int:
    """Give the queue its recovered messages: as store offsets read back when their turn comes (the head's
    slice now), or (for a queue that needs every message up front: priorities, a byte limit) as messages now."""
    count = len(entry.unloaded) + len(entry.messages)
    store = broker.store
    if q.holds_offsets:
        offsets = [*entry.unloaded, *(rm.offset for rm in entry.messages)]
        flagged = None if crashed else entry.unloaded_delivered | {rm.offset for rm in entry.messages if rm.redelivered}
        if offsets:
            ahead = await store.in_reader(store.read_ahead(offsets[: Backlog.BATCH]))
            q.adopt_backlog(offsets, flagged, ahead)
        return count
    for start in range(0, len(entry.unloaded), Backlog.BATCH):
        batch = entry.unloaded[start : start + Backlog.BATCH]
        ahead = await store.in_reader(store.read_ahead(batch))
        for offset, msg in zip(batch, q.hooks.load(q, batch, ahead), strict=True):  # drops (and logs) unreadable ones
            if msg is None:
                count -= 1
                continue
            q.push(msg, crashed or offset in entry.unloaded_delivered, msg.timestamp_ms)
    for rm in entry.messages:
        q.push(message_from_record(rm.record, rm.offset), rm.redelivered or crashed, rm.record.timestamp_ms)
    return count
