"""Prometheus metrics with rabbitmq_prometheus's names, so Grafana dashboards built for RabbitMQ work.

`/metrics` aggregates (no per-object labels, as rabbitmq_prometheus does by default); `/metrics/per-object`
labels queue metrics with vhost and queue. Values are read from the broker at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from amqpd import __version__
from amqpd.broker.routing.exchanges import DelayedExchange
from amqpd.mgmt import objects

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker

QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", lambda q: len(q.ready)),
    (
        "rabbitmq_queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        lambda q: q.unacked,
    ),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages", lambda q: len(q.ready) + q.unacked),
    ("rabbitmq_queue_consumers", "Consumers on a queue", lambda q: len(q.consumers)),
    ("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages", lambda q: q.ready_bytes),
)
QUEUE_COUNTERS = (("rabbitmq_queue_messages_published_total", "Messages published to queues", lambda q: q.published),)
QUEUE_BYTES = (
    (
        "rabbitmq_queue_messages_bytes",
        "Size in bytes of ready and unacknowledged messages",
        lambda q: q.ready_bytes + q.unacked_bytes,
    ),
    (
        "rabbitmq_queue_messages_unacked_bytes",
        "Size in bytes of all unacknowledged messages",
        lambda q: q.unacked_bytes,
    ),
)
CONNECTION_COUNTERS = (
    ("rabbitmq_connection_incoming_bytes_total", "Total number of bytes received on a connection", "recv_oct"),
    ("rabbitmq_connection_outgoing_bytes_total", "Total number of bytes sent on a connection", "send_oct"),
    ("rabbitmq_connection_incoming_packets_total", "Total number of packets received on a connection", "recv_cnt"),
    ("rabbitmq_connection_outgoing_packets_total", "Total number of packets sent on a connection", "send_cnt"),
)
CHANNEL_COUNTERS = (
    ("rabbitmq_channel_messages_published_total", "Messages published into an exchange on a channel", "publish"),
    (
        "rabbitmq_channel_messages_delivered_total",
        "Messages delivered to consumers or fetched with basic.get",
        "deliver_get",
    ),
    ("rabbitmq_channel_messages_acked_total", "Messages acknowledged by consumers", "ack"),
    ("rabbitmq_channel_messages_confirmed_total", "Messages confirmed to publishers", "confirm"),
)
DELAYED_COUNT = "amqpd_exchange_messages_delayed"
DELAYED_DUE = "amqpd_exchange_messages_delayed_next_due_timestamp_seconds"
GLOBAL_COUNTERS = (
    ("rabbitmq_global_messages_received_total", "Total number of messages received from publishers", "publish"),
    ("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers", "deliver_get"),
    ("rabbitmq_global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", "ack"),
    ("rabbitmq_global_messages_confirmed_total", "Total number of messages confirmed to publishers", "confirm"),
)


class BrokerCollector:
    def __init__(self, broker: Broker, per_object: bool) -> None:
        self.broker = broker
        self.per_object = per_object

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
        yield from self._info()
        yield from self._totals(queues)
        yield from self._queues(queues)
        yield from self._connections()
        yield from self._delayed()
        totals = objects.totals(broker)
        channel_totals = {
            key: totals[key] - getattr(broker.closed_totals, attr)
            for key, attr in (
                ("publish", "published"),
                ("deliver_get", "delivered"),
                ("ack", "acked"),
                ("confirm", "confirmed"),
            )
        }
        for name, doc, key in CHANNEL_COUNTERS:
            yield _counter(name, doc, channel_totals[key])
        for name, doc, key in GLOBAL_COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["protocol"])
            family.add_metric(["amqp091"], totals[key])
            yield family

    def _info(self) -> Iterator[Metric]:
        identity = GaugeMetricFamily(
            "rabbitmq_identity_info",
            "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"],
        )
        identity.add_metric([objects.NODE, objects.NODE, objects.NODE], 1)
        yield identity
        build = GaugeMetricFamily(
            "rabbitmq_build_info",
            "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version", "product_version"],
        )
        build.add_metric([objects.API_VERSION, objects.API_VERSION, __version__], 1)
        yield build
        yield _gauge(
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark alarm is in effect",
            int("memory" in self.broker.alarms),
        )
        yield _gauge(
            "rabbitmq_alarms_free_disk_space_watermark",
            "is 1 if free disk space watermark alarm is in effect",
            int("disk" in self.broker.alarms),
        )

    def _totals(self, queues: list[Any]) -> Iterator[Metric]:
        sessions = self.broker.connections
        yield _gauge("rabbitmq_connections", "Connections currently open", len(sessions))
        yield _gauge("rabbitmq_channels", "Channels currently open", sum(len(s.channels) for s in sessions))
        yield _gauge("rabbitmq_queues", "Queues available", len(queues))
        yield _gauge("rabbitmq_consumers", "Consumers currently connected", sum(len(q.consumers) for q in queues))

    def _queues(self, queues: list[Any]) -> Iterator[Metric]:
        for name, doc, value in QUEUE_GAUGES:
            yield self._per_queue(GaugeMetricFamily, name, doc, value, queues)
        for name, doc, value in QUEUE_COUNTERS:
            yield self._per_queue(CounterMetricFamily, name, doc, value, queues)
        for name, doc, value in QUEUE_BYTES:
            yield self._per_queue(GaugeMetricFamily, name, doc, value, queues)

    def _connections(self) -> Iterator[Metric]:
        """Per connection (labelled `channel` with its name, as rabbitmq_prometheus labels them), or summed over
        the open ones."""
        sessions = objects.sessions(self.broker)
        for name, doc, attr in CONNECTION_COUNTERS:
            if self.per_object:
                family = CounterMetricFamily(name, doc, labels=["channel"])
                for s in sessions:
                    family.add_metric([objects.connection_name(s)], getattr(s, attr))
                yield family
            else:
                yield _counter(name, doc, sum(getattr(s, attr) for s in sessions))

    def _delayed(self) -> Iterator[Metric]:
        """amqpd's own (rabbitmq_prometheus has no delayed-message metrics): messages waiting in
        x-delayed-message exchanges, and when the earliest is due (a Unix timestamp; absent when none wait)."""
        delayed = [
            (v.name, ex)
            for v in self.broker.vhosts.values()
            for ex in v.exchanges.values()
            if isinstance(ex, DelayedExchange)
        ]
        labels = ["vhost", "exchange"] if self.per_object else []
        count = GaugeMetricFamily(DELAYED_COUNT, "Messages waiting in delayed-message exchanges", labels=labels)
        due = GaugeMetricFamily(DELAYED_DUE, "When the next delayed message is due, in Unix seconds", labels=labels)
        if self.per_object:
            for vhost, ex in delayed:
                count.add_metric([vhost, ex.name], ex.waiting_count())
                next_due = ex.next_due_ms()
                if next_due is not None:
                    due.add_metric([vhost, ex.name], next_due / 1000)
        else:
            count.add_metric([], sum(ex.waiting_count() for _v, ex in delayed))
            dues = [d for _v, ex in delayed if (d := ex.next_due_ms()) is not None]
            if dues:
                due.add_metric([], min(dues) / 1000)
        yield count
        yield due

    def _per_queue(self, kind: Any, name: str, doc: str, value: Any, queues: list[Any]) -> Metric:
        if not self.per_object:
            family = kind(name, doc)
            family.add_metric([], sum(value(q) for q in queues))
            return family  # type: ignore[no-any-return]
        family = kind(name, doc, labels=["vhost", "queue"])
        for q in queues:
            family.add_metric([q.vhost, q.name], value(q))
        return family  # type: ignore[no-any-return]


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def exposition(broker: Broker, per_object: bool) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, per_object))  # type: ignore[arg-type]
    return generate_latest(registry)


class MetricsApp:
    """The ASGI app of the Prometheus listener: /metrics and /metrics/per-object."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = Request(scope, receive).url.path.rstrip("/")
        response: Response
        if path in ("/metrics", "/metrics/per-object"):
            body = exposition(self.broker, per_object=path.endswith("per-object"))
            response = Response(body, media_type=CONTENT_TYPE_LATEST)
        else:
            response = PlainTextResponse("Not Found", status_code=404)
        await response(scope, receive, send)
