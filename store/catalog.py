"""The catalogue in SQLite (via aiosqlite): exchanges, queues, bindings, the segment registry and the
latest checkpoint of per-queue state. Message data never goes through here.

Writes are ordered statements (`CatalogOp`) that the store buffers and applies in one transaction per group
commit, before that commit's segment fsync, so a confirmed message never refers to a queue the catalogue
has lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from store.arguments_codec import decode_arguments, encode_arguments
from store.records import AccessRows

CatalogOp = tuple[str, tuple[Any, ...]]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS exchanges (
    vhost TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, auto_delete INTEGER NOT NULL,
    internal INTEGER NOT NULL, arguments TEXT NOT NULL, PRIMARY KEY (vhost, name));
CREATE TABLE IF NOT EXISTS queues (
    queue_id INTEGER PRIMARY KEY, vhost TEXT NOT NULL, name TEXT NOT NULL, auto_delete INTEGER NOT NULL,
    arguments TEXT NOT NULL, UNIQUE (vhost, name));
CREATE TABLE IF NOT EXISTS delivery_counts (
    queue_id INTEGER NOT NULL, "offset" INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (queue_id, "offset"));
CREATE TABLE IF NOT EXISTS bindings (
    vhost TEXT NOT NULL, source TEXT NOT NULL, destination TEXT NOT NULL, destination_kind TEXT NOT NULL,
    routing_key TEXT NOT NULL, arguments TEXT NOT NULL,
    PRIMARY KEY (vhost, source, destination, destination_kind, routing_key, arguments));
CREATE TABLE IF NOT EXISTS segments (
    base_offset INTEGER PRIMARY KEY, end_offset INTEGER NOT NULL, size INTEGER NOT NULL,
    sealed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS queue_state (
    queue_id INTEGER PRIMARY KEY, live BLOB NOT NULL, delivered BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY, password_hash TEXT NOT NULL, hashing_algorithm TEXT NOT NULL, tags TEXT NOT NULL,
    limits TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS vhosts (
    name TEXT PRIMARY KEY, description TEXT NOT NULL, tags TEXT NOT NULL, limits TEXT NOT NULL,
    message_ids INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS permissions (
    user TEXT NOT NULL, vhost TEXT NOT NULL, configure TEXT NOT NULL, write TEXT NOT NULL, read TEXT NOT NULL,
    PRIMARY KEY (user, vhost));
CREATE TABLE IF NOT EXISTS topic_permissions (
    user TEXT NOT NULL, vhost TEXT NOT NULL, exchange TEXT NOT NULL, write TEXT NOT NULL, read TEXT NOT NULL,
    PRIMARY KEY (user, vhost, exchange));
CREATE TABLE IF NOT EXISTS policies (
    vhost TEXT NOT NULL, name TEXT NOT NULL, document TEXT NOT NULL, PRIMARY KEY (vhost, name));
CREATE TABLE IF NOT EXISTS parameters (
    component TEXT NOT NULL, vhost TEXT NOT NULL, name TEXT NOT NULL, document TEXT NOT NULL,
    PRIMARY KEY (component, vhost, name));
CREATE TABLE IF NOT EXISTS queue_values (
    queue_id INTEGER NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (queue_id, key));
CREATE TABLE IF NOT EXISTS checkpoint (
    id INTEGER PRIMARY KEY CHECK (id = 1), next_offset INTEGER NOT NULL, segment_base INTEGER NOT NULL,
    segment_position INTEGER NOT NULL, ack_number INTEGER NOT NULL, last_message_id INTEGER NOT NULL,
    created_ms INTEGER NOT NULL);
"""

# (table, column, definition) of columns newer than their table; _add_missing_columns adds them to old files
ADDED_COLUMNS = [("vhosts", "message_ids", "INTEGER NOT NULL DEFAULT 0")]


@dataclass
class Checkpoint:
    """Everything below `next_offset` and in ack files numbered below `ack_number` is reflected in the
    queue_state rows written with it."""

    next_offset: int = 0
    segment_base: int = 0
    segment_position: int = 0
    ack_number: int = 0
    last_message_id: int = 0
    created_ms: int = 0


@dataclass
class CheckpointData:
    checkpoint: Checkpoint
    # queue_id, live, delivered: offset lists as snapshotted, then (before writing) encoded runs.
    queue_rows: list[tuple[int, Any, Any]]
    segment_rows: list[tuple[int, int, int, bool]]  # base, end offset (exclusive), size, sealed


@dataclass
class CatalogSnapshot:
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    queues: list[tuple[int, str, str, bool, dict[str, Any]]] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    queue_state: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    delivery_counts: dict[int, dict[int, int]] = field(default_factory=dict)  # queue_id -> offset -> count
    segments: dict[int, tuple[int, int, bool]] = field(default_factory=dict)
    checkpoint: Checkpoint | None = None
    next_queue_id: int = 1
    access: AccessRows = field(default_factory=AccessRows)
    policies: list[str] = field(default_factory=list)  # each one's JSON document, as the broker wrote it
    queue_values: dict[int, dict[str, bytes]] = field(default_factory=dict)
    parameters: list[str] = field(default_factory=list)  # runtime parameters' JSON documents, likewise


def put_policy_op(vhost: str, name: str, document: str) -> CatalogOp:
    return "INSERT OR REPLACE INTO policies VALUES (?, ?, ?)", (vhost, name, document)


def delete_policy_op(vhost: str, name: str) -> CatalogOp:
    return "DELETE FROM policies WHERE vhost = ? AND name = ?", (vhost, name)


def put_parameter_op(component: str, vhost: str, name: str, document: str) -> CatalogOp:
    return "INSERT OR REPLACE INTO parameters VALUES (?, ?, ?, ?)", (component, vhost, name, document)


def delete_parameter_op(component: str, vhost: str, name: str) -> CatalogOp:
    return "DELETE FROM parameters WHERE component = ? AND vhost = ? AND name = ?", (component, vhost, name)


def put_exchange_op(
    vhost: str, name: str, type: str, auto_delete: bool, internal: bool, arguments: dict[str, Any]
) -> CatalogOp:
    return (
        "INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?)",
        (vhost, name, type, auto_delete, internal, encode_arguments(arguments)),
    )


def delete_exchange_op(vhost: str, name: str) -> CatalogOp:
    return "DELETE FROM exchanges WHERE vhost = ? AND name = ?", (vhost, name)


def put_delivery_count_op(queue_id: int, offset: int, count: int) -> CatalogOp:
    return "INSERT OR REPLACE INTO delivery_counts VALUES (?, ?, ?)", (queue_id, offset, count)


def delete_delivery_count_op(queue_id: int, offset: int) -> CatalogOp:
    return 'DELETE FROM delivery_counts WHERE queue_id = ? AND "offset" = ?', (queue_id, offset)


def put_queue_ops(
    queue_id: int, vhost: str, name: str, auto_delete: bool, arguments: dict[str, Any]
) -> list[CatalogOp]:
    return [
        (
            "INSERT OR REPLACE INTO queues VALUES (?, ?, ?, ?, ?)",
            (queue_id, vhost, name, auto_delete, encode_arguments(arguments)),
        ),
        # Queue ids are never reused, even after a delete, so old records can't name a new queue.
        (
            "INSERT OR REPLACE INTO meta VALUES ('next_queue_id', max(?, coalesce("
            "(SELECT value FROM meta WHERE key = 'next_queue_id'), 0)))",
            (queue_id + 1,),
        ),
    ]


def delete_queue_ops(queue_id: int) -> list[CatalogOp]:
    return [
        ("DELETE FROM queues WHERE queue_id = ?", (queue_id,)),
        ("DELETE FROM delivery_counts WHERE queue_id = ?", (queue_id,)),
        ("DELETE FROM queue_state WHERE queue_id = ?", (queue_id,)),
        ("DELETE FROM queue_values WHERE queue_id = ?", (queue_id,)),
    ]


def queue_value_ops(values: dict[tuple[int, str], bytes | None]) -> list[CatalogOp]:
    """The last value set for each (queue, key) of a batch: None deletes the key."""
    ops: list[CatalogOp] = []
    for (queue_id, key), value in values.items():
        if value is None:
            ops.append(("DELETE FROM queue_values WHERE queue_id = ? AND key = ?", (queue_id, key)))
        else:
            ops.append(("INSERT OR REPLACE INTO queue_values VALUES (?, ?, ?)", (queue_id, key, value)))
    return ops


def binding_key(
    vhost: str, source: str, destination: str, destination_kind: str, routing_key: str, arguments: dict[str, Any]
) -> tuple[Any, ...]:
    if destination_kind not in ("queue", "exchange"):
        raise ValueError(f"destination_kind must be 'queue' or 'exchange', not {destination_kind!r}")
    return (vhost, source, destination, destination_kind, routing_key, encode_arguments(arguments))


def put_binding_op(key: tuple[Any, ...]) -> CatalogOp:
    return "INSERT OR REPLACE INTO bindings VALUES (?, ?, ?, ?, ?, ?)", key


def delete_binding_op(key: tuple[Any, ...]) -> CatalogOp:
    return (
        "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination = ? AND destination_kind = ?"
        " AND routing_key = ? AND arguments = ?",
        key,
    )


# -- access control: users, vhosts, permissions (rows of plain text; the broker gives them meaning) --------

ACCESS_SEEDED_OP: CatalogOp = ("INSERT OR REPLACE INTO meta VALUES ('access_seeded', 1)", ())


def put_user_op(name: str, password_hash: str, hashing_algorithm: str, tags: str, limits: str = "{}") -> CatalogOp:
    return (
        "INSERT OR REPLACE INTO users VALUES (?, ?, ?, ?, ?)",
        (name, password_hash, hashing_algorithm, tags, limits),
    )


def delete_user_ops(name: str) -> list[CatalogOp]:
    return [
        ("DELETE FROM users WHERE name = ?", (name,)),
        ("DELETE FROM permissions WHERE user = ?", (name,)),
        ("DELETE FROM topic_permissions WHERE user = ?", (name,)),
    ]


def put_vhost_op(name: str, description: str, tags: str, limits: str, message_ids: bool = False) -> CatalogOp:
    return (
        "INSERT OR REPLACE INTO vhosts (name, description, tags, limits, message_ids) VALUES (?, ?, ?, ?, ?)",
        (name, description, tags, limits, int(message_ids)),
    )


def delete_vhost_ops(name: str) -> list[CatalogOp]:
    """The vhost, its permissions and its exchanges and bindings (its queues go one by one, with their
    messages, through delete_queue_ops)."""
    return [
        ("DELETE FROM vhosts WHERE name = ?", (name,)),
        ("DELETE FROM permissions WHERE vhost = ?", (name,)),
        ("DELETE FROM topic_permissions WHERE vhost = ?", (name,)),
        ("DELETE FROM exchanges WHERE vhost = ?", (name,)),
        ("DELETE FROM bindings WHERE vhost = ?", (name,)),
    ]


def put_permission_op(user: str, vhost: str, configure: str, write: str, read: str) -> CatalogOp:
    return "INSERT OR REPLACE INTO permissions VALUES (?, ?, ?, ?, ?)", (user, vhost, configure, write, read)


def delete_permission_op(user: str, vhost: str) -> CatalogOp:
    return "DELETE FROM permissions WHERE user = ? AND vhost = ?", (user, vhost)


def put_topic_permission_op(user: str, vhost: str, exchange: str, write: str, read: str) -> CatalogOp:
    return "INSERT OR REPLACE INTO topic_permissions VALUES (?, ?, ?, ?, ?)", (user, vhost, exchange, write, read)


def delete_topic_permission_op(user: str, vhost: str, exchange: str | None) -> CatalogOp:
    if exchange is None:
        return "DELETE FROM topic_permissions WHERE user = ? AND vhost = ?", (user, vhost)
    return (
        "DELETE FROM topic_permissions WHERE user = ? AND vhost = ? AND exchange = ?",
        (user, vhost, exchange),
    )


class Catalog:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._db: aiosqlite.Connection | None = None

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("catalogue is not open")
        return self._db

    async def open(self) -> None:
        self._db = await aiosqlite.connect(self._path)
        # WAL with synchronous=FULL: each commit is fsync'd, and readers never block the writer.
        await self.db.execute("PRAGMA journal_mode=WAL")
        await self.db.execute("PRAGMA synchronous=FULL")
        await self.db.executescript(SCHEMA)
        await self._add_missing_columns()
        await self.db.commit()

    async def _add_missing_columns(self) -> None:
        """Columns added after a table was first created: a catalogue from an older amqpd gets them with
        their defaults (CREATE TABLE IF NOT EXISTS leaves an existing table as it was)."""
        for table, column, definition in ADDED_COLUMNS:
            names = {row[1] for row in await self._rows(f"PRAGMA table_info({table})")}
            if column not in names:
                await self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None

    async def apply(self, ops: list[CatalogOp]) -> None:
        """All of them or (on an error, e.g. a full disk) none: the caller may apply them again later."""
        try:
            for sql, params in ops:
                await self.db.execute(sql, params)
            await self.db.commit()
        except BaseException:
            await self.db.rollback()
            raise

    async def load(self) -> CatalogSnapshot:
        snap = CatalogSnapshot()
        for row in await self._rows("SELECT vhost, name, type, auto_delete, internal, arguments FROM exchanges"):
            vhost, name, type_, auto_delete, internal, arguments = row
            snap.exchanges.append(
                {
                    "vhost": vhost,
                    "name": name,
                    "type": type_,
                    "auto_delete": bool(auto_delete),
                    "internal": bool(internal),
                    "arguments": decode_arguments(arguments),
                }
            )
        for qid, vhost, name, auto_delete, arguments in await self._rows(
            "SELECT queue_id, vhost, name, auto_delete, arguments FROM queues ORDER BY queue_id"
        ):
            snap.queues.append((qid, vhost, name, bool(auto_delete), decode_arguments(arguments)))
        for vhost, source, dest, kind, rkey, arguments in await self._rows("SELECT * FROM bindings"):
            snap.bindings.append(
                {
                    "vhost": vhost,
                    "source": source,
                    "destination": dest,
                    "destination_kind": kind,
                    "routing_key": rkey,
                    "arguments": decode_arguments(arguments),
                }
            )
        for qid, key, value in await self._rows("SELECT queue_id, key, value FROM queue_values"):
            snap.queue_values.setdefault(qid, {})[key] = bytes(value)
        await self._load_state(snap)
        await self._load_access(snap.access)
        snap.policies = [r[0] for r in await self._rows("SELECT document FROM policies ORDER BY vhost, name")]
        snap.parameters = [
            r[0] for r in await self._rows("SELECT document FROM parameters ORDER BY component, vhost, name")
        ]
        return snap

    async def _load_access(self, rows: AccessRows) -> None:
        rows.seeded = bool(await self._rows("SELECT value FROM meta WHERE key = 'access_seeded'"))
        rows.users = [tuple(r) for r in await self._rows("SELECT * FROM users ORDER BY name")]
        rows.vhosts = [
            tuple(r)
            for r in await self._rows("SELECT name, description, tags, limits, message_ids FROM vhosts ORDER BY name")
        ]
        rows.permissions = [tuple(r) for r in await self._rows("SELECT * FROM permissions")]
        rows.topic_permissions = [tuple(r) for r in await self._rows("SELECT * FROM topic_permissions")]

    async def _load_state(self, snap: CatalogSnapshot) -> None:
        for qid, live, delivered in await self._rows("SELECT queue_id, live, delivered FROM queue_state"):
            snap.queue_state[qid] = (live, delivered)
        for qid, offset, count in await self._rows('SELECT queue_id, "offset", count FROM delivery_counts'):
            snap.delivery_counts.setdefault(qid, {})[offset] = count
        for base, end_offset, size, sealed in await self._rows("SELECT * FROM segments"):
            snap.segments[base] = (end_offset, size, bool(sealed))
        rows = await self._rows(
            "SELECT next_offset, segment_base, segment_position, ack_number,"
            " last_message_id, created_ms FROM checkpoint"
        )
        if rows:
            snap.checkpoint = Checkpoint(*rows[0])
        rows = await self._rows("SELECT value FROM meta WHERE key = 'next_queue_id'")
        max_queue = max((q[0] for q in snap.queues), default=0)
        snap.next_queue_id = max(rows[0][0] if rows else 1, max_queue + 1)

    async def write_checkpoint(self, data: CheckpointData) -> None:
        cp = data.checkpoint
        db = self.db
        await db.execute("DELETE FROM queue_state")
        await db.executemany("INSERT INTO queue_state VALUES (?, ?, ?)", data.queue_rows)
        await db.execute("DELETE FROM segments")
        await db.executemany("INSERT INTO segments VALUES (?, ?, ?, ?)", data.segment_rows)
        await db.execute(
            "INSERT OR REPLACE INTO checkpoint VALUES (1, ?, ?, ?, ?, ?, ?)",
            (cp.next_offset, cp.segment_base, cp.segment_position, cp.ack_number, cp.last_message_id, cp.created_ms),
        )
        await db.commit()

    async def _rows(self, sql: str) -> list[Any]:
        async with self.db.execute(sql) as cursor:
            return list(await cursor.fetchall())
