"""Users, virtual hosts and permissions: RabbitMQ's internal access-control model as one plain object.

`AccessControl` holds the model in memory, writes every change through to the catalogue (an `AccessStore`;
none with --in-memory), and answers the questions the protocol layer asks: may this user log in, open this
vhost, configure/write/read this resource, publish or bind this routing key on this topic exchange. Those
checks raise `errors.ChannelError` / `errors.ConnectionError` with RabbitMQ's reply codes and texts.

Password hashes use RabbitMQ's format (`rabbit_password_hashing_sha256`: base64 of a 4-byte salt followed by
SHA-256(salt + password)), so definitions move users between RabbitMQ and amqpd both ways.

Changes are seen by open connections at once: each check reads the current model (RabbitMQ caches a few
results per channel, so it may apply them later; never earlier).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from amqpd import errors

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"
_DIGESTS = {SHA256: hashlib.sha256, SHA512: hashlib.sha512, MD5: hashlib.md5}
KNOWN_TAGS = ("administrator", "monitoring", "policymaker", "management", "impersonator")
FULL = ".*"
VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")
# This broker's own clients (a shovel's `amqp://` without a user) log in as RabbitMQ's direct connections do,
# as its internal user "none" (rabbit_auth_backend_dummy), which may do anything: here with a password made
# at boot and known only to this process. A real user of that name, if someone adds one, takes precedence.
INTERNAL_USER = "none"


def hash_password(password: str, algorithm: str = SHA256, salt: bytes | None = None) -> str:
    """RabbitMQ's stored form: base64(salt(4) + digest(salt + utf8(password)))."""
    salt = os.urandom(4) if salt is None else salt
    digest = _DIGESTS[algorithm](salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password: str, password_hash: str, algorithm: str = SHA256) -> bool:
    """True when `password` matches; False for a password-less user (empty hash) or a damaged hash."""
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    if len(raw) <= 4 or algorithm not in _DIGESTS:
        return False
    return hmac.compare_digest(hash_password(password, algorithm, raw[:4]), password_hash)


@dataclass
class User:
    name: str
    password_hash: str = ""  # "" : no password, the user can only log in with a certificate (EXTERNAL)
    hashing_algorithm: str = SHA256
    tags: tuple[str, ...] = ()
    limits: dict[str, int] = field(default_factory=dict)  # max-connections, max-channels (negative: none)


@dataclass
class Vhost:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    limits: dict[str, int] = field(default_factory=dict)  # max-connections, max-queues (negative: none)
    message_ids: bool = False  # amqpd's own: every queue in it stamps x-amqpd-message-id (message_ids.py)


@dataclass(frozen=True)
class Permission:
    """Regular expressions matched (unanchored, as Erlang's re:run) against resource names; "" matches
    nothing (RabbitMQ reads it as ^$)."""

    configure: str = FULL
    write: str = FULL
    read: str = FULL


@dataclass(frozen=True)
class TopicPermission:
    exchange: str
    write: str = FULL
    read: str = FULL


class AccessStore(Protocol):
    """Where the model is kept (store.MessageStore implements it)."""

    def put_user(
        self, name: str, password_hash: str, hashing_algorithm: str, tags: str, limits: str = "{}"
    ) -> None: ...
    def delete_user(self, name: str) -> None: ...
    def put_vhost(self, name: str, description: str, tags: str, limits: str, message_ids: bool = False) -> None: ...
    def delete_vhost(self, name: str) -> None: ...
    def put_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> None: ...
    def delete_permission(self, user: str, vhost: str) -> None: ...
    def put_topic_permission(self, user: str, vhost: str, exchange: str, write: str, read: str) -> None: ...
    def delete_topic_permission(self, user: str, vhost: str, exchange: str | None) -> None: ...
    def mark_access_seeded(self) -> None: ...


class AccessObserver(Protocol):
    """Who must act when the model changes (the Broker: vhost objects, open connections)."""

    def vhost_added(self, name: str) -> None: ...
    def vhost_deleted(self, name: str) -> None: ...
    def vhost_message_ids(self, name: str, on: bool) -> None: ...
    def user_deleted(self, name: str) -> None: ...


class AccessError(ValueError):
    """An administrative request the model refuses (unknown user or vhost, bad regex, duplicate)."""


class AccessControl:
    def __init__(self, observer: AccessObserver | None = None, store: AccessStore | None = None) -> None:
        self.users: dict[str, User] = {}
        self.vhosts: dict[str, Vhost] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}  # (user, vhost)
        self.topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = {}  # (user, vhost) -> by exchange
        self.observer = observer
        self.store = store
        self.generation = 0  # bumped by every change: channels cache check results under it
        self.failed_logins = 0
        self._regex: dict[str, re.Pattern[str]] = {}
        self._dummy_hash = hash_password(os.urandom(8).hex())
        self.internal_password = secrets.token_urlsafe(32)

    # -- users ----------------------------------------------------------------------------------------------

    def add_user(
        self,
        name: str,
        password: str | None,
        tags: Iterable[str] = (),
        *,
        password_hash: str | None = None,
        hashing_algorithm: str = SHA256,
    ) -> User:
        """Create or replace a user. `password` None (and no `password_hash`): a password-less user.
        `password_hash`: an already hashed password, as definitions carry it."""
        if not name:
            raise AccessError("user name must not be empty")
        if hashing_algorithm not in _DIGESTS:
            raise AccessError(f"unknown hashing algorithm {hashing_algorithm!r}")
        if password_hash is None:
            password_hash = "" if password is None else hash_password(password, hashing_algorithm)
        old = self.users.get(name)
        user = User(name, password_hash, hashing_algorithm, _tags(tags), dict(old.limits) if old else {})
        self.users[name] = user
        self._save_user(user)
        return user

    def delete_user(self, name: str) -> None:
        """Remove a user with all its permissions; its open connections are closed (as RabbitMQ does)."""
        self._user(name)
        del self.users[name]
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[0] == name]:
            del self.topic_permissions[key]
        if self.store is not None:
            self.store.delete_user(name)
        self._changed()
        if self.observer is not None:
            self.observer.user_deleted(name)

    def change_password(self, name: str, password: str | None) -> None:
        """A new password (None: clear it; the user then needs a certificate)."""
        user = self._user(name)
        user.password_hash = "" if password is None else hash_password(password, user.hashing_algorithm)
        self._save_user(user)

    def set_user_tags(self, name: str, tags: Iterable[str]) -> None:
        user = self._user(name)
        user.tags = _tags(tags)
        self._save_user(user)

    def set_user_limits(self, name: str, limits: dict[str, int]) -> None:
        """Replace the user's limits: {"max-connections": n, "max-channels": n} over all its connections
        (rabbitmqctl set_user_limits); a negative value means no limit."""
        user = self._user(name)
        user.limits = _limits(limits, USER_LIMITS, "user")
        self._save_user(user)

    def user_limit(self, name: str, key: str) -> int | None:
        user = self.users.get(name)
        return None if user is None else user.limits.get(key)

    def get_user(self, name: str) -> User | None:
        return self.users.get(name)

    def list_users(self) -> list[User]:
        return [self.users[n] for n in sorted(self.users)]

    def authenticate(self, name: str, password: str) -> User | None:
        """The user when the password matches. Unknown users cost the same hash as known ones, so timing
        does not tell whether a user exists."""
        user = self.users.get(name)
        if user is None and self.is_internal(name):
            return User(name) if hmac.compare_digest(password, self.internal_password) else None
        if user is None or not user.password_hash:
            check_password(password, self._dummy_hash)
            return None
        return user if check_password(password, user.password_hash, user.hashing_algorithm) else None

    def is_internal(self, name: str) -> bool:
        """This broker's own client: it may do anything (and set any user_id, as RabbitMQ's direct one)."""
        return name == INTERNAL_USER and name not in self.users

    def is_impersonator(self, name: str) -> bool:
        if self.is_internal(name):
            return True
        user = self.users.get(name)
        return user is not None and "impersonator" in user.tags

    # -- vhosts ---------------------------------------------------------------------------------------------

    def add_vhost(self, name: str, description: str = "", tags: Iterable[str] = ()) -> Vhost:
        """Create a vhost (an existing one keeps its objects and limits; description and tags are updated)."""
        if not name:
            raise AccessError("vhost name must not be empty")
        vhost = self.vhosts.get(name)
        created = vhost is None
        if vhost is None:
            vhost = self.vhosts[name] = Vhost(name)
        vhost.description, vhost.tags = description, tuple(tags)
        self._save_vhost(vhost)
        if created and self.observer is not None:
            self.observer.vhost_added(name)
        return vhost

    def delete_vhost(self, name: str) -> None:
        """Remove a vhost and every permission in it; the observer closes its connections (320) and deletes
        its exchanges, queues and stored messages."""
        self._vhost(name)
        del self.vhosts[name]
        for key in [k for k in self.permissions if k[1] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[1] == name]:
            del self.topic_permissions[key]
        self._changed()
        if self.observer is not None:
            self.observer.vhost_deleted(name)  # before the store row goes: its queues are deleted first
        if self.store is not None:
            self.store.delete_vhost(name)

    def list_vhosts(self) -> list[Vhost]:
        return [self.vhosts[n] for n in sorted(self.vhosts)]

    def set_vhost_limits(self, name: str, limits: dict[str, int]) -> None:
        """Replace the vhost's limits: {"max-connections": n, "max-queues": n}; a negative value means no
        limit, as in RabbitMQ; 0 refuses every new connection / queue."""
        vhost = self._vhost(name)
        vhost.limits = _limits(limits, VHOST_LIMITS, "vhost")
        self._save_vhost(vhost)

    def set_vhost_message_ids(self, name: str, on: bool) -> None:
        """Turn time-ordered message ids on or off for every queue of the vhost, present and future."""
        vhost = self._vhost(name)
        vhost.message_ids = on
        self._save_vhost(vhost)
        if self.observer is not None:
            self.observer.vhost_message_ids(name, on)

    def vhost_limit(self, name: str, key: str) -> int | None:
        vhost = self.vhosts.get(name)
        return None if vhost is None else vhost.limits.get(key)

    # -- permissions ----------------------------------------------------------------------------------------

    def set_permissions(
        self, user: str, vhost: str, configure: str = FULL, write: str = FULL, read: str = FULL
    ) -> None:
        self._user(user)
        self._vhost(vhost)
        for pattern in (configure, write, read):
            self._compile(pattern)
        self.permissions[(user, vhost)] = Permission(configure, write, read)
        if self.store is not None:
            self.store.put_permission(user, vhost, configure, write, read)
        self._changed()

    def clear_permissions(self, user: str, vhost: str) -> None:
        """The user may no longer open the vhost; its open connections there fail their next check."""
        if self.permissions.pop((user, vhost), None) is not None and self.store is not None:
            self.store.delete_permission(user, vhost)
        self._changed()

    def get_permissions(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    def list_permissions(self) -> list[tuple[str, str, Permission]]:
        return [(u, v, p) for (u, v), p in sorted(self.permissions.items())]

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str = FULL, read: str = FULL) -> None:
        self._user(user)
        self._vhost(vhost)
        for pattern in (write, read):
            self._compile(pattern)
        self.topic_permissions.setdefault((user, vhost), {})[exchange] = TopicPermission(exchange, write, read)
        if self.store is not None:
            self.store.put_topic_permission(user, vhost, exchange, write, read)
        self._changed()

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """One exchange's topic permission, or (exchange None) all of the user's in the vhost."""
        held = self.topic_permissions.get((user, vhost), {})
        if exchange is None:
            held.clear()
        else:
            held.pop(exchange, None)
        if not held:
            self.topic_permissions.pop((user, vhost), None)
        if self.store is not None:
            self.store.delete_topic_permission(user, vhost, exchange)
        self._changed()

    def list_topic_permissions(self) -> list[tuple[str, str, TopicPermission]]:
        return [(u, v, tp) for (u, v), held in sorted(self.topic_permissions.items()) for tp in held.values()]

    # -- checks (what the protocol layer asks) --------------------------------------------------------------

    def may_open_vhost(self, user: str, vhost: str) -> bool:
        """RabbitMQ's internal backend: a user may open a vhost where it holds permissions."""
        return vhost in self.vhosts and ((user, vhost) in self.permissions or self.is_internal(user))

    def allowed(self, user: str, vhost: str, name: str, perm: str) -> bool:
        """May `user` do `perm` ("configure", "write", "read") on the resource `name`?"""
        p = self.permissions.get((user, vhost))
        if p is None:
            return self.is_internal(user)
        return self._compile(getattr(p, perm)).search(name) is not None

    def check_resource(self, user: str, vhost: str, kind: str, name: str, perm: str) -> None:
        """403 ACCESS_REFUSED unless allowed; kind is "exchange" or "queue" (for the text)."""
        if kind == "exchange" and name == "":
            name = "amq.default"  # rabbit_access_control: the default exchange is checked under this name
        if not self.allowed(user, vhost, name, perm):
            raise errors.access_refused(f"access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'")

    def topic_allowed(self, user: str, vhost: str, exchange: str, routing_key: str, perm: str) -> bool:
        """No topic permission for the exchange: allowed. Otherwise its pattern (after expanding
        {username} and {vhost}) must match the routing key."""
        held = self.topic_permissions.get((user, vhost))
        tp = held.get(exchange) if held else None
        if tp is None:
            return True
        pattern = getattr(tp, perm).replace("{username}", user).replace("{vhost}", vhost)
        return self._compile(pattern).search(routing_key) is not None

    def check_topic(self, user: str, vhost: str, exchange: str, routing_key: str, perm: str) -> None:
        if not self.topic_allowed(user, vhost, exchange, routing_key, perm):
            raise errors.access_refused(
                f"access to topic '{routing_key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'"
            )

    # -- loading and saving ---------------------------------------------------------------------------------

    def seed(self, users: dict[str, str], vhosts: Iterable[str]) -> None:
        """The defaults of a fresh node: each vhost, each user an administrator with full permissions on
        every vhost (RabbitMQ's guest/guest on "/")."""
        for vhost in vhosts:
            self.add_vhost(vhost, "Default virtual host" if vhost == "/" else "")
        for name, password in users.items():
            self.add_user(name, password, ["administrator"])
            for vhost in self.vhosts:
                self.set_permissions(name, vhost)

    def attach(self, store: AccessStore, rows: Any) -> None:
        """Start writing through to `store`. `rows` (store.AccessRows) is what it held: the model when the
        data dir has been seeded before, else the current (seeded) model is written to it once."""
        if not rows.seeded:
            self.store = store
            for user in self.users.values():
                self._save_user(user)
            for vhost in self.vhosts.values():
                self._save_vhost(vhost)
            for (u, v), p in self.permissions.items():
                store.put_permission(u, v, p.configure, p.write, p.read)
            for (u, v), held in self.topic_permissions.items():
                for tp in held.values():
                    store.put_topic_permission(u, v, tp.exchange, tp.write, tp.read)
            store.mark_access_seeded()
            return
        self.store = None  # loading must not write back
        for name in [n for n in self.vhosts if n not in {row[0] for row in rows.vhosts}]:
            self.delete_vhost(name)
        self.users.clear()
        self.permissions.clear()
        self.topic_permissions.clear()
        for name, password_hash, algorithm, tags, *limits in rows.users:
            self.add_user(name, None, json.loads(tags), password_hash=password_hash, hashing_algorithm=algorithm)
            self.users[name].limits = dict(json.loads(limits[0])) if limits else {}
        for name, description, tags, limits, message_ids in rows.vhosts:
            self.add_vhost(name, description, json.loads(tags))
            self.vhosts[name].limits = dict(json.loads(limits))
            self.set_vhost_message_ids(name, bool(message_ids))
        for user, vhost, configure, write, read in rows.permissions:
            self.permissions[(user, vhost)] = Permission(configure, write, read)
        for user, vhost, exchange, write, read in rows.topic_permissions:
            self.topic_permissions.setdefault((user, vhost), {})[exchange] = TopicPermission(exchange, write, read)
        self.store = store
        self._changed()

    def _save_user(self, user: User) -> None:
        if self.store is not None:
            self.store.put_user(
                user.name,
                user.password_hash,
                user.hashing_algorithm,
                json.dumps(list(user.tags)),
                json.dumps(user.limits),
            )
        self._changed()

    def _save_vhost(self, vhost: Vhost) -> None:
        if self.store is not None:
            tags, limits = json.dumps(list(vhost.tags)), json.dumps(vhost.limits)
            self.store.put_vhost(vhost.name, vhost.description, tags, limits, vhost.message_ids)
        self._changed()

    def _changed(self) -> None:
        self.generation += 1

    def _user(self, name: str) -> User:
        user = self.users.get(name)
        if user is None:
            raise AccessError(f"no such user: {name!r}")
        return user

    def _vhost(self, name: str) -> Vhost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise AccessError(f"no such vhost: {name!r}")
        return vhost

    def _compile(self, pattern: str) -> re.Pattern[str]:
        compiled = self._regex.get(pattern)
        if compiled is None:
            try:
                compiled = re.compile(pattern or "^$")
            except re.error as exc:
                raise AccessError(f"invalid regular expression {pattern!r}: {exc}") from None
            if len(self._regex) > 1024:
                self._regex.clear()
            self._regex[pattern] = compiled
        return compiled


def _limits(limits: dict[str, int], known: tuple[str, ...], what: str) -> dict[str, int]:
    for key, value in limits.items():
        if key not in known:
            raise AccessError(f"unknown {what} limit {key!r} (known: {', '.join(known)})")
        if not isinstance(value, int) or isinstance(value, bool):
            raise AccessError(f"{what} limit {key} must be an integer")
    return {k: v for k, v in limits.items() if v >= 0}


def _tags(tags: Iterable[str]) -> tuple[str, ...]:
    if isinstance(tags, str):  # "administrator,monitoring", as rabbitmqctl and definitions write them
        tags = tags.split(",")
    return tuple(t.strip() for t in tags if t.strip())
