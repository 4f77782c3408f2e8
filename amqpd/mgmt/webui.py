"""The management web UI: static files shipped in this package (amqpd/mgmt/ui/), served at `/` and `/ui/...`
in front of the HTTP API, with headers that keep injected markup inert.

The UI is a single page written in plain JavaScript modules (no build step); it calls the API with the
credentials the user typed, sent as the Authorization header, so no cookie exists for another site to ride
on. The files are read once at start-up and served from memory: only names found in the package directory
can be asked for, so no path ever reaches the file system.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

from starlette.responses import Response

from amqpd.mgmt.api import ManagementAPI

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Scripts and styles only from this origin, never inline; the API is the only thing fetched; no framing.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class UIFile:
    __slots__ = ("body", "content_type", "etag")

    def __init__(self, body: bytes, content_type: str) -> None:
        self.body = body
        self.content_type = content_type
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def load_files() -> dict[str, UIFile]:
    """Every file of amqpd/mgmt/ui by its path under /ui/ ("app.js", "pages/queues.js")."""
    files: dict[str, UIFile] = {}

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
                continue
            suffix = "." + child.name.rsplit(".", 1)[-1]
            if suffix in CONTENT_TYPES:
                files[prefix + child.name] = UIFile(child.read_bytes(), CONTENT_TYPES[suffix])

    walk(resources.files("amqpd.mgmt").joinpath("ui"), "")
    return files


class WebUI:
    """The management listener's ASGI app: `/` and `/ui/...` from memory, everything else to the API."""

    def __init__(self, api: ManagementAPI, files: dict[str, UIFile] | None = None) -> None:
        self.api = api
        self.files = load_files() if files is None else files

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path == "/" or path.startswith("/ui/"):
                response = self.respond(scope, path)
                await response(scope, receive, send)
                return
        await self.api(scope, receive, send)

    def respond(self, scope: dict[str, Any], path: str) -> Response:
        if scope["method"] not in ("GET", "HEAD"):
            return Response(status_code=405, headers={"Allow": "GET, HEAD", **SECURITY_HEADERS})
        found = self.files.get("index.html" if path == "/" else path[len("/ui/") :])
        if found is None:
            return Response("Not Found\n", status_code=404, media_type="text/plain", headers=SECURITY_HEADERS)
        headers = {"ETag": found.etag, **SECURITY_HEADERS}
        if _header(scope, b"if-none-match") == found.etag:
            return Response(status_code=304, headers=headers)
        return Response(found.body, media_type=found.content_type, headers=headers)


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""
