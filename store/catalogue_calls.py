"""The catalogue's calls (exchanges, bindings, users, vhosts, permissions, policies, runtime parameters): each
becomes a statement of the next group commit, written to SQLite before that batch's files (FORMAT.md,
catalog.sqlite).
Queues are not here: they hold messages, and MessageStore keeps them."""

from __future__ import annotations

from typing import Any

from store.catalog import (
    ACCESS_SEEDED_OP,
    CatalogOp,
    binding_key,
    delete_binding_op,
    delete_exchange_op,
    delete_parameter_op,
    delete_permission_op,
    delete_policy_op,
    delete_topic_permission_op,
    delete_user_ops,
    delete_vhost_ops,
    put_binding_op,
    put_exchange_op,
    put_parameter_op,
    put_permission_op,
    put_policy_op,
    put_topic_permission_op,
    put_user_op,
    put_vhost_op,
)


class CatalogueCalls:
    """The part of MessageStore's interface that only changes the catalogue; `_catalog_op` puts statements
    into the pending batch."""

    def _catalog_op(self, ops: list[CatalogOp]) -> None:
        raise NotImplementedError

    def put_exchange(
        self, vhost: str, name: str, type: str, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> None:
        self._catalog_op([put_exchange_op(vhost, name, type, auto_delete, internal, arguments)])

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._catalog_op([delete_exchange_op(vhost, name)])

    def put_binding(
        self,
        vhost: str,
        source: str,
        destination: str,
        destination_kind: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        key = binding_key(vhost, source, destination, destination_kind, routing_key, arguments)
        self._catalog_op([put_binding_op(key)])

    def delete_binding(
        self,
        vhost: str,
        source: str,
        destination: str,
        destination_kind: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        key = binding_key(vhost, source, destination, destination_kind, routing_key, arguments)
        self._catalog_op([delete_binding_op(key)])

    # Users, vhosts and permissions: written with the next group commit, as the rest of the catalogue.

    def put_user(self, name: str, password_hash: str, hashing_algorithm: str, tags: str, limits: str = "{}") -> None:
        self._catalog_op([put_user_op(name, password_hash, hashing_algorithm, tags, limits)])

    def delete_user(self, name: str) -> None:
        """The user and every permission it held."""
        self._catalog_op(delete_user_ops(name))

    def put_vhost(self, name: str, description: str, tags: str, limits: str, message_ids: bool = False) -> None:
        self._catalog_op([put_vhost_op(name, description, tags, limits, message_ids)])

    def delete_vhost(self, name: str) -> None:
        """The vhost, its permissions, exchanges and bindings; delete its queues first (delete_queue)."""
        self._catalog_op(delete_vhost_ops(name))

    def put_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        self._catalog_op([put_permission_op(user, vhost, configure, write, read)])

    def delete_permission(self, user: str, vhost: str) -> None:
        self._catalog_op([delete_permission_op(user, vhost)])

    def put_topic_permission(self, user: str, vhost: str, exchange: str, write: str, read: str) -> None:
        self._catalog_op([put_topic_permission_op(user, vhost, exchange, write, read)])

    def delete_topic_permission(self, user: str, vhost: str, exchange: str | None) -> None:
        """One exchange's topic permission, or (exchange None) all of the user's in the vhost."""
        self._catalog_op([delete_topic_permission_op(user, vhost, exchange)])

    def mark_access_seeded(self) -> None:
        self._catalog_op([ACCESS_SEEDED_OP])

    # Policies: one JSON document each, opaque to the store.
    def put_policy(self, vhost: str, name: str, document: str) -> None:
        self._catalog_op([put_policy_op(vhost, name, document)])

    def delete_policy(self, vhost: str, name: str) -> None:
        self._catalog_op([delete_policy_op(vhost, name)])

    # Runtime parameters (a global one has component and vhost ""): one JSON document each, opaque too.
    def put_parameter(self, component: str, vhost: str, name: str, document: str) -> None:
        self._catalog_op([put_parameter_op(component, vhost, name, document)])

    def delete_parameter(self, component: str, vhost: str, name: str) -> None:
        self._catalog_op([delete_parameter_op(component, vhost, name)])
