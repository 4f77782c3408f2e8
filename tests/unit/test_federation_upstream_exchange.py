"""The x-federation-upstream exchange that RabbitMQ's federation plugin declares on its upstream: declared
with the plugin's arguments, it routes every message to its bindings unless the message already crossed
x-max-hops federation links or came from the downstream cluster (rabbit_federation_upstream_exchange.erl)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import make_message
from test_vhost import declare_exchange, declare_queue

from amqpd import errors
from amqpd.broker.routing.vhost import VirtualHost

LINK_ARGS = {
    "x-max-hops": 2,
    "x-downstream-name": "rabbit@core",
    "x-downstream-vhost": "/",
    "x-internal-purpose": "federation",
}
INTERNAL = "federation: orders -> rabbit@core A"


@pytest.fixture
def vh() -> VirtualHost:
    vh = VirtualHost("/")
    # as the plugin declares it: durable, internal, auto-delete, with its arguments
    declare_exchange(
        vh, INTERNAL, "x-federation-upstream", durable=True, internal=True, auto_delete=True, arguments=LINK_ARGS
    )
    vh.bind(INTERNAL, declare_queue(vh, "federation: orders -> rabbit@core", durable=True), "", {})
    return vh


def routed(vh: VirtualHost, routing_key: str = "any.key", **properties: Any) -> list[str]:
    return [q.name for q in vh.route(vh.exchanges[INTERNAL], make_message(INTERNAL, routing_key, **properties))]


def hop(cluster: str, vhost: str = "/") -> dict[str, Any]:
    """One entry of x-received-from, as the plugin's update_routing_headers writes it."""
    return {"uri": "amqp://edge", "exchange": "orders", "redelivered": False, "cluster-name": cluster, "vhost": vhost}


def test_a_message_without_headers_goes_to_every_binding_whatever_its_key(vh: VirtualHost) -> None:
    assert routed(vh, "a") == routed(vh, "b.c") == ["federation: orders -> rabbit@core"]


@pytest.mark.parametrize("headers", [{}, {"other": 1}, {"x-received-from": "set by a client"}, {"x-received-from": []}])
def test_a_message_that_crossed_no_link_is_forwarded(vh: VirtualHost, headers: dict[str, Any]) -> None:
    assert routed(vh, headers=headers) == ["federation: orders -> rabbit@core"]


def test_a_message_is_forwarded_while_it_crossed_fewer_links_than_max_hops(vh: VirtualHost) -> None:
    assert routed(vh, headers={"x-received-from": [hop("edge-1")]}) == ["federation: orders -> rabbit@core"]
    assert routed(vh, headers={"x-received-from": [hop("edge-1"), hop("edge-2")]}) == []


@pytest.mark.parametrize("vhost", ["/", "other"])
def test_a_message_from_the_downstream_cluster_and_vhost_does_not_go_back(vh: VirtualHost, vhost: str) -> None:
    expected = [] if vhost == "/" else ["federation: orders -> rabbit@core"]
    assert routed(vh, headers={"x-received-from": [hop("rabbit@core", vhost)]}) == expected


def test_an_exchange_without_downstream_name_only_counts_hops(vh: VirtualHost) -> None:
    declare_exchange(vh, "old-plugin", "x-federation-upstream", arguments={"x-max-hops": 2})
    vh.bind("old-plugin", vh.queues["federation: orders -> rabbit@core"], "", {})
    message = make_message("old-plugin", "k", headers={"x-received-from": [hop("rabbit@core")]})
    assert len(vh.route(vh.exchanges["old-plugin"], message)) == 1


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, "Argument x-max-hops missing"),
        ({"x-max-hops": "1"}, "Argument x-max-hops must be of type long"),
        ({"x-max-hops": True}, "Argument x-max-hops must be of type long"),
    ],
)
def test_declaring_without_an_integer_max_hops_is_refused(vh: VirtualHost, arguments: dict, text: str) -> None:
    with pytest.raises(errors.ChannelError) as info:
        declare_exchange(vh, "fed28-bad", "x-federation-upstream", arguments=arguments)
    assert (info.value.code, info.value.text) == (errors.PRECONDITION_FAILED, text)
    assert "fed28-bad" not in vh.exchanges


def test_redeclaring_with_another_max_hops_is_refused_but_the_same_is_fine(vh: VirtualHost) -> None:
    flags = {"durable": True, "internal": True, "auto_delete": True}
    declare_exchange(vh, INTERNAL, "x-federation-upstream", arguments=LINK_ARGS, **flags)
    with pytest.raises(errors.ChannelError) as info:
        declare_exchange(vh, INTERNAL, "x-federation-upstream", arguments={**LINK_ARGS, "x-max-hops": 3}, **flags)
    assert info.value.code == errors.PRECONDITION_FAILED
    assert "inequivalent arg 'x-max-hops'" in info.value.text
