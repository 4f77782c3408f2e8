"""The connection's opening, one function per handshake method the connection's table (states.py) takes:
start-ok (the login), tune-ok (the negotiated limits), open (the vhost), and update-secret once open.

Each works on the session through `Opening`, what it needs of one; the table moves the state on once the step
returns (a refused step raises, or hangs up, and the state stays).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from amqpd import __version__, errors
from amqpd.protocol.constants import ACCEPTED_HEADERS, FRAME_MIN_SIZE, PROTOCOL_HEADER
from amqpd.protocol.frames import FrameReader
from amqpd.session.login import authenticate, check_connection_limits

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.routing.vhost import VirtualHost
    from amqpd.config import Settings

log = logging.getLogger("amqpd.session")

CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
)


def server_properties() -> dict[str, Any]:
    return {
        "product": "amqpd",
        "version": __version__,
        "platform": "Python",
        "copyright": "amqpd contributors",
        "information": "Licensed under the MIT license",
        "cluster_name": "amqpd",
        "capabilities": dict.fromkeys(CAPABILITIES, True),
    }


class Opening(Protocol):
    """What the handshake needs of its session."""

    broker: Broker
    settings: Settings
    peer: str
    tls: bool
    cert_user: str | None
    user: str
    vhost: VirtualHost | None
    client_properties: dict[str, Any]
    consumer_cancel_notify: bool
    auth_failure_close: bool
    close_reason: str
    frame_max: int
    channel_max: int
    heartbeat: int
    reader: FrameReader
    on_open: Callable[[], None] | None

    @property
    def name(self) -> str: ...
    @property
    def client_name(self) -> str: ...
    @property
    def capabilities(self) -> dict[str, Any]: ...
    def send_method(self, channel: int, method: Any) -> None: ...
    def hang_up(self) -> None: ...


def protocol_header(buf: bytes) -> bool | None:
    """Whether the client's first bytes ask for AMQP 0-9-1; None while too few to tell."""
    if len(buf) < 8:
        return None if PROTOCOL_HEADER.startswith(buf[:4]) else False
    return buf[:8] in ACCEPTED_HEADERS


def start(conn: Opening) -> None:
    """connection.start: what the server is, and the mechanisms it offers (EXTERNAL only over TLS)."""
    mechanisms = "PLAIN AMQPLAIN EXTERNAL" if conn.tls else "PLAIN AMQPLAIN"
    conn.send_method(0, commands.Connection.Start(0, 9, server_properties(), mechanisms, "en_US"))


def start_ok(conn: Opening, m: commands.Connection.StartOk) -> None:
    conn.client_properties = m.client_properties or {}
    caps = conn.capabilities
    conn.consumer_cancel_notify = bool(caps.get("consumer_cancel_notify"))
    conn.auth_failure_close = bool(caps.get("authentication_failure_close"))
    user, reason = authenticate(conn.broker, m.mechanism, m.response, conn.tls, conn.cert_user, conn.peer)
    if reason is not None:
        _refuse_login(conn, m.mechanism, user, reason)
        return
    conn.user = user
    s = conn.settings
    conn.send_method(0, commands.Connection.Tune(s.channel_max, s.frame_max, s.heartbeat))


def _refuse_login(conn: Opening, mechanism: str, user: str, reason: str) -> None:
    """RabbitMQ's auth_fail: the client learns only that the login was refused (403 when it asked for
    authentication_failure_close, else the socket closes); the log says why, and from where."""
    conn.broker.access.failed_logins += 1
    conn.close_reason = f"{mechanism} login refused for user '{user}': {reason}"
    log.warning("%s login refused for user '%s' from %s: %s", mechanism, user, conn.peer, reason)
    if not conn.auth_failure_close:
        conn.hang_up()
        return
    raise errors.ConnectionError(
        errors.ACCESS_REFUSED,
        f"Login was refused using authentication mechanism {mechanism}. For details see the broker logfile.",
    )


def tune_ok(conn: Opening, m: commands.Connection.TuneOk) -> None:
    s = conn.settings
    # 0 means "no limit", which is above ours: RabbitMQ refuses it too (validate_negotiated_integer_value).
    if m.frame_max and m.frame_max < FRAME_MIN_SIZE:
        raise errors.ConnectionError(
            errors.NOT_ALLOWED,
            f"negotiated frame_max = {m.frame_max} is lower than the minimum allowed value ({FRAME_MIN_SIZE})",
            10,
            31,
        )
    for name, value, limit in (
        ("frame_max", m.frame_max, s.frame_max),
        ("channel_max", m.channel_max, s.channel_max),
    ):
        if limit and (value == 0 or value > limit):
            raise errors.ConnectionError(
                errors.NOT_ALLOWED,
                f"negotiated {name} = {value} is higher than the maximum allowed value ({limit})",
                10,
                31,
            )
    conn.frame_max = m.frame_max or s.frame_max
    conn.reader.frame_max = conn.frame_max
    conn.channel_max = m.channel_max or s.channel_max
    conn.heartbeat = m.heartbeat


def open_vhost(conn: Opening, m: commands.Connection.Open) -> None:
    broker = conn.broker
    vhost = broker.vhosts.get(m.virtual_host)
    if vhost is None:
        raise errors.ConnectionError(errors.NOT_ALLOWED, f"vhost {m.virtual_host} not found", 10, 40)
    check_connection_limits(broker, conn.user, vhost.name)
    if not broker.access.may_open_vhost(conn.user, vhost.name):
        raise errors.ConnectionError(
            errors.NOT_ALLOWED, f"access to vhost '{vhost.name}' refused for user '{conn.user}'", 10, 40
        )
    conn.vhost = vhost
    broker.connections.add(conn)
    conn.send_method(0, commands.Connection.OpenOk(""))
    log.info(
        "connection %s: user '%s' authenticated and granted access to vhost '%s'",
        conn.name,
        conn.user,
        vhost.name,
        extra={"peer": conn.peer, "user": conn.user, "vhost": vhost.name, "client_name": conn.client_name},
    )
    if conn.on_open is not None:
        conn.on_open()


def update_secret(conn: Opening, m: commands.Connection.UpdateSecret) -> None:
    """Token refresh (OAuth 2 clients): the connection carries on under the new secret if the broker accepts it
    for the connection's user; if not, RabbitMQ's answer (rabbit_reader) closes it."""
    secret = m.new_secret if isinstance(m.new_secret, str) else bytes(m.new_secret or b"").decode(errors="replace")
    if not conn.broker.accepts_secret(conn.user, secret):
        log.info("secret update refused for user %r from %s", conn.user, conn.peer)
        raise errors.ConnectionError(errors.NOT_ALLOWED, "New secret was refused by one of the backends", 10, 70)
    conn.send_method(0, commands.Connection.UpdateSecretOk())
