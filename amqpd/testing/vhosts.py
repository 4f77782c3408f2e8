"""A vhost and a user of their own for each test, made and removed through the management HTTP API, so that
the same code isolates tests on amqpd and on a real RabbitMQ."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import secrets
from typing import Any, Protocol
from urllib.parse import quote, urlsplit, urlunsplit


class ManagementError(RuntimeError):
    """The management API refused a request; the message names the request and the broker's answer."""


class ManagementClient:
    """RabbitMQ's management API (amqpd's or RabbitMQ's) on one kept-alive HTTP connection."""

    def __init__(self, base_url: str, user: str = "guest", password: str = "guest", timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not a management API URL: {base_url!r} (expected http://host:port)")
        self.base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._timeout = timeout
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        self._conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer (None when empty); ManagementError unless the status is 2xx."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):  # the server may have closed the kept-alive connection since the last request
            conn = self._connection()
            try:
                conn.request(method, "/api" + path, body=data, headers=self._headers)
                response = conn.getresponse()
                payload = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt == 2:
                    raise
        if not 200 <= response.status < 300:
            reason = payload.decode(errors="replace").strip()[:200]
            raise ManagementError(f"{method} {self.base_url}/api{path}: HTTP {response.status} {reason}")
        return json.loads(payload) if payload else None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class DirectAdmin(Protocol):
    """A broker that makes and removes a test's vhost and user itself, without HTTP (EmbeddedBroker)."""

    def add_isolated_vhost(self, vhost: str, user: str, password: str) -> None: ...

    def remove_isolated_vhost(self, vhost: str, user: str) -> None: ...


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class IsolatedVhost:
    """A fresh vhost and a user with every permission on it (and nothing else); removing the vhost closes its
    connections and deletes its queues, exchanges and messages, so nothing a test leaves behind reaches the
    next one. `url` is the AMQP URL for that user and vhost.

    with IsolatedVhost(ManagementClient(broker.management_url), broker.url, "my-test") as vhost:
        pika.BlockingConnection(pika.URLParameters(vhost.url))
    """

    def __init__(
        self, admin: ManagementClient | DirectAdmin, broker_url: str, label: str = "test", one_request: bool = False
    ) -> None:
        """admin: the management API of the broker, or an EmbeddedBroker (then no HTTP at all).
        one_request: make the vhost, user and permission with one definitions import, faster on amqpd (one
        round trip instead of three) but not on RabbitMQ, whose definitions import takes several times longer."""
        self.admin = admin
        self.one_request = one_request
        self.name = f"{_UNSAFE.sub('-', label)[:60].strip('-') or 'test'}-{secrets.token_hex(4)}"
        self.user = self.name
        self.password = secrets.token_urlsafe(12)
        self.url = _with_credentials(broker_url, self.user, self.password, self.name)

    def create(self) -> IsolatedVhost:
        try:
            if not isinstance(self.admin, ManagementClient):
                self.admin.add_isolated_vhost(self.name, self.user, self.password)
            elif self.one_request:
                self._import()
            else:
                vhost, user = quote(self.name, safe=""), quote(self.user, safe="")
                self.admin.request("PUT", f"/vhosts/{vhost}", {})
                self.admin.request("PUT", f"/users/{user}", {"password": self.password, "tags": ""})
                everything = {"configure": ".*", "write": ".*", "read": ".*"}
                self.admin.request("PUT", f"/permissions/{vhost}/{user}", everything)
        except BaseException:
            self.remove()
            raise
        return self

    def _import(self) -> None:
        """The vhost, the user and the permission as one definitions import: one round trip instead of three."""
        assert isinstance(self.admin, ManagementClient)
        user = {"name": self.user, "password_hash": _password_hash(self.password), "tags": []}
        user["hashing_algorithm"] = "rabbit_password_hashing_sha256"
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        definitions = {
            "vhosts": [{"name": self.name}],
            "users": [user],
            "permissions": [{"user": self.user, "vhost": self.name, **everything}],
        }
        self.admin.request("POST", "/definitions", definitions)

    def remove(self) -> None:
        """The vhost first: RabbitMQ and amqpd close its connections (320) when it goes."""
        if not isinstance(self.admin, ManagementClient):
            self.admin.remove_isolated_vhost(self.name, self.user)
            return
        for path in (f"/vhosts/{quote(self.name, safe='')}", f"/users/{quote(self.user, safe='')}"):
            try:
                self.admin.request("DELETE", path)
            except ManagementError as exc:
                if "HTTP 404" not in str(exc):
                    raise

    def __enter__(self) -> IsolatedVhost:
        return self.create()

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _password_hash(password: str) -> str:
    """RabbitMQ's stored form of a password (rabbit_password_hashing_sha256): base64(salt + sha256(salt + it))."""
    salt = secrets.token_bytes(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode("ascii")


def _with_credentials(url: str, user: str, password: str, vhost: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{f'[{host}]' if ':' in host else host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, "/" + quote(vhost, safe=""), parts.query, ""))
