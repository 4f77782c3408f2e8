"""A message read back from the store, as the broker holds it (a leaf module: recovery, backlogs, streams and
delayed exchanges all read records back)."""

from __future__ import annotations

import struct
from typing import Any

from amqpd.broker.message import Message
from amqpd.protocol.fastpath import shortstr
from amqpd.protocol.properties import shared_header

_ROUTES: dict[tuple[str, str], bytes] = {}
_ROUTES_MAX = 4096


def route_of(exchange: str, routing_key: str) -> bytes:
    """The encoded exchange + routing key of a delivery (a backlog read back repeats a few: each once)."""
    key = (exchange, routing_key)
    route = _ROUTES.get(key)
    if route is None:
        if len(_ROUTES) >= _ROUTES_MAX:
            _ROUTES.clear()
        route = _ROUTES[key] = shortstr(exchange) + shortstr(routing_key)
    return route


def message_from_record(record: Any, offset: int) -> Message:
    header = shared_header(record.properties)
    flags = struct.unpack_from(">H", header, 12)[0]
    route = route_of(record.exchange, record.routing_key)
    msg = Message(record.exchange, record.routing_key, route, header, record.body, flags)
    msg.persistent = True
    msg.timestamp_ms = record.timestamp_ms
    msg.store_offset = offset
    msg.pageable = True
    return msg
