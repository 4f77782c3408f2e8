"""Users, vhosts and permissions survive a restart in the catalogue; the defaults are written only once."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqpd.broker.broker import Broker
from amqpd.broker.recovery import restore
from amqpd.config import Settings
from store import MessageStore

pytestmark = pytest.mark.anyio


async def start(path: Path) -> tuple[Broker, MessageStore]:
    store = MessageStore(path, fsync="none")
    recovered = await store.open(load_records=False)
    broker = Broker(Settings(data_dir=str(path)), store=store)
    await restore(broker, recovered)
    return broker, store


async def test_users_vhosts_and_permissions_come_back_after_a_restart(tmp_path: Path) -> None:
    broker, store = await start(tmp_path)
    acl = broker.access
    acl.add_user("alice", "s3cret", ["monitoring"])
    acl.add_user("certonly", None)
    acl.set_user_limits("alice", {"max-connections": 5, "max-channels": -1})
    acl.add_vhost("tenant", "a tenant")
    acl.set_vhost_limits("tenant", {"max-queues": 3})
    acl.set_permissions("alice", "tenant", "^a\\.", "", ".*")
    acl.set_topic_permissions("alice", "tenant", "amq.topic", "^{username}\\.", ".*")
    await store.close()

    broker, store = await start(tmp_path)
    acl = broker.access
    assert broker.authenticate("alice", "s3cret") and not broker.authenticate("alice", "x")
    assert acl.get_user("alice").tags == ("monitoring",)  # type: ignore[union-attr]
    assert acl.get_user("certonly").password_hash == ""  # type: ignore[union-attr]
    assert acl.user_limit("alice", "max-connections") == 5 and acl.user_limit("alice", "max-channels") is None
    assert "tenant" in broker.vhosts and acl.vhosts["tenant"].description == "a tenant"
    assert acl.vhost_limit("tenant", "max-queues") == 3
    assert acl.allowed("alice", "tenant", "a.q", "configure") and not acl.allowed("alice", "tenant", "b", "configure")
    assert acl.topic_allowed("alice", "tenant", "amq.topic", "alice.x", "write")
    assert not acl.topic_allowed("alice", "tenant", "amq.topic", "bob.x", "write")
    await store.close()


async def test_guest_is_created_only_on_a_fresh_data_dir(tmp_path: Path) -> None:
    broker, store = await start(tmp_path)
    assert broker.authenticate("guest", "guest")
    broker.access.delete_user("guest")
    await store.close()
    broker, store = await start(tmp_path)
    assert broker.access.get_user("guest") is None
    assert not broker.authenticate("guest", "guest")
    await store.close()


async def test_a_deleted_vhost_stays_deleted_with_its_durable_queues_and_messages(tmp_path: Path) -> None:
    from amqpd.broker.message import Message

    broker, store = await start(tmp_path)
    broker.access.add_vhost("gone")
    vhost = broker.vhosts["gone"]
    q = vhost.declare_queue(
        "dq", passive=False, durable=True, exclusive=False, auto_delete=False, arguments={}, owner=None
    )
    vhost.declare_exchange("dx", "direct", passive=False, durable=True, auto_delete=False, internal=False, arguments={})
    msg = Message("", "dq", b"\x00\x02dq", b"\x00\x3c\x00\x00" + bytes(8) + b"\x10\x00\x02", b"body", 0x1000)
    msg.persistent = True
    broker.store_message(msg, [q], None)
    await store.flush()
    broker.access.delete_vhost("gone")
    await store.close()

    broker, store = await start(tmp_path)
    assert "gone" not in broker.vhosts and "gone" not in broker.access.vhosts
    broker.access.add_vhost("gone")
    assert broker.vhosts["gone"].queues == {}
    assert "dx" not in broker.vhosts["gone"].exchanges
    await store.close()


async def test_a_vhost_s_message_ids_setting_comes_back_after_a_restart(tmp_path: Path) -> None:
    broker, store = await start(tmp_path)
    broker.access.add_vhost("ids")
    broker.access.set_vhost_message_ids("ids", True)
    broker.access.add_vhost("ids", "described later")  # an update without the setting keeps it
    await store.close()
    broker, store = await start(tmp_path)
    assert broker.access.vhosts["ids"].message_ids and broker.vhosts["ids"].message_ids
    assert not broker.access.vhosts["/"].message_ids
    await store.close()


async def test_a_catalogue_from_before_the_message_ids_column_opens_with_it_off(tmp_path: Path) -> None:
    import sqlite3

    broker, store = await start(tmp_path)
    broker.access.add_vhost("old")
    await store.close()
    catalogue = tmp_path / "catalog.sqlite"
    with sqlite3.connect(catalogue) as db:  # as an older amqpd left it
        db.execute("ALTER TABLE vhosts DROP COLUMN message_ids")
    broker, store = await start(tmp_path)
    assert "old" in broker.vhosts and not broker.vhosts["old"].message_ids
    broker.access.set_vhost_message_ids("old", True)
    await store.close()
    broker, store = await start(tmp_path)
    assert broker.vhosts["old"].message_ids
    await store.close()
