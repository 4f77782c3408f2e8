"""Scenario modules, grouped by area; importing this package registers them all."""

from interop.scenarios import (  # noqa: F401
    access,
    celery_e2e,
    clients_cli,
    clients_node,
    clients_python,
    compat,
    confirms_tx,
    consuming,
    delayed,
    delivery_limits,
    errors,
    exchanges,
    handshake,
    properties,
    queues,
    routing,
    streams,
)
