"""Durable storage for amqpd: append-only segment files, per-queue ack logs, a SQLite catalogue.

The broker talks to the store only through `MessageStore` and the record types below; the store knows
nothing of AMQP (properties stay encoded bytes). On-disk format: FORMAT.md.
"""

from store.message_store import MessageStore
from store.records import AccessRows, MessageRecord, QueueEntry, Recovered, RecoveredMessage
from store.recovery import MissingCatalogue
from store.segment import UnsupportedFormat

__all__ = [
    "AccessRows",
    "MessageRecord",
    "MessageStore",
    "MissingCatalogue",
    "QueueEntry",
    "Recovered",
    "RecoveredMessage",
    "UnsupportedFormat",
]
