"""What publishing to one exchange with one routing key does, decided once for every message that goes there.

A plan holds the route and every rule that can make a message's fate more than "pushed to these queues": a
delaying exchange, queues with length limits or deduplication (Publisher.admit), queues that stamp ids
(message_ids.py), the store (durable queues for persistent messages, streams for any). The single-message
path (publish/publisher.py, Publisher.publish) applies the plan to one message; back-to-back publishes to one place
(PublishGroups.run with equal properties, PublishGroups.group with each its own) apply it to many at once when
it says "straight to this queue", which it says only when none of those steps applies, or, in confirm mode,
"stored to this queue" (`stored_to`), when the store is the only one. So a new rule is a field
here that the single path reads and that `plain` or `straight_to` takes into account: both paths then follow it
(tests/unit/test_publish_run.py checks that they agree).

Plans are cached per (exchange, routing key) by the vhost, with its routes, and dropped with them on any
change of bindings, queues, exchanges or policies. They do not depend on the message's properties:
`straight_to` takes the property class of the messages it is asked about.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amqpd.protocol.constants import FLAG_EXPIRATION, FLAG_HEADERS, FLAG_REPLY_TO, FLAG_USER_ID

if TYPE_CHECKING:
    from amqpd.broker.queues.queue import Queue
    from amqpd.broker.routing.exchanges import Exchange

# Properties whose value each message's own step decides about, on the single path: expiration (TTL), reply_to
# (direct reply-to rewrite), user_id (checked), and a continuation flag word (properties beyond the first 15).
# Headers count only where they may route or delay (straight_to).
PER_MESSAGE_FLAGS = FLAG_EXPIRATION | FLAG_REPLY_TO | FLAG_USER_ID | 1


class PublishPlan:
    """The route of (exchange, routing key) for a message whose headers do not change it, and the publish
    steps it takes on that route."""

    __slots__ = (
        "exchange",
        "queues",
        "needs_headers",
        "delays",
        "limited",
        "stamps",
        "always_stored",
        "durable",
        "plain",
        "stored",
    )

    def __init__(self, ex: Exchange | None, queues: list[Queue], needs_headers: bool) -> None:
        self.exchange = ex  # counts the publishes that take the plan (Exchange.publish_in / publish_out)
        self.queues = queues  # shared with every user of the plan: never changed
        self.needs_headers = needs_headers  # a headers exchange on the way: a message with headers may go elsewhere
        self.delays = ex is not None and ex.delays  # x-delayed-message: a message with x-delay waits first
        self.limited = any(q.limited for q in queues)  # some queue may refuse or drop it (Publisher.admit)
        self.stamps = any(q.stamps_ids for q in queues)  # the message gets a time-ordered id (message_ids.py)
        self.always_stored = any(q.always_stored for q in queues)  # a stream: stored even when transient
        self.durable = any(q.store_id is not None for q in queues)  # a persistent message is stored
        # The one queue where a message goes with nothing done on the way but the push, which itself does
        # nothing but hand it on (Queue.takes_as_sent); None when any step above applies (a delay needs
        # headers: straight_to refuses those).
        plain = len(queues) == 1 and not (self.limited or self.stamps or self.always_stored)
        self.plain = queues[0] if plain and queues[0].takes_as_sent() else None
        # The one durable queue or stream where a message goes with nothing done on the way but the store and
        # the push (PublishGroups.group in confirm mode stores many in one append); None when any other
        # step applies.
        alone = len(queues) == 1 and not (self.limited or self.stamps) and queues[0].store_id is not None
        self.stored = queues[0] if alone else None

    def straight_to(self, flags: int, persistent: bool, names_keys: bool) -> Queue | None:
        """The queue that a message of this property class goes to with no step applied but the push; None when
        some step may apply to it. flags: its property flags; persistent: delivery mode 2; names_keys: its
        headers may hold CC or BCC routing keys (message.may_name_keys)."""
        if flags & PER_MESSAGE_FLAGS or (persistent and self.durable):
            return None
        if flags & FLAG_HEADERS and (names_keys or self.needs_headers or self.delays):
            return None
        return self.plain

    def stored_to(self, flags: int, persistent: bool, names_keys: bool) -> Queue | None:
        """The queue that a message of this property class goes to with no step applied but the store and the
        push; None when some other step may apply, or when it would not be stored (a transient message to a
        queue that is not a stream). Arguments as for straight_to."""
        queue = self.stored
        if queue is None or flags & PER_MESSAGE_FLAGS or not (persistent or queue.always_stored):
            return None
        if flags & FLAG_HEADERS and (names_keys or self.needs_headers or self.delays):
            return None
        return queue


NOWHERE = PublishPlan(None, [], False)  # no such exchange (it went while a transaction waited to commit)


def count_publishes(plan: PublishPlan, n: int) -> None:
    """n publishes that went, each to the plan's one queue, on a batched path."""
    ex = plan.exchange
    if ex is not None:
        ex.publish_in += n
        ex.publish_out += n
