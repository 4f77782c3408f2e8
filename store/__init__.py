"""Durable storage for amqpd: append-only segment files, per-queue ack logs, a SQLite catalogue.

The broker talks to the store only through this module: `MessageStore`, the record types, and the few pieces
of the on-disk layout that the broker's stream code works with directly (a record's fixed fields and encoding,
a frame's header size, the key a stream keeps its first position under). The store knows nothing of AMQP
(properties stay encoded bytes). On-disk format: FORMAT.md.
"""

from typing import TYPE_CHECKING, Any

from store.frame import HEADER_SIZE as FRAME_HEADER_SIZE
from store.queue_reader import FIRST_KEY, FIRST_POSITION, QueueLogReader, QueueNotFound
from store.record_codec import FIXED_AFTER_ID as RECORD_FIXED_AFTER_ID
from store.record_codec import FLAG_EXPIRES as RECORD_FLAG_EXPIRES
from store.record_codec import decode_record, encode_record
from store.records import AccessRows, MessageRecord, QueueEntry, Recovered, RecoveredMessage
from store.segment import UnsupportedFormat

if TYPE_CHECKING:
    from store.message_store import MessageStore
    from store.recovery import MissingCatalogue

# The store itself (its group commit, recovery, SQLite catalogue) is imported when first asked for: a broker that
# keeps nothing on disk only uses the record types above, and starts without it.
_LAZY = {"MessageStore": "store.message_store", "MissingCatalogue": "store.recovery"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'store' has no attribute {name!r}")


__all__ = [
    "FIRST_KEY",
    "FIRST_POSITION",
    "FRAME_HEADER_SIZE",
    "RECORD_FIXED_AFTER_ID",
    "RECORD_FLAG_EXPIRES",
    "AccessRows",
    "MessageRecord",
    "MessageStore",
    "MissingCatalogue",
    "QueueLogReader",
    "QueueNotFound",
    "QueueEntry",
    "Recovered",
    "RecoveredMessage",
    "UnsupportedFormat",
    "decode_record",
    "encode_record",
]
