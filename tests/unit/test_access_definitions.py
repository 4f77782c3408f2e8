"""The access part of RabbitMQ's definitions JSON: a document as `rabbitmqctl export_definitions` (3.10.8)
writes it imports, and what amqpd exports imports again to the same model."""

from __future__ import annotations

import pytest

from amqpd.broker.access.control import AccessControl, AccessError
from amqpd.broker.access.definitions import export_access, import_access

# Trimmed from `rabbitmqctl export_definitions` on RabbitMQ 3.10.8 (the user's password is "guest").
EXPORTED = {
    "rabbit_version": "3.10.8",
    "users": [
        {
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "limits": {"max-channels": 2, "max-connections": 1},
            "name": "acclim",
            "password_hash": "qGxPjChjY+kFB62ymVHx2T5FzKllMDybdFwn+k/iJZ6qXGmM",
            "tags": ["monitoring"],
        },
    ],
    "vhosts": [{"name": "tenant", "description": "a tenant", "tags": [], "metadata": {"description": "a tenant"}}],
    "permissions": [{"user": "acclim", "vhost": "tenant", "configure": "^acc\\.", "write": ".*", "read": ""}],
    "topic_permissions": [{"user": "acclim", "vhost": "tenant", "exchange": "amq.topic", "write": "^a", "read": ".*"}],
    "parameters": [{"vhost": "tenant", "component": "vhost-limits", "name": "limits", "value": {"max-queues": 3}}],
    "queues": [],
    "exchanges": [],
    "bindings": [],
    "policies": [],
    "global_parameters": [],
}


def test_a_rabbitmq_export_imports() -> None:
    acl = AccessControl()
    import_access(acl, EXPORTED)
    user = acl.authenticate("acclim", "guest")
    assert user is not None and user.tags == ("monitoring",)
    assert acl.user_limit("acclim", "max-connections") == 1 and acl.user_limit("acclim", "max-channels") == 2
    assert acl.vhosts["tenant"].description == "a tenant"
    assert acl.vhost_limit("tenant", "max-queues") == 3
    assert acl.allowed("acclim", "tenant", "acc.q", "configure") and not acl.allowed("acclim", "tenant", "q", "read")
    assert not acl.topic_allowed("acclim", "tenant", "amq.topic", "b.key", "write")


def test_export_then_import_gives_the_same_model() -> None:
    acl = AccessControl()
    import_access(acl, EXPORTED)
    again = AccessControl()
    import_access(again, export_access(acl))
    assert export_access(again) == export_access(acl)
    assert again.authenticate("acclim", "guest") is not None


def test_a_permission_for_an_unknown_user_is_refused() -> None:
    with pytest.raises(AccessError, match="no such user"):
        import_access(
            AccessControl(),
            {
                "vhosts": [{"name": "/"}],
                "permissions": [{"user": "ghost", "vhost": "/", "configure": "", "write": "", "read": ""}],
            },
        )
