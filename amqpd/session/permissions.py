"""One channel's permission checks, at the points where rabbit_channel makes them: configure, read and write on
resources, topic permissions, the default exchange, an impersonated user_id, a vhost's queue limit.

Publishing is checked once per exchange: the exchanges this channel's user may publish to whatever the routing
key are remembered under the access model's generation (`AccessControl.generation`), and any change to users or
permissions empties that memory, so a revoked permission applies to the next publish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqpd import errors
from amqpd.protocol.constants import FLAG_USER_ID

if TYPE_CHECKING:
    from amqpd.broker.broker import Broker
    from amqpd.broker.message import Message
    from amqpd.broker.routing.vhost import VirtualHost


class Permissions:
    def __init__(self, broker: Broker, conn: Any, vhost: VirtualHost) -> None:
        self.broker = broker
        self.access = broker.access
        self.conn = conn  # its user, known once the connection is open
        self.vhost = vhost
        self.access_generation = -1
        self.may_publish_to: set[str] = set()

    def cleared(self, ex: Any, exchange: str, flags: int) -> bool:
        """Whether a publish to `ex` passes every check of check_publish without checking: the exchange exists
        and is not internal, this user may publish to it whatever the routing key (learnt once per access
        model), and there is no user_id to compare."""
        if ex is None or ex.internal or flags & FLAG_USER_ID:
            return False
        return self._known(exchange) or self._learn(ex)

    def _known(self, exchange: str) -> bool:
        """Checked before, under the current access model: write permission, no topic permission in play."""
        if self.access_generation != self.access.generation:
            self.access_generation = self.access.generation
            self.may_publish_to.clear()
            return False
        return exchange in self.may_publish_to

    def check_publish(self, ex: Any, msg: Message) -> None:
        """The rare refusals, kept off the per-message path, in rabbit_channel's order: write permission,
        missing or internal exchange, topic permission, forged user_id."""
        self._known(msg.exchange)  # forgets what an older access model allowed
        try:
            user = self.conn.user
            self.access.check_resource(user, self.vhost.name, "exchange", msg.exchange, "write")
            if ex is None:
                self.vhost.exchange(msg.exchange)
            elif ex.internal:
                raise errors.access_refused(
                    f"cannot publish to internal exchange '{msg.exchange}' in vhost '{self.vhost.name}'"
                )
            if ex.type_name == "topic":
                self.access.check_topic(user, self.vhost.name, msg.exchange, msg.routing_key, "write")
            if msg.flags & FLAG_USER_ID:
                self._check_user_id(msg)
            self._learn(ex)
        except errors.AMQPError as exc:
            raise exc.with_method(60, 40) from None

    def _learn(self, ex: Any) -> bool:
        """Remember that this user may publish to `ex` whatever the routing key (write permission, and no
        topic permission in play), so the next publishes skip the checks."""
        user, vhost = self.conn.user, self.vhost.name
        if not self.access.allowed(user, vhost, ex.name or "amq.default", "write"):
            return False
        if ex.type_name == "topic" and self.access.topic_permissions.get((user, vhost)):
            return False
        self.may_publish_to.add(ex.name)
        return True

    def _check_user_id(self, msg: Message) -> None:
        """Compared as bytes, the other properties left undecoded (pamqp refuses some values RabbitMQ takes)."""
        user_id = msg.raw_property(FLAG_USER_ID)
        if (
            user_id is not None
            and user_id != self.conn.user.encode()
            and not self.access.is_impersonator(self.conn.user)
        ):
            raise errors.precondition_failed(
                f"user_id property set to '{user_id.decode(errors='replace')}' but authenticated user was "
                f"'{self.conn.user}'"
            )

    def permit(self, kind: str, name: str, perm: str) -> None:
        self.access.check_resource(self.conn.user, self.vhost.name, kind, name, perm)

    def may_configure(self, kind: str, name: str) -> None:
        self.permit(kind, name, "configure")

    def may_create(self, kind: str, name: str, arguments: dict) -> None:
        """A new exchange with an alternate exchange, or a new queue with a dead-letter exchange, needs read on
        itself and write on the other; a new queue must fit the vhost's max-queues."""
        if kind == "queue":
            self.broker.check_queue_limit(self.vhost, name)
        other = arguments.get("alternate-exchange" if kind == "exchange" else "x-dead-letter-exchange")
        if isinstance(other, (str, bytes)):
            self.permit(kind, name, "read")
            self.permit("exchange", other.decode() if isinstance(other, bytes) else other, "write")

    def permit_binding(self, source: str, dest_kind: str, dest: str, routing_key: str) -> None:
        """rabbit_channel:binding_action: write on the destination, the default exchange refused at either
        end, read on the source, and the topic read permission for the binding key."""
        self.permit(dest_kind, dest, "write")
        if source == "" or (dest_kind == "exchange" and dest == ""):
            raise errors.access_refused("operation not permitted on the default exchange")
        self.permit("exchange", source, "read")
        ex = self.vhost.exchanges.get(source)
        if ex is not None and ex.type_name == "topic":
            self.access.check_topic(self.conn.user, self.vhost.name, source, routing_key, "read")
