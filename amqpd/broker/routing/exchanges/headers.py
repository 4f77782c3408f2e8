"""The headers exchange: binding arguments are matched against the message's headers table.

Rules, from RabbitMQ 3.10's rabbit_exchange_type_headers.erl:
- `x-match` is "all" (the default when absent), "any", "all-with-x" or "any-with-x"; any other value, or a
  value that is not a long string, makes queue.bind fail with PRECONDITION_FAILED.
- `x-match` itself never takes part in matching. Other arguments whose key starts with "x-" are ignored for
  all/any and count as ordinary arguments for all-with-x/any-with-x.
- An argument whose value is void (None) matches when the header is present, with any value.
- all: every counted argument matches; with none counted, every message matches (even one without headers).
  any: at least one counted argument matches; with none counted, no message matches.
- Values compare the way Erlang's `==` compares them, i.e. ignoring the AMQP type tag: a long 1 equals a
  short 1 and a double 1.0, a long string equals a byte array with the same bytes, a timestamp equals the
  integer of its seconds. Booleans are atoms in Erlang, so True never equals 1. Decimals compare by scale
  and digits, so 1.0 and 1.00 differ. Pragmatic difference: nested tables compare regardless of key order.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable
from decimal import Decimal
from typing import Any

from amqpd.broker.routing.exchanges.base import BindingKey, Exchange
from amqpd.errors import precondition_failed

MATCH_KINDS = ("all", "any", "all-with-x", "any-with-x")

_PRESENT = object()  # a void binding value: the header only has to exist
_MISSING = object()
_BOOL = object()  # tags that keep normalised values apart from plain tuples and from each other
_DECIMAL = object()

# Type names as RabbitMQ prints them in the "invalid x-match field type" error.
_AMQP_TYPE_NAMES = {
    bool: "bool",
    int: "long",
    float: "double",
    Decimal: "decimal",
    bytes: "binary",
    dict: "table",
    list: "array",
    datetime.datetime: "timestamp",
    type(None): "void",
}


def comparable(value: Any) -> Any:
    """The form in which two header values are equal exactly when RabbitMQ's `==` says they are."""
    kind = type(value)
    if kind is str or kind is int or kind is float:
        return value  # Python's int/float equality already is Erlang's ==
    if kind is bool:
        return (_BOOL, value)
    if kind is bytes:
        try:
            return value.decode("utf-8")  # pamqp gives str for valid UTF-8 long strings, bytes otherwise
        except UnicodeDecodeError:
            return value
    if kind is datetime.datetime:
        return int(value.timestamp())
    if kind is Decimal and value.is_finite():
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return (_DECIMAL, -int(exponent), unscaled)
    if kind is dict:
        return {k: comparable(v) for k, v in value.items()}
    if kind is list:
        return [comparable(v) for v in value]
    return value


class HeadersPattern:
    """One binding's arguments, digested at bind time so routing only compares."""

    __slots__ = ("require_all", "wanted")

    def __init__(self, arguments: dict[str, Any]) -> None:
        kind = arguments.get("x-match", "all")
        self.require_all = kind in ("all", "all-with-x")
        with_x = kind.endswith("-with-x")
        self.wanted: tuple[tuple[str, Any], ...] = tuple(
            (key, _PRESENT if value is None else comparable(value))
            for key, value in arguments.items()
            if key != "x-match" and (with_x or not key.startswith("x-"))
        )

    def matches(self, headers: dict[str, Any]) -> bool:
        """headers must already be in `comparable()` form (see HeadersExchange.route)."""
        if self.require_all:
            for key, want in self.wanted:
                got = headers.get(key, _MISSING)
                if got is _MISSING or (want is not _PRESENT and got != want):
                    return False
            return True
        for key, want in self.wanted:
            got = headers.get(key, _MISSING)
            if got is not _MISSING and (want is _PRESENT or got == want):
                return True
        return False


def check_x_match(arguments: dict[str, Any]) -> None:
    """RabbitMQ's validate_binding: x-match, when given, must be one of MATCH_KINDS as a long string."""
    if "x-match" not in arguments:
        return
    value = arguments["x-match"]
    if type(value) is not str:
        type_name = _AMQP_TYPE_NAMES.get(type(value), type(value).__name__)
        raise precondition_failed(f"Invalid x-match field type {type_name} (value {value!r}); expected longstr")
    if value not in MATCH_KINDS:
        raise precondition_failed(
            f'Invalid x-match field value <<"{value}">>; expected all, any, all-with-x, or any-with-x'
        )


class HeadersExchange(Exchange):
    """Every binding is tried against the message headers (a linear scan, as in RabbitMQ)."""

    type_name = "headers"
    needs_headers = True

    def __init__(self, name: str, **flags: Any) -> None:
        super().__init__(name, **flags)
        self._patterns: dict[BindingKey, HeadersPattern] = {}

    def validate_binding(self, routing_key: str, arguments: dict[str, Any]) -> None:
        check_x_match(arguments)

    def route(self, routing_key: str, headers: dict[str, Any] | None = None) -> list[Hashable]:
        # Normalise the message's values once rather than once per binding.
        data = {key: comparable(value) for key, value in headers.items()} if headers else {}
        patterns = self._patterns
        routed: list[Hashable] = []
        for destination, keys in self._by_destination.items():
            for key in keys:
                if patterns[key].matches(data):
                    routed.append(destination)
                    break
        return routed

    def _on_binding_added(self, key: BindingKey, arguments: dict[str, Any]) -> None:
        self._patterns[key] = HeadersPattern(arguments)

    def _on_binding_removed(self, key: BindingKey) -> None:
        del self._patterns[key]
