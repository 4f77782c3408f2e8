"""The x-federation-upstream exchange, which RabbitMQ's federation plugin declares on an upstream broker.

RabbitMQ 3.10's rabbit_federation_upstream_exchange.erl is the reference. An exchange-federation link from a
downstream RabbitMQ declares on its upstream (here, amqpd) an internal, durable, auto-delete exchange of this
type named `federation: X -> <downstream cluster> A` (or `B`), with the arguments

- `x-max-hops` (long, required): how many federation links a message may have crossed already;
- `x-downstream-name` and `x-downstream-vhost` (long strings): the downstream cluster and vhost, for cycles;
- `x-internal-purpose` = "federation";

binds it to the upstream exchange with the downstream's bindings, and consumes from a queue bound to it.
It routes like a fanout, except that a message whose `x-received-from` header (an array with one table per
link crossed, each naming the `cluster-name` and `vhost` it came from) already has `x-max-hops` entries, or
names the downstream cluster and vhost, goes nowhere: it would only travel to be dropped downstream, or loop.

When this type is unknown the plugin falls back to a plain fanout (it catches the 503): messages still flow,
but hops and cycles are then only checked downstream, after the message crossed the link.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from amqpd.broker.routing.exchanges.fanout import FanoutExchange
from amqpd.errors import precondition_failed

TYPE_NAME = "x-federation-upstream"
MAX_HOPS_ARG = "x-max-hops"
DOWNSTREAM_NAME_ARG = "x-downstream-name"
DOWNSTREAM_VHOST_ARG = "x-downstream-vhost"
ROUTING_HEADER = "x-received-from"

_NOTHING: list[Hashable] = []


def check_max_hops(arguments: dict[str, Any]) -> None:
    """rabbit_federation_util:validate_arg(x-max-hops, long, Args), with its wording; every integer width
    decodes to int here, so any integer passes where RabbitMQ wants a long exactly."""
    if MAX_HOPS_ARG not in arguments:
        raise precondition_failed(f"Argument {MAX_HOPS_ARG} missing")
    value = arguments[MAX_HOPS_ARG]
    if type(value) is not int:  # bool is an int to Python but a different AMQP type
        raise precondition_failed(f"Argument {MAX_HOPS_ARG} must be of type long")


def should_forward(headers: dict[str, Any] | None, max_hops: int, downstream: str | None, vhost: str | None) -> bool:
    """rabbit_federation_util:should_forward/4: fewer than max_hops links crossed, and none from the
    downstream itself. A header that is not an array was set by a client and is ignored, as there."""
    received = headers.get(ROUTING_HEADER) if headers else None
    if not isinstance(received, list):
        return True
    return len(received) < max_hops and not already_seen(downstream, vhost, received)


def already_seen(cluster: str | None, vhost: str | None, received: list[Any]) -> bool:
    """Whether a table of the header names this cluster and vhost (an unknown one never matches)."""
    if cluster is None or vhost is None:
        return False
    return any(
        isinstance(hop, dict) and hop.get("cluster-name") == cluster and hop.get("vhost") == vhost for hop in received
    )


def _long_string(arguments: dict[str, Any], key: str) -> str | None:
    value = arguments.get(key)
    return value if isinstance(value, str) else None  # missing before RabbitMQ 3.3.0 / 3.8.9: "unknown"


class FederationUpstreamExchange(FanoutExchange):
    """A fanout that drops messages which crossed x-max-hops links or come from its downstream."""

    type_name = TYPE_NAME
    needs_headers = True  # the route of a message with headers depends on its x-received-from
    equivalence_args: ClassVar[tuple[str, ...]] = (MAX_HOPS_ARG,)

    def __init__(self, name: str, **flags: Any) -> None:
        super().__init__(name, **flags)
        hops = self.arguments.get(MAX_HOPS_ARG)
        # Checked when declared (check_arguments); one imported from definitions without it gets the
        # upstream's default max-hops rather than failing every publish, as RabbitMQ's route/2 would.
        self.max_hops: int = hops if type(hops) is int else 1
        self.downstream = _long_string(self.arguments, DOWNSTREAM_NAME_ARG)
        self.downstream_vhost = _long_string(self.arguments, DOWNSTREAM_VHOST_ARG)

    @classmethod
    def check_arguments(cls, arguments: dict[str, Any]) -> None:
        check_max_hops(arguments)

    def route(self, routing_key: str, headers: dict[str, Any] | None = None) -> list[Hashable]:
        if headers is None or should_forward(headers, self.max_hops, self.downstream, self.downstream_vhost):
            return super().route(routing_key, headers)
        return _NOTHING
