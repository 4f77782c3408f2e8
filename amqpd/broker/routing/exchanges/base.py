"""What every exchange type shares: its flags and the set of bindings, kept in bind order.

A binding is (destination, routing_key, arguments) and, as in RabbitMQ, all three make up its identity: the
same queue may be bound twice with one key if the arguments differ. Arguments are field tables that may hold
unhashable values, so identity uses `freeze()`, a canonical hashable form that keeps AMQP types apart
(True is not 1, 1 is not 1.0, Decimal("1.0") is not Decimal("1.00")) as RabbitMQ's typed tables do.
Two known differences, both from working on pamqp-decoded values: every integer width decodes to int, so a
short 1 and a long 1 are one binding here but two in RabbitMQ; and nested tables compare regardless of key
order, where RabbitMQ only sorts the top level.

Subclasses keep their own routing index in step through the `_on_*` hooks and never touch the bindings.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from decimal import Decimal
from operator import itemgetter
from typing import Any, ClassVar

Binding = tuple[Hashable, str, dict[str, Any]]
BindingKey = tuple[Hashable, str, Hashable]  # (destination, routing_key, frozen arguments)

_first = itemgetter(0)


def freeze(value: Any) -> Hashable:
    """A hashable, type-tagged form of a field value: equal forms mean the same AMQP value.

    Tables compare regardless of key order (RabbitMQ sorts binding arguments before comparing them)."""
    kind = type(value)
    if kind is dict:
        return ("table", tuple(sorted(((k, freeze(v)) for k, v in value.items()), key=_first)))
    if kind is list or kind is tuple:
        return ("array", tuple(freeze(item) for item in value))
    if kind is float:
        return ("float", value.hex())  # hex keeps NaN equal to itself, which == would not
    if kind is Decimal:
        return ("decimal", value.as_tuple())  # as_tuple keeps the scale: 1.0 and 1.00 differ on the wire
    try:
        hash(value)
    except TypeError:
        return (kind.__name__, repr(value))
    return (kind.__name__, value)


def freeze_table(arguments: Mapping[str, Any]) -> Hashable:
    """Identity of a binding's arguments; the empty table is the common case, so it is short-cut."""
    if not arguments:
        return ()
    return freeze(dict(arguments))


class Exchange:
    """Flags plus bindings; `route()` is the type-specific part.

    Destinations are any hashable objects (the broker uses Queue and Exchange instances, hashed by identity).
    `route()` returns each matched destination once, in the order destinations were first bound to this
    exchange (one that lost all its bindings and was bound again counts as new). The returned list may be
    cached and shared between calls: callers must not mutate it.
    """

    type_name: ClassVar[str] = ""
    needs_headers: ClassVar[bool] = False
    delays: ClassVar[bool] = False  # x-delayed-message: a message may wait before it is routed
    equivalence_args: ClassVar[tuple[str, ...]] = ()  # arguments a redeclaration must repeat, for this type

    def __init__(
        self,
        name: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments) if arguments else {}
        self.policy: Any = None  # the policy that applies (routing/policy.py), if any
        self.policy_alternate: str | None = None  # its alternate-exchange; the argument wins over it
        # Publishes into this exchange from clients, and the copies it routed to queues (the management API's
        # publish_in / publish_out); bumped once per publish, or once per batch on the batched paths.
        self.publish_in = 0
        self.publish_out = 0
        self._bindings: dict[BindingKey, Binding] = {}  # insertion order is bind order
        self._by_destination: dict[Hashable, dict[BindingKey, None]] = {}  # order: first bound
        self._rank: dict[Hashable, int] = {}  # position of each destination in _by_destination's order
        self._next_rank = 0
        self._pair_counts: dict[tuple[Hashable, str], int] = {}  # (dest, key) -> bindings differing by args

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} bindings={len(self._bindings)}>"

    @classmethod
    def check_arguments(cls, arguments: dict[str, Any]) -> None:
        """Raise an AMQPError if this type refuses these arguments for a new exchange (RabbitMQ's validate/1)."""

    # -- bindings ------------------------------------------------------------------------------------------

    def validate_binding(self, routing_key: str, arguments: dict[str, Any]) -> None:
        """Raise an AMQPError if this type rejects the binding; bind() calls it before anything else."""

    def bind(self, destination: Hashable, routing_key: str, arguments: dict[str, Any] | None = None) -> bool:
        """Add a binding; True if it is new, False if an identical one already existed."""
        args: dict[str, Any] = dict(arguments) if arguments else {}
        self.validate_binding(routing_key, args)
        key: BindingKey = (destination, routing_key, freeze_table(args))
        if key in self._bindings:
            return False
        self._bindings[key] = (destination, routing_key, args)
        self._index_destination(destination)[key] = None
        self._on_binding_added(key, args)
        pair = (destination, routing_key)
        count = self._pair_counts.get(pair, 0)
        self._pair_counts[pair] = count + 1
        if count == 0:
            self._on_pair_added(destination, routing_key)
        return True

    def unbind(self, destination: Hashable, routing_key: str, arguments: dict[str, Any] | None = None) -> bool:
        """Remove a binding; True if it existed."""
        key: BindingKey = (destination, routing_key, freeze_table(arguments or {}))
        if key not in self._bindings:
            return False
        self._remove(key)
        return True

    def unbind_all(self, destination: Hashable) -> int:
        """Drop every binding to destination (it was deleted); returns how many there were."""
        keys = list(self._by_destination.get(destination, ()))
        for key in keys:
            self._remove(key)
        return len(keys)

    def bindings(self) -> list[Binding]:
        """(destination, routing_key, arguments) in bind order."""
        return list(self._bindings.values())

    def bindings_to(self, destination: Hashable) -> list[Binding]:
        """The bindings to one destination, found without looking at the others."""
        return [self._bindings[key] for key in self._by_destination.get(destination, ())]

    def has_bindings(self) -> bool:
        return bool(self._bindings)

    def is_bound(self, destination: Hashable, routing_key: str, arguments: dict[str, Any] | None = None) -> bool:
        return (destination, routing_key, freeze_table(arguments or {})) in self._bindings

    def route(self, routing_key: str, headers: dict[str, Any] | None = None) -> list[Hashable]:
        """Destinations a message with this routing key (and headers, for types that need them) goes to."""
        raise NotImplementedError

    # -- bookkeeping -----------------------------------------------------------------------------------------

    def _index_destination(self, destination: Hashable) -> dict[BindingKey, None]:
        keys = self._by_destination.get(destination)
        if keys is None:
            keys = self._by_destination[destination] = {}
            self._rank[destination] = self._next_rank
            self._next_rank += 1
        return keys

    def _remove(self, key: BindingKey) -> None:
        destination, routing_key, _ = key
        del self._bindings[key]
        keys = self._by_destination[destination]
        del keys[key]
        if not keys:
            del self._by_destination[destination]
            del self._rank[destination]
        self._on_binding_removed(key)
        pair = (destination, routing_key)
        count = self._pair_counts.pop(pair)
        if count > 1:
            self._pair_counts[pair] = count - 1
        else:
            self._on_pair_removed(destination, routing_key)

    def _in_bind_order(self, destinations: set[Hashable]) -> list[Hashable]:
        return sorted(destinations, key=self._rank.__getitem__)

    # -- hooks for subclasses: keep a routing index in step --------------------------------------------------

    def _on_binding_added(self, key: BindingKey, arguments: dict[str, Any]) -> None:
        """Every new binding, including ones differing from an existing binding only by arguments."""

    def _on_binding_removed(self, key: BindingKey) -> None:
        """Every removed binding."""

    def _on_pair_added(self, destination: Hashable, routing_key: str) -> None:
        """The first binding from this exchange to destination with routing_key, whatever its arguments."""

    def _on_pair_removed(self, destination: Hashable, routing_key: str) -> None:
        """The last binding to destination with routing_key is gone."""
