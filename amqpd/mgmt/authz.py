"""Who may see and do what through the management API: RabbitMQ's user tags.

- no management tag: may not use the API at all ("Not management user");
- management: objects in the vhosts it holds permissions on, its own connections and channels;
- policymaker: management, plus policies in those vhosts;
- monitoring: management, plus every vhost's objects and every connection (read only where it lacks
  permissions);
- administrator: everything, including users, vhosts, permissions and definitions.
AMQP operations (declare, delete, bind, publish, get, purge) are further checked against the user's
configure/write/read permissions, as a client connection would be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqpd.broker.access.control import AccessControl, User

MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})
# Each level and the tags that reach it.
LEVELS = {
    "management": MANAGEMENT_TAGS,
    "policymaker": frozenset({"administrator", "policymaker"}),
    "monitoring": frozenset({"administrator", "monitoring"}),
    "administrator": frozenset({"administrator"}),
}
REFUSALS = {
    "management": "Not management user",
    "policymaker": "User not authorised to access object",
    "monitoring": "Not monitor user",
    "administrator": "Not administrator user",
}


class NotAuthorised(Exception):
    """401 {"error": "not_authorised", "reason": ...}."""


def check_level(user: User, level: str) -> None:
    if not LEVELS["management"] & set(user.tags):
        raise NotAuthorised(REFUSALS["management"])
    if not LEVELS[level] & set(user.tags):
        raise NotAuthorised(REFUSALS[level])


def sees_everything(user: User) -> bool:
    return bool(LEVELS["monitoring"] & set(user.tags))


def may_read_vhost(access: AccessControl, user: User, vhost: str) -> bool:
    return sees_everything(user) or access.may_open_vhost(user.name, vhost)


def check_vhost(access: AccessControl, user: User, vhost: str, write: bool) -> None:
    """Writes need permissions on the vhost, whatever the tags (as RabbitMQ); reads need them too unless
    the user monitors everything."""
    allowed = access.may_open_vhost(user.name, vhost) if write else may_read_vhost(access, user, vhost)
    if not allowed:
        raise NotAuthorised("User not authorised to access virtual host")
