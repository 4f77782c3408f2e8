"""The access model: users with RabbitMQ's password hashes, vhosts, permissions, topic permissions and the
checks the protocol layer asks, as plain objects."""

from __future__ import annotations

import base64
import hashlib

import pytest

from amqpd import errors
from amqpd.broker.access.control import (
    INTERNAL_USER,
    SHA256,
    SHA512,
    AccessControl,
    AccessError,
    check_password,
    hash_password,
)
from amqpd.broker.broker import Broker
from amqpd.config import Settings


def test_password_hash_is_rabbitmqs_sha256_format() -> None:
    salt = b"\x01\x02\x03\x04"
    stored = hash_password("secret", SHA256, salt)
    raw = base64.b64decode(stored)
    assert raw[:4] == salt and raw[4:] == hashlib.sha256(salt + b"secret").digest()


def test_a_hash_made_by_rabbitmq_checks() -> None:
    # A user added with password "guest" on RabbitMQ 3.10.8, from `rabbitmqctl export_definitions`.
    assert check_password("guest", "qGxPjChjY+kFB62ymVHx2T5FzKllMDybdFwn+k/iJZ6qXGmM")
    assert not check_password("guest2", "qGxPjChjY+kFB62ymVHx2T5FzKllMDybdFwn+k/iJZ6qXGmM")


def test_sha512_hashes_from_definitions_check() -> None:
    acl = AccessControl()
    acl.add_user("u", None, password_hash=hash_password("pw", SHA512), hashing_algorithm=SHA512)
    assert acl.authenticate("u", "pw") is not None
    assert acl.authenticate("u", "other") is None


def test_authenticate_needs_the_right_password_and_a_known_user() -> None:
    acl = AccessControl()
    acl.add_user("alice", "pw", "administrator,monitoring")
    user = acl.authenticate("alice", "pw")
    assert user is not None and user.tags == ("administrator", "monitoring")
    assert acl.authenticate("alice", "wrong") is None
    assert acl.authenticate("bob", "pw") is None


def test_a_password_less_user_cannot_log_in_with_any_password() -> None:
    acl = AccessControl()
    acl.add_user("cert-only", None)
    assert acl.authenticate("cert-only", "") is None
    acl.change_password("cert-only", "now")
    assert acl.authenticate("cert-only", "now") is not None
    acl.change_password("cert-only", None)
    assert acl.authenticate("cert-only", "now") is None


def test_permissions_are_unanchored_regexes_and_empty_matches_nothing() -> None:
    acl = AccessControl()
    acl.add_vhost("v")
    acl.add_user("u", "pw")
    acl.set_permissions("u", "v", configure="^cfg", write="", read="rd")
    assert acl.allowed("u", "v", "cfg.q", "configure")
    assert not acl.allowed("u", "v", "x.cfg", "configure")
    assert acl.allowed("u", "v", "x.rd.y", "read")  # re:run searches, as Python's re.search
    assert not acl.allowed("u", "v", "anything", "write")  # "" is read as ^$: only the empty name


def test_refusal_text_is_rabbitmqs_and_names_the_default_exchange_amq_default() -> None:
    acl = AccessControl()
    acl.add_vhost("/")
    acl.add_user("u", "pw")
    acl.set_permissions("u", "/", "", "", "")
    with pytest.raises(errors.ChannelError) as exc:
        acl.check_resource("u", "/", "exchange", "", "write")
    assert exc.value.code == 403
    assert exc.value.text == "access to exchange 'amq.default' in vhost '/' refused for user 'u'"


def test_no_permission_entry_means_no_vhost_access() -> None:
    acl = AccessControl()
    acl.add_vhost("v")
    acl.add_user("u", "pw")
    assert not acl.may_open_vhost("u", "v")
    acl.set_permissions("u", "v", "", "", "")
    assert acl.may_open_vhost("u", "v")  # even with nothing allowed, as RabbitMQ
    acl.clear_permissions("u", "v")
    assert not acl.may_open_vhost("u", "v")


def test_topic_permissions_expand_username_and_vhost_and_default_to_allowed() -> None:
    acl = AccessControl()
    acl.add_vhost("v")
    acl.add_user("u", "pw")
    acl.set_permissions("u", "v")
    assert acl.topic_allowed("u", "v", "amq.topic", "anything", "write")
    acl.set_topic_permissions("u", "v", "amq.topic", write="^{username}\\.", read="^{vhost}\\.")
    assert acl.topic_allowed("u", "v", "amq.topic", "u.orders", "write")
    assert not acl.topic_allowed("u", "v", "amq.topic", "x.orders", "write")
    assert acl.topic_allowed("u", "v", "amq.topic", "v.x", "read")
    assert acl.topic_allowed("u", "v", "other.topic", "x", "write")  # no entry for that exchange
    with pytest.raises(errors.ChannelError) as exc:
        acl.check_topic("u", "v", "amq.topic", "x.orders", "write")
    assert exc.value.text == "access to topic 'x.orders' in exchange 'amq.topic' in vhost 'v' refused for user 'u'"
    acl.clear_topic_permissions("u", "v", "amq.topic")
    assert acl.topic_allowed("u", "v", "amq.topic", "x.orders", "write")


def test_deleting_a_user_or_vhost_takes_its_permissions() -> None:
    acl = AccessControl()
    acl.add_vhost("v")
    acl.add_user("u", "pw")
    acl.set_permissions("u", "v")
    acl.set_topic_permissions("u", "v", "amq.topic")
    acl.delete_vhost("v")
    assert acl.list_permissions() == [] and acl.list_topic_permissions() == []
    acl.add_vhost("v")
    assert not acl.may_open_vhost("u", "v")  # a re-created vhost does not inherit old permissions


def test_bad_requests_are_refused_with_a_reason() -> None:
    acl = AccessControl()
    acl.add_user("u", "pw")
    with pytest.raises(AccessError, match="no such vhost"):
        acl.set_permissions("u", "nope")
    acl.add_vhost("v")
    with pytest.raises(AccessError, match="invalid regular expression"):
        acl.set_permissions("u", "v", configure="(")
    with pytest.raises(AccessError, match="no such user"):
        acl.delete_user("nobody")
    with pytest.raises(AccessError, match="unknown vhost limit"):
        acl.set_vhost_limits("v", {"max-channels": 1})


def test_a_fresh_broker_has_guest_as_administrator_on_the_default_vhost() -> None:
    broker = Broker(Settings(data_dir=""))
    assert broker.authenticate("guest", "guest")
    assert not broker.authenticate("guest", "wrong")
    assert broker.access.get_user("guest").tags == ("administrator",)  # type: ignore[union-attr]
    assert broker.access.may_open_vhost("guest", "/")
    assert list(broker.vhosts) == ["/"]


def test_vhosts_added_and_deleted_at_run_time_exist_in_the_broker() -> None:
    broker = Broker(Settings(data_dir=""))
    broker.access.add_vhost("tenant")
    assert "tenant" in broker.vhosts
    broker.vhosts["tenant"].declare_queue(
        "q", passive=False, durable=False, exclusive=False, auto_delete=False, arguments={}, owner=None
    )
    broker.access.delete_vhost("tenant")
    assert "tenant" not in broker.vhosts


def test_every_change_moves_the_generation_open_channels_recheck_under() -> None:
    acl = AccessControl()
    acl.add_vhost("v")
    acl.add_user("u", "pw")
    before = acl.generation
    acl.set_permissions("u", "v")
    assert acl.generation > before


def test_the_internal_user_logs_in_only_with_the_boot_password_and_may_do_anything() -> None:
    """A shovel's `amqp://` logs in as RabbitMQ's direct connections do: user "none", every permission."""
    ac = AccessControl()
    ac.add_vhost("v")
    assert ac.authenticate(INTERNAL_USER, "guessed") is None
    assert ac.authenticate(INTERNAL_USER, ac.internal_password) is not None
    assert AccessControl().internal_password != ac.internal_password
    assert ac.may_open_vhost(INTERNAL_USER, "v") and not ac.may_open_vhost(INTERNAL_USER, "missing")
    ac.check_resource(INTERNAL_USER, "v", "queue", "anything", "configure")
    assert ac.is_impersonator(INTERNAL_USER)


def test_a_real_user_named_none_is_only_itself() -> None:
    ac = AccessControl()
    ac.add_vhost("v")
    ac.add_user(INTERNAL_USER, "pw")
    assert ac.authenticate(INTERNAL_USER, ac.internal_password) is None
    assert ac.authenticate(INTERNAL_USER, "pw") is not None
    assert not ac.may_open_vhost(INTERNAL_USER, "v") and not ac.is_impersonator(INTERNAL_USER)
    with pytest.raises(errors.ChannelError):
        ac.check_resource(INTERNAL_USER, "v", "queue", "q", "read")
