"""/api/definitions and /api/policies: exporting and importing the broker's definitions, and policies."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from amqpd.mgmt import definitions
from amqpd.mgmt.endpoints import Endpoints
from amqpd.mgmt.http_errors import NoContent, bad_request, not_found


class DefinitionEndpoints(Endpoints):
    async def definitions(self, request: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._vhost(vhost)
        doc = definitions.export(self.broker, vhost)
        if request.query_params.get("download"):
            name = request.query_params["download"].replace('"', "")
            return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{name}"'})
        return doc

    async def import_definitions(self, request: Request, vhost: str | None = None) -> Any:
        doc = await self._json(request)
        if isinstance(doc.get("file"), str):  # the management UI's form upload wraps the document
            try:
                doc = json.loads(doc["file"])
            except ValueError:
                raise bad_request("not_json") from None
        try:
            definitions.import_definitions(self.broker, doc, vhost)
        except definitions.DefinitionsError as exc:
            raise bad_request(str(exc)) from None
        return NoContent()

    async def policies(self, request: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._vhost(vhost)
        vhosts = [v.name for v in self._vhosts(request, vhost)]
        items = [p.as_json() for name in vhosts for p in self.broker.policies.entries(name)]
        return self._listing(request, items)

    async def policy(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        p = self.broker.policies.get(vhost, name)
        if p is None:
            raise not_found()
        return p.as_json()

    async def put_policy(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        body = await self._json(request)
        existed = self.broker.policies.put(
            vhost,
            name,
            body.get("pattern"),
            body.get("definition"),
            body.get("priority", 0),
            body.get("apply-to", "all"),
        )
        return self._created(existed)

    async def delete_policy(self, request: Request, vhost: str, name: str) -> Any:
        self._vhost(vhost)
        if not self.broker.policies.delete(vhost, name):
            raise not_found()
        return NoContent()


DEFINITION_ROUTES: list[tuple[str, ...]] = [  # method, path, handler[, the tag level it needs]
    ("GET", "api/definitions", "definitions", "administrator"),
    ("POST", "api/definitions", "import_definitions", "administrator"),
    ("GET", "api/definitions/{vhost}", "definitions", "administrator"),
    ("POST", "api/definitions/{vhost}", "import_definitions", "administrator"),
    ("GET", "api/policies", "policies"),
    ("GET", "api/policies/{vhost}", "policies"),
    ("GET", "api/policies/{vhost}/{name}", "policy"),
    ("PUT", "api/policies/{vhost}/{name}", "put_policy", "policymaker"),
    ("DELETE", "api/policies/{vhost}/{name}", "delete_policy", "policymaker"),
]
