"""/api/parameters, /api/global-parameters and /api/shovels: runtime parameters (amqpd/broker/parameters.py)
and the shovels they run (amqpd/shovel) through RabbitMQ 3.10's management API."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from amqpd.broker.parameters import ParameterError
from amqpd.mgmt.access_endpoints import NotFound
from amqpd.mgmt.endpoints import Endpoints
from amqpd.shovel.supervisor import Shovels


class ValidationFailed(ValueError):
    """400 bad_request with RabbitMQ's reason: "Validation failed", a blank line, what is wrong."""

    def __init__(self, exc: ParameterError) -> None:
        super().__init__(f"Validation failed\n\n{exc}\n")


class ParameterEndpoints(Endpoints):
    async def parameters(self, request: Request, component: str | None = None, vhost: str | None = None) -> Any:
        if vhost is not None and vhost not in self.broker.vhosts:
            raise NotFound()
        return self.broker.parameters.entries(component, vhost)

    async def parameter(self, request: Request, component: str, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        key = (component, vhost, name)
        if key not in self.broker.parameters.values:
            raise NotFound()
        return {"value": self.broker.parameters.values[key], "vhost": vhost, "component": component, "name": name}

    async def put_parameter(self, request: Request, component: str, vhost: str, name: str) -> Any:
        if vhost not in self.broker.vhosts:
            return JSONResponse({"error": "not_found", "reason": "vhost_not_found"}, status_code=404)
        body = await self._json(request)
        try:
            existed = self.broker.parameters.put(component, vhost, name, body.get("value"))
        except ParameterError as exc:
            raise ValidationFailed(exc) from None
        return self._created(existed)

    async def delete_parameter(self, request: Request, component: str, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        if not self.broker.parameters.delete(component, vhost, name):
            raise NotFound()
        return self._created(True)

    async def global_parameters(self, request: Request) -> Any:
        return self.broker.parameters.global_entries()

    async def global_parameter(self, request: Request, name: str) -> Any:
        if name not in self.broker.parameters.globals:
            raise NotFound()
        return {"value": self.broker.parameters.globals[name], "name": name}

    async def put_global_parameter(self, request: Request, name: str) -> Any:
        body = await self._json(request)
        if "value" not in body:
            raise ValueError("value is missing")
        return self._created(self.broker.parameters.put_global(name, body["value"]))

    async def delete_global_parameter(self, request: Request, name: str) -> Any:
        if not self.broker.parameters.delete_global(name):
            raise NotFound()
        return self._created(True)

    # -- shovels -------------------------------------------------------------------------------------------------

    def _shovels(self) -> Shovels | None:
        component = self.broker.parameters.components.get("shovel")
        return component if isinstance(component, Shovels) else None

    async def shovels(self, request: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._vhost(vhost)
        shovels = self._shovels()
        return shovels.status(vhost) if shovels is not None else []

    async def restart_shovel(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        shovels = self._shovels()
        if shovels is None or not shovels.restart(vhost, name):
            raise NotFound()
        return self._created(True)


PARAMETER_ROUTES: list[tuple[str, ...]] = [
    ("GET", "api/parameters", "parameters", "policymaker"),
    ("GET", "api/parameters/{component}", "parameters", "policymaker"),
    ("GET", "api/parameters/{component}/{vhost}", "parameters", "policymaker"),
    ("GET", "api/parameters/{component}/{vhost}/{name}", "parameter", "policymaker"),
    ("PUT", "api/parameters/{component}/{vhost}/{name}", "put_parameter", "policymaker"),
    ("DELETE", "api/parameters/{component}/{vhost}/{name}", "delete_parameter", "policymaker"),
    ("GET", "api/global-parameters", "global_parameters", "administrator"),
    ("GET", "api/global-parameters/{name}", "global_parameter", "administrator"),
    ("PUT", "api/global-parameters/{name}", "put_global_parameter", "administrator"),
    ("DELETE", "api/global-parameters/{name}", "delete_global_parameter", "administrator"),
    ("GET", "api/shovels", "shovels", "monitoring"),
    ("GET", "api/shovels/{vhost}", "shovels", "monitoring"),
    ("DELETE", "api/shovels/vhost/{vhost}/{name}/restart", "restart_shovel", "policymaker"),
]
