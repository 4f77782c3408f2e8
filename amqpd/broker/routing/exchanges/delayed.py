"""The x-delayed-message exchange, compatible with rabbitmq_delayed_message_exchange (its README and
rabbit_exchange_type_delayed_message.erl are the reference):

- declared with type `x-delayed-message` and the argument `x-delayed-type`, an existing exchange type whose
  routing it uses (direct, fanout, topic, headers);
- a message whose `x-delay` header is above 0 (milliseconds) waits that long, then is routed; any other
  message (no header, 0, negative, not a number) is routed at once, as by the plain exchange;
- an integer of any width is the delay; a string holding an integer and a float or decimal (truncated)
  count too, as the plugin converts them;
- when it is routed after waiting, its `x-delay` header reads `-delay` (the plugin's swap_delay_header),
  so a message is never delayed twice and consumers can tell it was delayed.

amqpd differs where the plugin is weak: no upper bound on the delay (the plugin routes a delay above
2^32-1 ms at once), persistent messages on a durable exchange are kept in the store and survive restart and
kill -9 (confirmed once stored), and a mandatory publish that no binding would route at publish time is
returned (312 NO_ROUTE) instead of being delayed; the plugin returns every delayed mandatory publish,
routable or not, because it routes to nothing at publish time. The waiting messages live in a heap
(`DelaySchedule`); `DelayedDelivery` (broker/publish/delayed_release.py) stores, times and releases them.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, ClassVar

from amqpd import errors
from amqpd.broker.routing.delay_schedule import DelaySchedule
from amqpd.broker.routing.exchanges.base import Exchange

# A durable delayed exchange's holder in the store: a queue entry no client can declare (amq.* is reserved),
# found again by this prefix at recovery.
HOLDER_PREFIX = "amq.delayed-message/"


def holder_name(exchange: str) -> str:
    return HOLDER_PREFIX + exchange


TYPE_NAME = "x-delayed-message"
TYPE_ARGUMENT = "x-delayed-type"
DELAY_HEADER = "x-delay"


class DelayedExchange(Exchange):
    """Mixed in front of the routing class named by x-delayed-type (see `delayed_class`)."""

    type_name = TYPE_NAME
    delays: ClassVar[bool] = True

    def __init__(self, name: str, **flags: Any) -> None:
        super().__init__(name, **flags)
        self.schedule = DelaySchedule()
        self.store_id: int | None = None  # the store's holder of its persistent waiting messages
        self.timer: Any = None
        self.timer_due: int | None = None

    def drop_waiting(self) -> None:
        """The exchange is deleted: its waiting messages go with it (the caller deletes its store holder)."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_due = None
        self.schedule.clear()

    def waiting_count(self) -> int:
        """How many messages wait to be routed (what the HTTP API and amqpctl show per exchange)."""
        return len(self.schedule)

    def next_due_ms(self) -> int | None:
        """When the next one is due, in Unix milliseconds; None when nothing waits."""
        return self.schedule.next_due()


_CLASSES: dict[type[Exchange], type[DelayedExchange]] = {}


def delayed_class(routing: type[Exchange]) -> type[DelayedExchange]:
    cls = _CLASSES.get(routing)
    if cls is None:
        cls = _CLASSES[routing] = type(f"Delayed{routing.__name__}", (DelayedExchange, routing), {})
    return cls


def check_delayed_type(arguments: dict[str, Any], types: dict[str, type[Exchange]]) -> type[Exchange]:
    """The routing class x-delayed-type names, with the plugin's refusals: missing or not a string → 406;
    an unknown type → 503 (rabbit_exchange:check_type), which closes the connection."""
    value = arguments.get(TYPE_ARGUMENT)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str) or value == TYPE_NAME:
        raise errors.precondition_failed("Invalid argument, 'x-delayed-type' must be an existing exchange type")
    routing = types.get(value)
    if routing is None:
        raise errors.command_invalid(f"unknown exchange type '{value}'")
    return routing


def delay_of(headers: dict[str, Any] | None) -> int | None:
    """The delay in ms a message asks for, None when it is to be routed at once (rabbit_delayed_message_utils
    get_delay: integers; strings holding an integer; floats and decimals truncated; anything else none)."""
    if not headers:
        return None
    value = headers.get(DELAY_HEADER)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        delay = value
    elif isinstance(value, (str, bytes)):
        try:
            delay = int(value)
        except ValueError:
            return None
    elif isinstance(value, (float, Decimal)):
        if not math.isfinite(value):
            return None
        delay = int(value)
    else:
        return None
    return delay if delay > 0 else None
