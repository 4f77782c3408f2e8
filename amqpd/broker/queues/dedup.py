"""Message deduplication for a queue or stream, with LavinMQ's argument names:

- `x-message-deduplication: true` turns it on;
- `x-deduplication-header`: the header holding a message's id (default: the message_id property);
- `x-cache-size`: how many ids are remembered (default 10,000; the oldest is forgotten first);
- `x-cache-ttl`: for how long an id is remembered, in ms (default: until the cache is full).

A publish whose id was seen within the window is dropped by the queue and still confirmed (acked): to the
publisher it was delivered. Unlike LavinMQ, the window survives a restart: each id is kept with the
durable queue in the store (a queue value written with the next commit, so before the message's confirm).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

from amqpd import errors
from amqpd.broker.arguments import amqp_type_name
from amqpd.broker.message import Message

DEFAULT_CACHE_SIZE = 10_000
PREFIX = "dedup:"  # queue values: one per remembered id
_ENTRY = struct.Struct("<qq")  # when it was seen, when it is forgotten (0: never by time)


def check_dedup_arguments(args: dict, queue: str, vhost: str) -> None:
    def invalid(name: str, detail: str) -> errors.ChannelError:
        return errors.precondition_failed(f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {detail}")

    flag = args.get("x-message-deduplication")
    if flag is not None and not isinstance(flag, bool):
        raise invalid("x-message-deduplication", f"{{unacceptable_type,{amqp_type_name(flag)}}}")
    header = args.get("x-deduplication-header")
    if header is not None and not isinstance(header, str):
        raise invalid("x-deduplication-header", f"{{unacceptable_type,{amqp_type_name(header)}}}")
    for name, minimum in (("x-cache-size", 1), ("x-cache-ttl", 0)):
        value = args.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise invalid(name, f"{{unacceptable_type,{amqp_type_name(value)}}}")
        if value < minimum:
            raise invalid(name, f"{{value_too_small,{value}}}")


class Deduplicator:
    def __init__(self, header: str | None, size: int, ttl_ms: int | None) -> None:
        self.header = header
        self.size = size
        self.ttl_ms = ttl_ms
        self._seen: OrderedDict[str, int] = OrderedDict()  # id -> forgotten at (ms, 0: never), oldest first
        self._store: Any = None
        self._store_id: int | None = None

    @classmethod
    def from_arguments(cls, args: dict) -> Deduplicator | None:
        if args.get("x-message-deduplication") is not True:
            return None
        return cls(
            args.get("x-deduplication-header"), args.get("x-cache-size") or DEFAULT_CACHE_SIZE, args.get("x-cache-ttl")
        )

    def attach(self, store: Any, store_id: int | None, values: dict[str, bytes] | None = None) -> None:
        """Keep the window in the store with the queue; `values` are what it saved before a restart."""
        self._store, self._store_id = store, store_id
        entries = []
        for key, value in (values or {}).items():
            if key.startswith(PREFIX):
                seen, until = _ENTRY.unpack(value)
                entries.append((seen, key[len(PREFIX) :], until))
        for _seen, message_id, until in sorted(entries):
            self._seen[message_id] = until

    def is_duplicate(self, msg: Message, now_ms: int) -> bool:
        """True for a message whose id was seen within the window; otherwise its id is remembered."""
        message_id = self._id_of(msg)
        if message_id is None:
            return False
        until = self._seen.get(message_id)
        if until is not None and (until == 0 or until > now_ms):
            return True
        self._seen.pop(message_id, None)
        until = now_ms + self.ttl_ms if self.ttl_ms is not None else 0
        self._seen[message_id] = until
        self._save(message_id, _ENTRY.pack(now_ms, until))
        while len(self._seen) > self.size:
            forgotten, _ = self._seen.popitem(last=False)
            self._save(forgotten, None)
        return False

    def _id_of(self, msg: Message) -> str | None:
        if self.header is None:
            value: Any = msg.properties().message_id
        else:
            value = (msg.headers or {}).get(self.header) if msg.has_headers else None
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if value is None or isinstance(value, (dict, list)):
            return None
        return str(value)

    def _save(self, message_id: str, value: bytes | None) -> None:
        if self._store is not None and self._store_id is not None:
            self._store.set_queue_value(self._store_id, PREFIX + message_id, value)
