"""/api/users, /api/vhosts (PUT, DELETE), /api/permissions, /api/topic-permissions, /api/vhost-limits and
/api/user-limits: the access model (amqpd/broker/access/control.py) through RabbitMQ's management API,
administrators only."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from amqpd.broker.access.control import FULL, SHA256, AccessControl, AccessError, Permission, TopicPermission, User
from amqpd.broker.access.definitions import VHOST_FIELD
from amqpd.mgmt.endpoints import Endpoints


class NotFound(Exception):
    """404 with RabbitMQ's "Object Not Found" body."""


def user_info(u: User) -> dict[str, Any]:
    return {
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": u.hashing_algorithm,
        "tags": list(u.tags),
        "limits": {},
    }


def permission_info(user: str, vhost: str, p: Permission) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read}


def topic_permission_info(user: str, vhost: str, t: TopicPermission) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "exchange": t.exchange, "write": t.write, "read": t.read}


def tag_list(tags: Any) -> list[str]:
    """Tags as RabbitMQ takes them: "a,b" (the API's and rabbitmqadmin's form) or a list."""
    if isinstance(tags, str):
        return [t.strip() for t in tags.split(",") if t.strip()]
    if isinstance(tags, list):
        return [str(t) for t in tags]
    return []


def optional_bool(body: dict[str, Any], key: str) -> bool | None:
    """A boolean field as RabbitMQ parses `tracing`: true/false or "true"/"false"; absent: None; else 400."""
    value = body.get(key)
    if value is None or isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise AccessError(f"{key}: not_boolean {value!r}")


class AccessEndpoints(Endpoints):
    @property
    def access(self) -> AccessControl:
        return self.broker.access

    # -- users ----------------------------------------------------------------------------------------------------

    async def users(self, request: Request) -> Any:
        return self._listing(request, [user_info(u) for u in self.access.list_users()])

    def _existing_user(self, name: str) -> User:
        user = self.access.get_user(name)
        if user is None:
            raise NotFound()
        return user

    async def user(self, request: Request, user: str) -> Any:
        return user_info(self._existing_user(user))

    async def put_user(self, request: Request, user: str) -> Any:
        """password, or password_hash (+ hashing_algorithm); neither: keep the current one (a new user without
        either may not log in with a password, as RabbitMQ's password-less users)."""
        body = await self._json(request)
        existing = self.access.get_user(user)
        tags = tag_list(body.get("tags", ""))
        if "password" in body:
            self.access.add_user(user, str(body["password"]), tags)
        elif "password_hash" in body:
            self.access.add_user(
                user,
                None,
                tags,
                password_hash=str(body["password_hash"]),
                hashing_algorithm=str(body.get("hashing_algorithm", SHA256)),
            )
        elif existing is not None:
            self.access.set_user_tags(user, tags)
        else:
            self.access.add_user(user, None, tags)
        return self._created(existing is not None)

    async def delete_user(self, request: Request, user: str) -> Any:
        self._existing_user(user)
        self.access.delete_user(user)
        return self._created(True)

    async def user_permissions(self, request: Request, user: str) -> Any:
        self._existing_user(user)
        items = [permission_info(u, v, p) for u, v, p in self.access.list_permissions() if u == user]
        return self._listing(request, items)

    async def user_topic_permissions(self, request: Request, user: str) -> Any:
        self._existing_user(user)
        items = [topic_permission_info(u, v, t) for u, v, t in self.access.list_topic_permissions() if u == user]
        return self._listing(request, items)

    # -- vhosts ---------------------------------------------------------------------------------------------------

    async def put_vhost(self, request: Request, vhost: str) -> Any:
        body = await self._json(request)
        existed = vhost in self.access.vhosts
        message_ids = optional_bool(body, VHOST_FIELD)
        self.access.add_vhost(vhost, str(body.get("description", "")), tag_list(body.get("tags", "")))
        if message_ids is not None:  # left out: unchanged, as RabbitMQ treats a missing `tracing`
            self.access.set_vhost_message_ids(vhost, message_ids)
        if not existed:  # RabbitMQ gives whoever creates a vhost over HTTP full permissions on it
            self.access.set_permissions(request.state.user.name, vhost)
        return self._created(existed)

    async def delete_vhost(self, request: Request, vhost: str) -> Any:
        if vhost not in self.access.vhosts:
            raise NotFound()
        self.access.delete_vhost(vhost)
        return self._created(True)

    async def vhost_permissions(self, request: Request, vhost: str) -> Any:
        if vhost not in self.access.vhosts:
            raise NotFound()
        items = [permission_info(u, v, p) for u, v, p in self.access.list_permissions() if v == vhost]
        return self._listing(request, items)

    # -- limits: RabbitMQ's [{"vhost"|"user": name, "value": {limit: n}}], one limit set or cleared at a time ----

    def _limits_of(self, kind: str, name: str | None) -> list[dict[str, Any]]:
        owners = self.access.list_vhosts() if kind == "vhost" else self.access.list_users()
        if name is not None and all(o.name != name for o in owners):
            raise NotFound()
        return [{kind: o.name, "value": dict(o.limits)} for o in owners if o.limits and name in (None, o.name)]

    async def vhost_limits(self, request: Request, vhost: str | None = None) -> Any:
        return self._limits_of("vhost", vhost)

    async def user_limits(self, request: Request, user: str | None = None) -> Any:
        return self._limits_of("user", user)

    async def _limit_value(self, request: Request) -> int:
        value = (await self._json(request)).get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            raise AccessError("value must be an integer")
        return value

    async def put_vhost_limit(self, request: Request, vhost: str, name: str) -> Any:
        owner = self.access.vhosts.get(vhost)
        if owner is None:
            raise NotFound()
        self.access.set_vhost_limits(vhost, {**owner.limits, name: await self._limit_value(request)})
        return self._created(True)

    async def delete_vhost_limit(self, request: Request, vhost: str, name: str) -> Any:
        owner = self.access.vhosts.get(vhost)
        if owner is None or name not in owner.limits:
            raise NotFound()
        self.access.set_vhost_limits(vhost, {k: v for k, v in owner.limits.items() if k != name})
        return self._created(True)

    async def put_user_limit(self, request: Request, user: str, name: str) -> Any:
        owner = self._existing_user(user)
        self.access.set_user_limits(user, {**owner.limits, name: await self._limit_value(request)})
        return self._created(True)

    async def delete_user_limit(self, request: Request, user: str, name: str) -> Any:
        owner = self._existing_user(user)
        if name not in owner.limits:
            raise NotFound()
        self.access.set_user_limits(user, {k: v for k, v in owner.limits.items() if k != name})
        return self._created(True)

    # -- permissions ----------------------------------------------------------------------------------------------

    async def permissions(self, request: Request) -> Any:
        return self._listing(request, [permission_info(u, v, p) for u, v, p in self.access.list_permissions()])

    def _pair_exists(self, vhost: str, user: str) -> None:
        if vhost not in self.access.vhosts or self.access.get_user(user) is None:
            raise NotFound()

    async def permission(self, request: Request, vhost: str, user: str) -> Any:
        self._pair_exists(vhost, user)
        p = self.access.get_permissions(user, vhost)
        if p is None:
            raise NotFound()
        return permission_info(user, vhost, p)

    async def put_permission(self, request: Request, vhost: str, user: str) -> Any:
        self._pair_exists(vhost, user)
        body = await self._json(request)
        existed = self.access.get_permissions(user, vhost) is not None
        self.access.set_permissions(
            user, vhost, str(body.get("configure", "")), str(body.get("write", "")), str(body.get("read", ""))
        )
        return self._created(existed)

    async def delete_permission(self, request: Request, vhost: str, user: str) -> Any:
        self._pair_exists(vhost, user)
        if self.access.get_permissions(user, vhost) is None:
            raise NotFound()
        self.access.clear_permissions(user, vhost)
        return self._created(True)

    async def topic_permissions(self, request: Request) -> Any:
        items = [topic_permission_info(u, v, t) for u, v, t in self.access.list_topic_permissions()]
        return self._listing(request, items)

    async def topic_permission(self, request: Request, vhost: str, user: str) -> Any:
        self._pair_exists(vhost, user)
        items = [
            topic_permission_info(u, v, t)
            for u, v, t in self.access.list_topic_permissions()
            if (u, v) == (user, vhost)
        ]
        if not items:
            raise NotFound()
        return items

    async def put_topic_permission(self, request: Request, vhost: str, user: str) -> Any:
        self._pair_exists(vhost, user)
        body = await self._json(request)
        exchange = body.get("exchange")
        if not isinstance(exchange, str):
            raise ValueError("exchange missing")
        held = self.access.topic_permissions.get((user, vhost), {})
        self.access.set_topic_permissions(
            user, vhost, exchange, str(body.get("write", FULL)), str(body.get("read", FULL))
        )
        return self._created(exchange in held)

    async def delete_topic_permission(self, request: Request, vhost: str, user: str) -> Any:
        self._pair_exists(vhost, user)
        if (user, vhost) not in self.access.topic_permissions:
            raise NotFound()
        self.access.clear_topic_permissions(user, vhost, request.query_params.get("exchange"))
        return self._created(True)


ACCESS_ROUTES: list[tuple[str, ...]] = [
    ("GET", "api/users", "users", "administrator"),
    ("GET", "api/users/{user}", "user", "administrator"),
    ("PUT", "api/users/{user}", "put_user", "administrator"),
    ("DELETE", "api/users/{user}", "delete_user", "administrator"),
    ("GET", "api/users/{user}/permissions", "user_permissions", "administrator"),
    ("GET", "api/users/{user}/topic-permissions", "user_topic_permissions", "administrator"),
    ("PUT", "api/vhosts/{vhost}", "put_vhost", "administrator"),
    ("DELETE", "api/vhosts/{vhost}", "delete_vhost", "administrator"),
    ("GET", "api/vhosts/{vhost}/permissions", "vhost_permissions", "administrator"),
    ("GET", "api/vhost-limits", "vhost_limits", "administrator"),
    ("GET", "api/vhost-limits/{vhost}", "vhost_limits", "administrator"),
    ("PUT", "api/vhost-limits/{vhost}/{name}", "put_vhost_limit", "administrator"),
    ("DELETE", "api/vhost-limits/{vhost}/{name}", "delete_vhost_limit", "administrator"),
    ("GET", "api/user-limits", "user_limits", "administrator"),
    ("GET", "api/user-limits/{user}", "user_limits", "administrator"),
    ("PUT", "api/user-limits/{user}/{name}", "put_user_limit", "administrator"),
    ("DELETE", "api/user-limits/{user}/{name}", "delete_user_limit", "administrator"),
    ("GET", "api/permissions", "permissions", "administrator"),
    ("GET", "api/permissions/{vhost}/{user}", "permission", "administrator"),
    ("PUT", "api/permissions/{vhost}/{user}", "put_permission", "administrator"),
    ("DELETE", "api/permissions/{vhost}/{user}", "delete_permission", "administrator"),
    ("GET", "api/topic-permissions", "topic_permissions", "administrator"),
    ("GET", "api/topic-permissions/{vhost}/{user}", "topic_permission", "administrator"),
    ("PUT", "api/topic-permissions/{vhost}/{user}", "put_topic_permission", "administrator"),
    ("DELETE", "api/topic-permissions/{vhost}/{user}", "delete_topic_permission", "administrator"),
]
