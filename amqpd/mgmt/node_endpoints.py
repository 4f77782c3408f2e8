"""/api/overview, /api/whoami, /api/nodes, /api/vhosts (GET), /api/aliveness-test and /api/health:
the broker as a whole."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from amqpd.mgmt import objects, operations
from amqpd.mgmt.endpoints import Endpoints
from amqpd.mgmt.http_errors import bad_request, not_found


class NodeEndpoints(Endpoints):
    async def overview(self, request: Request) -> Any:
        info = objects.overview(self.broker, self.rates, self.listeners)
        for section, age_key, incr_key in (
            ("message_stats", "msg_rates_age", "msg_rates_incr"),
            ("queue_totals", "lengths_age", "lengths_incr"),
        ):
            if age_key in request.query_params:
                self._add_samples(info[section], request, age_key, incr_key)
        return info

    def _add_samples(self, section: dict[str, Any], request: Request, age_key: str, incr_key: str) -> None:
        """RabbitMQ's ?msg_rates_age=&msg_rates_incr= (and lengths_*): each counter's `samples` in its
        `_details`, from the history kept at every sampling."""
        try:
            age, incr = float(request.query_params[age_key]), float(request.query_params.get(incr_key, "5"))
        except ValueError:
            raise bad_request(f"{age_key} and {incr_key} must be numbers of seconds") from None
        if age <= 0 or incr <= 0:
            raise bad_request(f"{age_key} and {incr_key} must be positive")
        now = self.rates.clock()
        for key in [k for k in section if not k.endswith("_details")]:
            details = section.setdefault(f"{key}_details", {"rate": 0.0})
            details["samples"] = self.rates.history.samples(key, age, incr, now)

    async def whoami(self, request: Request) -> Any:
        user = self._user(request)
        return {"name": user.name, "tags": list(user.tags)}

    async def nodes(self, request: Request) -> Any:
        return self._listing(request, [objects.node_info(self.broker)])

    async def node(self, request: Request, node: str) -> Any:
        if node != objects.NODE:
            raise not_found()
        return objects.node_info(self.broker)

    async def vhosts(self, request: Request) -> Any:
        items = [objects.vhost_info(self.broker, v, self.rates) for v in self._vhosts(request, None)]
        return self._listing(request, items)

    async def vhost(self, request: Request, vhost: str) -> Any:
        return objects.vhost_info(self.broker, self._vhost(vhost), self.rates)

    async def aliveness(self, request: Request, vhost: str) -> Any:
        """RabbitMQ declares aliveness-test, publishes to it and gets the message back."""
        v = self._vhost(vhost)
        v.declare_queue(
            "aliveness-test", passive=False, durable=False, exclusive=False, auto_delete=False, arguments={}, owner=None
        )
        await operations.publish(self.broker, v, "", "aliveness-test", {}, b"test_message")
        fetched = await operations.get(self.broker, v, "aliveness-test", 1, "ack_requeue_false")
        if not fetched:
            return JSONResponse({"status": "failed", "reason": "aliveness test message lost"}, status_code=503)
        return {"status": "ok"}

    async def health_alarms(self, request: Request) -> Any:
        if self.broker.alarms:
            alarms = [{"resource": name, "node": objects.NODE} for name in sorted(self.broker.alarms)]
            return JSONResponse(
                {"status": "failed", "reason": "resource alarm(s) in effect in the cluster", "alarms": alarms},
                status_code=503,
            )
        return {"status": "ok"}

    async def health_vhosts(self, request: Request) -> Any:
        return {"status": "ok"}

    async def health_port(self, request: Request, port: str) -> Any:
        ports = sorted(int(entry["port"]) for entry in self.listeners)
        if not port.isdigit() or int(port) not in ports:
            return JSONResponse(
                {
                    "status": "failed",
                    "reason": "No active listener",
                    "missing": port if not port.isdigit() else int(port),
                    "ports": ports,
                },
                status_code=503,
            )
        return {"status": "ok", "port": int(port)}


NODE_ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
    ("GET", "api/overview", "overview"),
    ("GET", "api/whoami", "whoami"),
    ("GET", "api/nodes", "nodes", "monitoring"),
    ("GET", "api/nodes/{node}", "node", "monitoring"),
    ("GET", "api/vhosts", "vhosts"),
    ("GET", "api/vhosts/{vhost}", "vhost"),
    ("GET", "api/aliveness-test/{vhost}", "aliveness"),
    ("GET", "api/health/checks/alarms", "health_alarms"),
    ("GET", "api/health/checks/local-alarms", "health_alarms"),
    ("GET", "api/health/checks/virtual-hosts", "health_vhosts"),
    ("GET", "api/health/checks/port-listener/{port}", "health_port"),
]
