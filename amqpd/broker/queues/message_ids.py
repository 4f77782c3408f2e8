"""Time-ordered message ids, offered to applications that opt in per queue (`x-amqpd-message-id: true`) or
per vhost (`amqpd_message_ids: true` on the vhost: every queue in it, present and future, as if declared so).

An id is `max(previous + 1, now_ms << 16)`: normally the publish time in Unix milliseconds shifted left by 16
bits plus a counter within the millisecond, so ids sort by publish time (and by publish order within one
broker run), the scheme the store uses for its records (store/FORMAT.md). A message routed to an opting-in
queue gets it as the header `x-amqpd-message-id` (a long long), and as its `message_id` property — the id in
20 zero-padded decimal digits, so it also sorts as a string — when the publisher set none. The message is
stamped once, before it is stored, so every queue it reaches sees the same id and it survives restarts.
A delayed message (x-delayed-message) is stamped when it is routed, i.e. at the end of its delay.
Ids stay increasing across restarts as long as the wall clock does not step back.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from amqpd.protocol.constants import FLAG_HEADERS, FLAG_MESSAGE_ID
from amqpd.protocol.fastpath import shortstr
from amqpd.protocol.properties import encode_table, rewrite_properties

if TYPE_CHECKING:
    from amqpd.broker.message import Message

ARGUMENT = "x-amqpd-message-id"
HEADER = "x-amqpd-message-id"


class MessageIds:
    """The ids one broker hands out, from its clock (Broker.now_ms)."""

    def __init__(self) -> None:
        self._last = 0

    def next(self, now_ms: int) -> int:
        self._last = max(self._last + 1, now_ms << 16)
        return self._last


def wants_ids(arguments: dict) -> bool:
    return arguments.get(ARGUMENT) is True


def stamp(msg: Message, message_id: int) -> None:
    headers = dict(msg.headers or {})
    headers[HEADER] = message_id
    changes: dict[int, bytes | None] = {FLAG_HEADERS: encode_table(headers)}
    if not msg.flags & FLAG_MESSAGE_ID:
        changes[FLAG_MESSAGE_ID] = shortstr(f"{message_id:020d}")
    header = rewrite_properties(msg.header, msg.size, changes)
    msg.header = header
    msg.flags = struct.unpack_from(">H", header, 12)[0]
    msg._headers = headers  # noqa: SLF001 - the message owns this cache, we just re-encoded it
