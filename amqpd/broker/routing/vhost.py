"""A virtual host: its exchanges, queues and bindings, declared and deleted with RabbitMQ's checks,
and routing of published messages to queues."""

from __future__ import annotations

import base64
import os
from collections.abc import Hashable
from typing import Any, Protocol

from amqpd import errors
from amqpd.broker.arguments import (
    EXCHANGE_EQUIVALENCE_ARGS,
    QUEUE_EQUIVALENCE_ARGS,
    check_equivalent_args,
    check_queue_arguments,
    check_queue_type,
    check_server_named,
    inequivalent,
)
from amqpd.broker.message import Message
from amqpd.broker.queues.dedup import check_dedup_arguments
from amqpd.broker.queues.message_ids import wants_ids
from amqpd.broker.queues.queue import Queue, QueueHooks
from amqpd.broker.routing.exchanges import EXCHANGE_TYPES, ROUTING_TYPES, DelayedExchange, Exchange, make_exchange
from amqpd.broker.routing.exchanges.delayed import check_delayed_type, holder_name
from amqpd.broker.routing.plan import PublishPlan
from amqpd.broker.routing.queue_table import QueueTable
from amqpd.broker.routing.route_cache import RouteCache
from amqpd.broker.streams.args import check_stream_declaration, is_stream
from amqpd.broker.streams.stream import StreamQueue

ROUTE_CACHE_MAX = 10_000

STANDARD_EXCHANGES = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.topic", "topic", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
)


REPLY_TO = "amq.rabbitmq.reply-to"
REPLY_TO_PREFIX = REPLY_TO + "."


class DefaultExchange(Exchange):
    """The nameless direct exchange every queue is implicitly bound to by its own name; it also
    reaches direct reply-to consumers by their amq.rabbitmq.reply-to.<token> names."""

    type_name = "direct"

    def __init__(self, queues: dict[str, Queue], replies: dict[str, Queue]) -> None:
        super().__init__("", durable=True)
        self._queues = queues
        self._replies = replies

    def route(self, routing_key: str, headers: dict | None = None) -> list:
        q = self._queues.get(routing_key)
        if q is None and routing_key.startswith(REPLY_TO_PREFIX):
            q = self._replies.get(routing_key[len(REPLY_TO_PREFIX) :])
        return [q] if q is not None else []


def server_generated_name(prefix: str) -> str:
    """'amq.gen-' + 22 URL-safe base64 characters, the shape RabbitMQ uses."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class DeclareChecks(Protocol):
    """The permission checks a declaration makes at RabbitMQ's points (the channel, for its user)."""

    def may_configure(self, kind: str, name: str) -> None: ...
    def may_create(self, kind: str, name: str, arguments: dict) -> None: ...


class VirtualHost:
    def __init__(self, name: str, hooks: QueueHooks | None = None, store: Any = None) -> None:
        self.name = name
        self.hooks = hooks or QueueHooks()
        self.store = store
        self.queues = QueueTable()
        self.replies: dict[str, Queue] = {}  # direct reply-to: token -> the requester's private queue
        # Exclusive queues by owning connection, so that closing one connection does not look at every queue.
        self._exclusive: dict[object, dict[Queue, None]] = {}
        self.exchanges: dict[str, Exchange] = {"": DefaultExchange(self.queues, self.replies)}
        # Publish plans (routes and the steps on them) per (exchange, routing key): dropped whenever bindings,
        # queues, exchanges or policies change.
        self._route_cache: RouteCache[tuple[str, str], PublishPlan] = RouteCache(ROUTE_CACHE_MAX)
        self.message_ids = False  # every queue stamps time-ordered ids (message_ids.py), set per vhost
        for xname, xtype, internal in STANDARD_EXCHANGES:
            self.exchanges[xname] = make_exchange(xtype, xname, durable=True, internal=internal)

    def set_message_ids(self, on: bool) -> None:
        """The vhost's opt-in to time-ordered message ids; a queue declared with the argument keeps them."""
        self.message_ids = on
        for q in self.queues.values():
            q.stamps_ids = on or wants_ids(q.arguments)
        self._route_cache.clear()  # a publish plan records whether its queues stamp ids

    # -- lookups with RabbitMQ's errors -----------------------------------------------------------------

    def exchange(self, name: str) -> Exchange:
        ex = self.exchanges.get(name)
        if ex is None:
            raise errors.not_found(f"no exchange '{name}' in vhost '{self.name}'")
        return ex

    def queue(self, name: str, owner: object = None) -> Queue:
        q = self.queues.get(name)
        if q is None:
            raise errors.not_found(f"no queue '{name}' in vhost '{self.name}'")
        if owner is not None:
            self.check_exclusive(q, owner)
        return q

    def check_exclusive(self, q: Queue, owner: object) -> None:
        if q.exclusive_owner is not None and q.exclusive_owner is not owner:
            raise self._locked(q)

    def _locked(self, q: Queue) -> errors.ChannelError:
        return errors.resource_locked(
            f"cannot obtain exclusive access to locked queue '{q.name}' in vhost '{self.name}'. "
            "It could be originally declared on another connection or the exclusive property value does "
            "not match that of the original declaration."
        )

    # -- exchanges ----------------------------------------------------------------------------------------

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        *,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict,
        checks: DeclareChecks | None = None,
    ) -> Exchange:
        # The order of the checks is RabbitMQ's: type, default exchange, configure permission, then (only for a
        # new one) the name and the permissions its alternate exchange needs.
        if passive:
            if name == "":
                raise self._reserved("exchange", name)
            return self.exchange(name)
        if type_name not in EXCHANGE_TYPES:
            raise errors.command_invalid(f"unknown exchange type '{type_name}'")
        if name == "":
            raise self._reserved("exchange", name)
        if checks is not None:
            checks.may_configure("exchange", name)
        if type_name == DelayedExchange.type_name:  # the plugin validates before looking for an existing one
            check_delayed_type(arguments, ROUTING_TYPES)
        existing = self.exchanges.get(name)
        if existing is not None:
            self._check_exchange_equivalent(existing, type_name, durable, auto_delete, internal, arguments)
            return existing
        if name.startswith("amq."):
            raise self._reserved("exchange", name)
        if checks is not None:
            checks.may_create("exchange", name, arguments)
        EXCHANGE_TYPES[type_name].check_arguments(arguments)  # the type's validate/1, in rabbit_exchange:declare
        ex = make_exchange(
            type_name, name, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments
        )
        self.exchanges[name] = ex
        self.hooks.created(self.name, ex)
        if durable and self.store is not None:
            self.store.put_exchange(self.name, name, type_name, auto_delete, internal, arguments)
            if isinstance(ex, DelayedExchange):
                self.hold_delayed(ex)
        return ex

    def hold_delayed(self, ex: DelayedExchange) -> None:
        """A durable delayed exchange keeps its persistent waiting messages in the store, held by a store
        queue of its own (see publish/delayed_release.py); recovery finds it again by name."""
        if self.store is not None and ex.store_id is None:
            ex.store_id = self.store.put_queue(self.name, holder_name(ex.name), False, {})

    def _reserved(self, kind: str, name: str) -> errors.ChannelError:
        if name == "":
            return errors.access_refused("operation not permitted on the default exchange")
        return errors.access_refused(f"{kind} name '{name}' contains reserved prefix 'amq.*'")

    def _check_exchange_equivalent(
        self, ex: Exchange, type_name: str, durable: bool, auto_delete: bool, internal: bool, arguments: dict
    ) -> None:
        for arg, new, old in (
            ("type", type_name, ex.type_name),
            ("durable", durable, ex.durable),
            ("auto_delete", auto_delete, ex.auto_delete),
            ("internal", internal, ex.internal),
        ):
            if new != old:
                raise inequivalent("exchange", ex.name, self.name, arg, new, old)
        keys = EXCHANGE_EQUIVALENCE_ARGS + ex.equivalence_args
        check_equivalent_args("exchange", ex.name, self.name, keys, arguments, ex.arguments)

    def delete_exchange(self, name: str, if_unused: bool) -> None:
        if name == "":
            raise self._reserved("exchange", name)
        if name.startswith("amq."):
            raise errors.access_refused(f"deletion of system exchange '{name}' in vhost '{self.name}' not allowed")
        ex = self.exchanges.get(name)
        if ex is None:
            return  # RabbitMQ 3.10: deleting a missing exchange is OK
        if if_unused and ex.has_bindings():
            raise errors.precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
        self._remove_exchange(ex)

    def _remove_exchange(self, ex: Exchange) -> None:
        del self.exchanges[ex.name]
        for dest, key, args in ex.bindings():
            self._forget_binding(ex, dest, key, args)
        self._unbind_everywhere(ex)
        if ex.durable and self.store is not None:
            self.store.delete_exchange(self.name, ex.name)
        if isinstance(ex, DelayedExchange):
            ex.drop_waiting()
            if ex.store_id is not None and self.store is not None:
                self.store.delete_queue(ex.store_id)
        self._route_cache.clear()

    def _unbind_everywhere(self, dest: Queue | Exchange) -> None:
        """Drop every binding to dest, from the store too: a queue or exchange declared again later under
        the same name must not inherit them at the next restart."""
        for ex in list(self.exchanges.values()):
            for _, key, args in ex.bindings_to(dest):
                self._forget_binding(ex, dest, key, args)
            if ex.unbind_all(dest):
                self._maybe_auto_delete(ex)

    def _maybe_auto_delete(self, ex: Exchange) -> None:
        if ex.auto_delete and not ex.has_bindings() and self.exchanges.get(ex.name) is ex:
            self._remove_exchange(ex)

    # -- queues -------------------------------------------------------------------------------------------

    def declare_queue(
        self,
        name: str,
        *,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict,
        owner: object,
        checks: DeclareChecks | None = None,
    ) -> Queue:
        if passive:
            return self.queue(name, owner)
        if not name:
            check_server_named(arguments)
            name = server_generated_name("amq.gen-")
        elif name.startswith("amq."):
            raise self._reserved("queue", name)
        if checks is not None:
            checks.may_configure("queue", name)
        check_queue_arguments(arguments, name, self.name)
        check_queue_type(arguments, name, self.name, durable, exclusive, auto_delete)
        if is_stream(arguments):
            check_stream_declaration(arguments, name, self.name, durable, exclusive, auto_delete)
        check_dedup_arguments(arguments, name, self.name)
        durable = durable and not exclusive  # RabbitMQ: an exclusive queue dies with its connection anyway
        existing = self.queues.get(name)
        if existing is not None:
            self._check_queue_equivalent(existing, durable, exclusive, auto_delete, arguments, owner)
            existing.touch()
            return existing
        if checks is not None:
            checks.may_create("queue", name, arguments)  # the vhost's queue limit, the dead-letter exchange
        if is_stream(arguments):
            return self._declare_stream(name, arguments)
        q: Queue = Queue(
            self.name,
            name,
            durable=durable,
            exclusive_owner=owner if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
            hooks=self.hooks,
        )
        q.stamps_ids = q.stamps_ids or self.message_ids
        self.queues[name] = q
        if exclusive:
            self._exclusive.setdefault(owner, {})[q] = None
        self.hooks.created(self.name, q)
        q.touch()
        self._route_cache.clear()
        if durable and self.store is not None and not exclusive:
            q.store_id = self.store.put_queue(self.name, name, auto_delete, arguments)
        if q.dedup is not None:
            q.dedup.attach(self.store, q.store_id)
        return q

    def _declare_stream(self, name: str, arguments: dict) -> Queue:
        store_id = self.store.put_queue(self.name, name, False, arguments) if self.store is not None else None
        q = StreamQueue(self.name, name, arguments=arguments, hooks=self.hooks, store=self.store, store_id=store_id)
        q.stamps_ids = q.stamps_ids or self.message_ids
        if q.dedup is not None:
            q.dedup.attach(self.store, store_id)
        self.queues[name] = q
        self._route_cache.clear()
        return q

    def _check_queue_equivalent(
        self, q: Queue, durable: bool, exclusive: bool, auto_delete: bool, arguments: dict, owner: object
    ) -> None:
        self.check_exclusive(q, owner)
        if q.durable != durable:
            raise inequivalent("queue", q.name, self.name, "durable", durable, q.durable)
        if q.auto_delete != auto_delete:
            raise inequivalent("queue", q.name, self.name, "auto_delete", auto_delete, q.auto_delete)
        if (q.exclusive_owner is not None) != exclusive:
            raise self._locked(q)
        check_equivalent_args("queue", q.name, self.name, QUEUE_EQUIVALENCE_ARGS, arguments, q.arguments)

    def delete_queue(self, name: str, *, if_unused: bool, if_empty: bool, owner: object) -> int:
        q = self.queues.get(name)
        if q is None:
            return 0
        self.check_exclusive(q, owner)
        if if_unused and q.consumers:
            raise errors.precondition_failed(f"queue '{name}' in vhost '{self.name}' in use")
        if if_empty and q.ready:
            raise errors.precondition_failed(f"queue '{name}' in vhost '{self.name}' is not empty")
        return self.remove_queue(q)

    def remove_queue(self, q: Queue) -> int:
        """Delete a queue: bindings go, consumers are cancelled, its messages are dropped."""
        if self.queues.get(q.name) is not q:
            return 0
        del self.queues[q.name]
        self._forget_exclusive(q)
        count = 0 if q.is_stream else len(q.ready)  # RabbitMQ's delete-ok counts no stream messages
        self._unbind_everywhere(q)
        for consumer in list(q.consumers):
            consumer.channel.cancel_by_server(consumer)
        q.consumers.clear()
        q.close()
        for entry in q.purge():
            self.hooks.settled(q, entry)
        if q.store_id is not None and self.store is not None:
            self.store.delete_queue(q.store_id)
        self._route_cache.clear()
        return count

    def purge_queue(self, name: str, owner: object) -> int:
        q = self.queue(name, owner)
        if q.is_stream:
            raise errors.not_implemented(
                f"queue.purge not supported by stream queues queue '{name}' in vhost '{self.name}'"
            )
        count = q.message_count
        for entry in q.purge():
            self.hooks.settled(q, entry)
        return count

    # -- bindings -----------------------------------------------------------------------------------------

    def bind(self, source: str, dest: Queue | Exchange, routing_key: str, arguments: dict) -> None:
        ex = self._bindable_source(source)
        if ex.bind(dest, routing_key, arguments):
            self._route_cache.clear()
            self._persist_binding(ex, dest, routing_key, arguments, add=True)

    def unbind(
        self, source: str, dest: Queue | Exchange | None, routing_key: str, arguments: dict, owner: object = None
    ) -> None:
        """As RabbitMQ 3.10: a binding that does not exist (its exchange or queue gone too) is unbound OK;
        only an existing binding to another connection's exclusive queue is refused (405)."""
        if source == "":
            raise self._reserved("exchange", "")
        ex = self.exchanges.get(source)
        if ex is None or dest is None or not ex.is_bound(dest, routing_key, arguments):
            return
        if owner is not None and isinstance(dest, Queue):
            self.check_exclusive(dest, owner)
        if ex.unbind(dest, routing_key, arguments):
            self._route_cache.clear()
            self._persist_binding(ex, dest, routing_key, arguments, add=False)
            self._maybe_auto_delete(ex)

    def _bindable_source(self, source: str) -> Exchange:
        if source == "":
            raise self._reserved("exchange", "")
        return self.exchange(source)

    def _forget_binding(self, ex: Exchange, dest: Hashable, key: str, args: dict) -> None:
        if isinstance(dest, (Queue, Exchange)):
            self._persist_binding(ex, dest, key, args, add=False)

    def _persist_binding(self, ex: Exchange, dest: Queue | Exchange, key: str, args: dict, add: bool) -> None:
        if self.store is None or not ex.durable or not dest.durable:
            return
        if isinstance(dest, Queue) and dest.store_id is None:
            return
        kind = "queue" if isinstance(dest, Queue) else "exchange"
        op = self.store.put_binding if add else self.store.delete_binding
        op(self.name, ex.name, dest.name, kind, key, args)

    # -- routing ------------------------------------------------------------------------------------------

    def route(self, ex: Exchange, msg: Message) -> list[Queue]:
        """The queues a message goes to: each once, following exchange-to-exchange bindings,
        alternate exchanges and the CC/BCC headers. Cached per (exchange, routing key) whatever the
        properties, unless the headers name extra routing keys or a headers exchange is on the way."""
        return self.plan_for(ex, msg).queues

    def plan_for(self, ex: Exchange, msg: Message) -> PublishPlan:
        """The publish plan for this message (routing/plan.py): the cached one of its exchange and routing key,
        or, when its headers change its route, one made for it alone."""
        if msg.bcc or msg.may_carry_cc:
            headers = msg.headers or {}
            keys = [msg.routing_key, *_string_list(headers.get("CC")), *_string_list(headers.get("BCC")), *msg.bcc]
            return PublishPlan(ex, *self._route_uncached(ex, keys, headers))
        plan = self.plan(ex, msg.routing_key)
        if plan.needs_headers and msg.has_headers:
            return PublishPlan(ex, *self._route_uncached(ex, [msg.routing_key], msg.headers))
        return plan

    def route_key(self, ex: Exchange, routing_key: str) -> list[Queue]:
        """The queues a message without headers goes to (cached; callers must not change the list)."""
        return self.plan(ex, routing_key).queues

    def plan(self, ex: Exchange, routing_key: str) -> PublishPlan:
        """The publish plan of a message whose headers do not change its route (cached); plan.needs_headers
        says whether a message with headers may go elsewhere."""
        key = (ex.name, routing_key)
        plan = self._route_cache.get(key)
        if plan is None:
            plan = PublishPlan(ex, *self._route_uncached(ex, [routing_key], None))
            self._route_cache.put(key, plan)
        return plan

    def _route_uncached(self, ex: Exchange, keys: list[str], headers: dict | None) -> tuple[list[Queue], bool]:
        """The queues, and whether an exchange on the way routes by headers."""
        found: dict[Queue, None] = {}
        seen: set[Exchange] = set()
        self._visit(ex, keys, headers, found, seen)
        return list(found), any(e.needs_headers for e in seen)

    def _visit(self, ex: Exchange, keys: list[str], headers: dict | None, found: dict, seen: set) -> None:
        if ex in seen:
            return
        seen.add(ex)
        matched = False
        for key in keys:
            for dest in ex.route(key, headers):
                matched = True
                if isinstance(dest, Queue):
                    found[dest] = None
                elif isinstance(dest, Exchange):
                    self._visit(dest, keys, headers, found, seen)
        alternate = ex.arguments.get("alternate-exchange", ex.policy_alternate)
        if not matched and isinstance(alternate, str):
            ae = self.exchanges.get(alternate)
            if ae is not None:
                self._visit(ae, keys, headers, found, seen)

    def clear_route_cache(self) -> None:
        """Routing or the steps on a route changed without a binding changing (policies: an alternate exchange,
        a queue's limits or TTL)."""
        self._route_cache.clear()

    # -- direct reply-to -----------------------------------------------------------------------------------

    def open_reply_queue(self) -> tuple[str, Queue]:
        """A private, unlisted queue for one channel's amq.rabbitmq.reply-to consumer."""
        token = server_generated_name("")
        q: Queue = Queue(self.name, REPLY_TO, hooks=self.hooks)
        self.replies[token] = q
        self._route_cache.clear()
        return token, q

    def close_reply_queue(self, token: str) -> None:
        q = self.replies.pop(token, None)
        if q is not None:
            q.close()
            self._route_cache.clear()

    # -- connection teardown ---------------------------------------------------------------------------

    def drop_exclusive(self, owner: object) -> None:
        for q in list(self._exclusive.get(owner, ())):
            self.remove_queue(q)

    def _forget_exclusive(self, q: Queue) -> None:
        owned = self._exclusive.get(q.exclusive_owner) if q.exclusive_owner is not None else None
        if owned is not None:
            owned.pop(q, None)
            if not owned:
                del self._exclusive[q.exclusive_owner]

    def consumer_gone(self, q: Queue) -> None:
        """auto_delete: a queue that had consumers goes when the last one does."""
        if q.auto_delete and q.had_consumers and not q.consumers:
            self.remove_queue(q)


def _string_list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value if isinstance(v, (str, bytes))]
    return []
