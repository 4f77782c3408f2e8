"""Who may connect, and how many: the login of connection.start-ok (PLAIN, AMQPLAIN, EXTERNAL with a verified
client certificate), loopback-only users, and the connection and channel limits of the vhost, the user and the
node, checked in rabbit_reader's order with its texts.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.protocol.methods import decode_table

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker

_u32 = struct.Struct(">I")


def authenticate(
    broker: Broker, mechanism: str, response: str | bytes, tls: bool, cert_user: str | None, peer: str
) -> tuple[str, str | None]:
    """(user, why the login is refused, or None when it is not)."""
    reason = None
    if mechanism == "EXTERNAL" and tls:
        user = cert_user or ""
        if not user:
            reason = "no verified client certificate"
        elif broker.access.get_user(user) is None:
            reason = "invalid credentials"  # certificate-only users need no password, but must exist
    else:
        user, password = credentials(mechanism, response)
        if broker.login(user, password) is None:
            reason = "invalid credentials"  # the same for an unknown user: the log must not tell them apart
    if reason is None and user in broker.settings.loopback_users and not from_loopback(peer):
        reason = f"user '{user}' can only connect via localhost"
    return user, reason


def credentials(mechanism: str, response: str | bytes) -> tuple[str, str]:
    raw = response.encode("latin-1") if isinstance(response, str) else bytes(response)
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            return "", ""
        return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
    if mechanism == "AMQPLAIN":
        table = decode_table(_u32.pack(len(raw)) + raw)
        login, password = table.get("LOGIN", ""), table.get("PASSWORD", "")
        return text(login), text(password)
    raise errors.ConnectionError(errors.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'", 10, 11)


def from_loopback(peer: str) -> bool:
    """Is the peer on this machine? A TCP peer is always an IP address; anything else is a session driven
    without a socket (tests), which is local."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return True
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1 from a dual-stack listener
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def check_connection_limits(broker: Broker, user: str, vhost: str) -> None:
    """rabbit_reader's order: the vhost's max-connections, the user's, then (ours) the node's."""
    refused = f"access to vhost '{vhost}' refused for user '{user}'"
    limit = broker.access.vhost_limit(vhost, "max-connections")
    if limit is not None and broker.connection_count(vhost) >= limit:
        raise errors.ConnectionError(errors.NOT_ALLOWED, f"{refused}: connection limit ({limit}) is reached", 10, 40)
    limit = broker.access.user_limit(user, "max-connections")
    if limit is None:
        limit = broker.settings.max_connections_per_user or None
    if limit is not None and broker.connections.count_of_user(user) >= limit:
        raise errors.ConnectionError(
            errors.NOT_ALLOWED,
            f"connection refused for user '{user}': user connection limit ({limit}) is reached",
            10,
            40,
        )
    limit = broker.settings.max_connections
    if limit and len(broker.connections) >= limit:
        raise errors.ConnectionError(
            errors.NOT_ALLOWED, f"connection refused: node connection limit ({limit}) is reached", 10, 40
        )


def check_channel_limits(broker: Broker, user: str, open_channels: int, channel_max: int) -> None:
    """channel_max limits how many channels are open at once, not their ids, as in RabbitMQ (aiormq opens
    channel 65535 on purpose; a client that negotiated 3 may open channel 4 while it has fewer than 3); then the
    user's max-channels over all its connections (rabbitmqctl set_user_limits)."""
    if open_channels >= channel_max:
        raise errors.ConnectionError(
            errors.NOT_ALLOWED,
            f"number of channels opened ({open_channels}) has reached the negotiated channel_max ({channel_max})",
        )
    limit = broker.access.user_limit(user, "max-channels")
    if limit is not None and broker.connections.channel_count_of_user(user) >= limit:
        raise errors.ConnectionError(
            errors.NOT_ALLOWED,
            f"number of channels opened for user '{user}' has reached the maximum "
            f"allowed user limit of ({limit})",  # RabbitMQ 3.10 names no method (0/0), as for channel_max
        )


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
