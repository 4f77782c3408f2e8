"""Exchange types, one module each, and the registry that exchange.declare looks types up in."""

from __future__ import annotations

from typing import Any

from amqpd.broker.routing.exchanges.base import Binding, Exchange
from amqpd.broker.routing.exchanges.delayed import DelayedExchange, check_delayed_type, delayed_class
from amqpd.broker.routing.exchanges.direct import DirectExchange
from amqpd.broker.routing.exchanges.fanout import FanoutExchange
from amqpd.broker.routing.exchanges.federation_upstream import FederationUpstreamExchange
from amqpd.broker.routing.exchanges.headers import HeadersExchange
from amqpd.broker.routing.exchanges.topic import TopicExchange

ROUTING_TYPES: dict[str, type[Exchange]] = {
    cls.type_name: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)
}
EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    **ROUTING_TYPES,
    DelayedExchange.type_name: DelayedExchange,
    FederationUpstreamExchange.type_name: FederationUpstreamExchange,  # RabbitMQ's federation plugin, upstream side
}


def make_exchange(type_name: str, name: str, **flags: Any) -> Exchange:
    """A new exchange of the named type; KeyError for an unknown type (the caller answers 503). A delayed
    exchange routes as the type its x-delayed-type argument names."""
    if type_name == DelayedExchange.type_name:
        return delayed_class(check_delayed_type(flags.get("arguments") or {}, ROUTING_TYPES))(name, **flags)
    return EXCHANGE_TYPES[type_name](name, **flags)


__all__ = [
    "EXCHANGE_TYPES",
    "ROUTING_TYPES",
    "Binding",
    "DelayedExchange",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "FederationUpstreamExchange",
    "HeadersExchange",
    "TopicExchange",
    "make_exchange",
]
