"""Publishes that differ only by body, back to back in one read (a publisher in a loop), may be routed once and
delivered in one pass. Whatever the exchange, queue, consumer and channel features in play, the clients must see
exactly the bytes they see when the same publishes arrive one per read, and the queue must end up the same."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from fakes import Conn, decode_frames, messages, new_broker, publish_frames
from pamqp import commands, frame
from pamqp import header as header_frame

from amqpd.broker.broker import Broker
from amqpd.broker.queues.queue import Queue
from amqpd.config import Settings
from amqpd.mgmt.objects import queue_info, totals
from amqpd.mgmt.stats import Rates
from amqpd.session.channel import Channel
from store.records import MessageRecord

BODIES = [bytes([65 + i]) * 100 for i in range(5)]


def bodies(size: int) -> list[bytes]:
    return [bytes([65 + i]) * size for i in range(5)]


class FakeStore:
    """Just enough of store.MessageStore for durable queues and persistent messages (nothing is ever synced)."""

    def __init__(self) -> None:
        self.appended: list[tuple[bytes, list[int]]] = []
        self.acked: list[tuple[int, int]] = []
        self.records: dict[int, MessageRecord] = {}

    def put_queue(self, vhost: str, name: str, auto_delete: bool, arguments: dict) -> int:
        return 1

    def put_exchange(self, *args: Any) -> None:
        pass

    def put_binding(self, *args: Any) -> None:
        pass

    def append(self, record: Any, queue_ids: list[int], on_durable: Any = None) -> int:
        self.appended.append((record.body, list(queue_ids)))
        return len(self.appended) - 1

    def ack(self, queue_id: int, offset: int) -> None:
        self.acked.append((queue_id, offset))

    def ack_many(self, queue_id: int, offsets: list[int]) -> None:
        self.acked.extend((queue_id, offset) for offset in offsets)

    def read_many(self, offsets: list[int], ahead: Any = None) -> list[MessageRecord | None]:
        return [self.records.get(o) for o in offsets]

    def recovered(self, queue: Queue, bodies: list[bytes]) -> None:
        """queue's backlog after a restart: these messages, as store offsets not yet read back."""
        header = frame.marshal(header_frame.ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)), 1)[7:-1]
        first = 1000 + len(self.records)
        for i, body in enumerate(bodies):
            self.records[first + i] = MessageRecord("", queue.name, header, body, 1)
        queue.adopt_backlog(list(range(first, first + len(bodies))), set())


@dataclass
class Case:
    fast: bool  # whether the one-pass delivery should be taken
    setup: list[tuple[str, Any]] = field(default_factory=list)  # ("pub" | "con", pamqp method)
    exchange: str = ""
    routing_key: str = "q"
    mandatory: bool = False
    properties: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    consumer_frame_max: int = 131072
    durable_store: bool = False
    before: Callable[[Conn, Conn], None] | None = None  # last-moment changes (flow control)
    recovered: list[bytes] = field(default_factory=list)  # q's backlog on the store, after the setup
    reply: bool = False  # publish to the consumer's direct reply-to address (routing_key is then ignored)
    method: bytes | None = None  # a publish method payload to use instead of the one built from the fields
    size: int = 100  # of each body


def declare(name: str = "q", **kwargs: Any) -> tuple[str, Any]:
    return ("pub", commands.Queue.Declare(queue=name, **kwargs))


def exchange(name: str, kind: str, **kwargs: Any) -> tuple[str, Any]:
    return ("pub", commands.Exchange.Declare(exchange=name, exchange_type=kind, **kwargs))


def consume(tag: str = "c", queue: str = "q", no_ack: bool = True, **kwargs: Any) -> tuple[str, Any]:
    return ("con", commands.Basic.Consume(queue=queue, consumer_tag=tag, no_ack=no_ack, **kwargs))


CASES: dict[str, Case] = {
    "plain no-ack consumer": Case(True, [declare(), consume()]),
    "mandatory, routed": Case(True, [declare(), consume()], mandatory=True),
    "persistent to a transient queue": Case(True, [declare(), consume()], properties={"delivery_mode": 2}),
    "properties forwarded as sent": Case(
        True, [declare(), consume()], properties={"content_type": "text/plain", "message_id": "m", "app_id": "a"}
    ),
    "priority queue, empty": Case(
        True, [declare(arguments={"x-max-priority": 5}), consume()], properties={"priority": 3}
    ),
    "single active consumer": Case(
        True, [declare(arguments={"x-single-active-consumer": True}), consume("c1"), consume("c2")]
    ),
    "through an alternate exchange": Case(
        True,
        [
            exchange("x", "direct", arguments={"alternate-exchange": "ae"}),
            exchange("ae", "fanout"),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="ae", routing_key="")),
            consume(),
        ],
        exchange="x",
        routing_key="nowhere",
    ),
    "unroutable, mandatory": Case(False, [], routing_key="nowhere", mandatory=True),
    "unroutable": Case(False, [], routing_key="nowhere"),
    "confirm mode": Case(False, [declare(), consume(), ("pub", commands.Confirm.Select())]),
    "tx mode": Case(False, [declare(), consume(), ("pub", commands.Tx.Select())]),
    "queue with message ttl": Case(False, [declare(arguments={"x-message-ttl": 0}), consume()]),
    "per-message ttl": Case(False, [declare(), consume()], properties={"expiration": "0"}),
    "max-length reject-publish": Case(
        False, [declare(arguments={"x-max-length": 0, "x-overflow": "reject-publish"}), consume()]
    ),
    "max-length drop-head": Case(False, [declare(arguments={"x-max-length": 1}), consume()]),
    "manual-ack consumer with prefetch": Case(
        False, [declare(), ("con", commands.Basic.Qos(prefetch_count=2)), consume(no_ack=False)]
    ),
    "two consumers round-robin": Case(False, [declare(), consume("c1"), consume("c2")]),
    "consumer priorities": Case(
        False, [declare(), consume("lo", arguments={"x-priority": 1}), consume("hi", arguments={"x-priority": 5})]
    ),
    "no consumer": Case(False, [declare()]),
    "consumer not writable": Case(False, [declare(), consume()], before=lambda pub, con: _unwritable(con)),
    "CC header": Case(
        False, [declare(), declare("q2"), consume(), consume("c2", "q2")], properties={"headers": {"CC": ["q2"]}}
    ),
    "persistent to a durable queue": Case(
        False, [declare(durable=True), consume()], properties={"delivery_mode": 2}, durable_store=True
    ),
    "consumer frame_max below the body": Case(False, [declare(), consume()], consumer_frame_max=4096, size=5000),
    "missing exchange": Case(False, [declare(), consume()], exchange="missing"),
    "internal exchange": Case(
        False,
        [exchange("in", "fanout", internal=True), declare(), consume()],
        exchange="in",
    ),
    "forged user_id": Case(False, [declare(), consume()], properties={"user_id": "mallory"}),
    "reply-to without a reply consumer": Case(
        False, [declare(), consume()], properties={"reply_to": "amq.rabbitmq.reply-to"}
    ),
    "over max_message_size": Case(False, [declare(), consume()], settings={"max_message_size": 50}),
    "immediate": Case(False, [declare(), consume()], method=b"\x00\x3c\x00\x28\x00\x00\x00\x01q\x02"),
    "BCC header": Case(
        False, [declare(), declare("q2"), consume(), consume("c2", "q2")], properties={"headers": {"BCC": ["q2"]}}
    ),
    "CC and BCC headers to a queue of their own": Case(
        False, [declare(), declare("q2"), consume("c2", "q2")], properties={"headers": {"CC": ["q2"], "BCC": ["q"]}}
    ),
    "headers that name no routing key": Case(True, [declare(), consume()], properties={"headers": {"k": "v"}}),
    "a header value that looks like a CC key": Case(False, [declare(), consume()], properties={"headers": {"k": "CC"}}),
    "headers exchange, message with headers": Case(
        False,
        [
            exchange("h", "headers"),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "any", "a": 1})),
            consume(),
        ],
        exchange="h",
        properties={"headers": {"a": 1}},
    ),
    "headers exchange, message without headers": Case(
        True,
        [
            exchange("h", "headers"),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "all"})),
            consume(),
        ],
        exchange="h",
    ),
    "headers exchange, headers reach one more queue": Case(
        False,
        [
            exchange("h", "headers"),
            declare(),
            declare("q2"),
            ("pub", commands.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "all"})),
            ("pub", commands.Queue.Bind(queue="q2", exchange="h", arguments={"x-match": "any", "a": 1})),
            consume(),
            consume("c2", "q2"),
        ],
        exchange="h",
        properties={"headers": {"a": 1}},
    ),
    "headers exchange behind an exchange-to-exchange binding": Case(
        False,
        [
            exchange("x", "fanout"),
            exchange("h", "headers"),
            ("pub", commands.Exchange.Bind(destination="h", source="x")),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "any", "a": 1})),
            consume(),
        ],
        exchange="x",
        properties={"headers": {"a": 2}},
    ),
    "delayed exchange, no delay": Case(
        True,
        [
            exchange("d", "x-delayed-message", arguments={"x-delayed-type": "direct"}),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="d", routing_key="q")),
            consume(),
        ],
        exchange="d",
    ),
    "delayed exchange, x-delay": Case(
        False,
        [
            exchange("d", "x-delayed-message", arguments={"x-delayed-type": "direct"}),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="d", routing_key="q")),
            consume(),
        ],
        exchange="d",
        properties={"headers": {"x-delay": 60000}},
    ),
    "topic exchange": Case(
        True,
        [
            exchange("t", "topic"),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="t", routing_key="a.*.#")),
            consume(),
        ],
        exchange="t",
        routing_key="a.b.c",
    ),
    "topic exchange to two queues": Case(
        False,
        [
            exchange("t", "topic"),
            declare(),
            declare("q2"),
            ("pub", commands.Queue.Bind(queue="q", exchange="t", routing_key="a.#")),
            ("pub", commands.Queue.Bind(queue="q2", exchange="t", routing_key="*.b")),
            consume(),
            consume("c2", "q2"),
        ],
        exchange="t",
        routing_key="a.b",
    ),
    "exchange-to-exchange": Case(
        True,
        [
            exchange("x", "direct"),
            exchange("y", "fanout"),
            ("pub", commands.Exchange.Bind(destination="y", source="x", routing_key="k")),
            declare(),
            ("pub", commands.Queue.Bind(queue="q", exchange="y")),
            consume(),
        ],
        exchange="x",
        routing_key="k",
    ),
    "direct reply-to: replies to the requester": Case(True, [consume("r", "amq.rabbitmq.reply-to")], reply=True),
    "direct reply-to: requests from a channel that consumes its replies": Case(
        False,
        [declare(), consume(), ("pub", consume("r", "amq.rabbitmq.reply-to")[1])],
        properties={"reply_to": "amq.rabbitmq.reply-to"},
    ),
    "recovered backlog not yet delivered": Case(
        False, [declare(durable=True), consume()], durable_store=True, recovered=[b"r1", b"r2"]
    ),
    "recovered backlog delivered first": Case(
        True,
        [declare(durable=True), consume()],
        durable_store=True,
        recovered=[b"r1", b"r2"],
        before=lambda pub, con: con.session.channels[1].vhost.queues["q"].dispatch(),
    ),
    "consumer on the publisher's connection": Case(True, [declare(), ("pub", consume()[1])]),
    "consumer on the publisher's connection, manual ack": Case(False, [declare(), ("pub", consume(no_ack=False)[1])]),
}


def _unwritable(con: Conn) -> None:
    con.session.writable = False


def publishes(case: Case, bodies: list[bytes], varied: bool) -> list[bytes]:
    """varied: each with its own message_id, as applications publish (a PUBLISH_GROUP, not a PUBLISH_RUN)."""
    out = []
    for i, b in enumerate(bodies):
        properties = {**case.properties, "message_id": f"m{i}"} if varied else case.properties
        data = publish_frames(1, case.exchange, case.routing_key, b, mandatory=case.mandatory, **properties)
        if case.method is not None:
            size = int.from_bytes(data[3:7], "big")
            data = (
                frame.marshal(commands.Basic.Qos(), 1)[:3]
                + len(case.method).to_bytes(4, "big")
                + case.method
                + b"\xce"
                + data[8 + size :]
            )
        out.append(data)
    return out


def run(case: Case, together: bool, varied: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes, list, int]:
    """What both clients read, with the publishes in one read or one per read; the queue afterwards;
    how many one-pass deliveries there were."""
    store = FakeStore() if case.durable_store else None
    broker = Broker(Settings(**case.settings), store=store) if store else new_broker(**case.settings)
    pub, con = Conn(broker), Conn(broker, case.consumer_frame_max)
    for who, method in case.setup:
        (pub if who == "pub" else con).send(frame.marshal(method, 1))
    if case.recovered:
        assert store is not None
        store.recovered(broker.vhosts["/"].queues["q"], case.recovered)
    if case.reply:
        (token,) = broker.vhosts["/"].replies
        case = replace(case, routing_key="amq.rabbitmq.reply-to." + token)
    pub.session.take_output()
    con.session.take_output()
    if case.before is not None:
        case.before(pub, con)
    runs = []
    for one_pass in ("deliver_run", "deliver_each"):
        original = getattr(Channel, one_pass)
        monkeypatch.setattr(Channel, one_pass, lambda self, *a, f=original: (runs.append(1), f(self, *a))[1])
    data = publishes(case, bodies(case.size), varied)
    if together:
        pub.send(b"".join(data))
    else:
        for one in data:
            pub.send(one)
    queue = broker.vhosts["/"].queues.get("q")
    left: list[Any] = [_delivery_stats(broker)]
    while queue is not None and (entry := queue.get()) is not None:
        left.append((entry.msg.body, entry.redelivered))
    left.append(_exchange_counts(broker))
    # Reply-to addresses are random: each run's are masked (they are all as long).
    pub_out, con_out = pub.session.take_output(), con.session.take_output()
    for token in broker.vhosts["/"].replies:
        pub_out, con_out = (out.replace(token.encode(), b"*" * len(token)) for out in (pub_out, con_out))
    return pub_out, con_out, left, len(runs)


@pytest.mark.parametrize("varied", [False, True], ids=["equal properties", "each its own properties"])
@pytest.mark.parametrize("name", CASES)
def test_publishes_in_one_read_look_the_same_to_clients_as_one_per_read(
    name: str, varied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    pub_one, con_one, left_one, _ = run(case, False, varied, monkeypatch)
    pub_all, con_all, left_all, runs = run(case, True, varied, monkeypatch)
    assert pub_all == pub_one
    assert con_all == con_one
    assert left_all == left_one
    assert runs == (1 if case.fast else 0)


def test_one_pass_deliveries_carry_consecutive_tags_and_each_body() -> None:
    broker = new_broker()
    pub, con = Conn(broker), Conn(broker)
    pub.send(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    con.send(frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True), 1))
    con.session.take_output()
    pub.send(publish_frames(1, "", "q", b"first"))
    pub.send(b"".join(publish_frames(1, "", "q", b) for b in BODIES))
    got = messages([obj for _, obj in decode_frames(con.session.take_output())])
    assert [(d.delivery_tag, d.redelivered, d.routing_key, b) for d, b in got] == [
        (i + 1, False, "q", b) for i, b in enumerate([b"first", *BODIES])
    ]


# -- manual-ack consumers: what the group path delivers must be acked, rejected and requeued as one by one --------


def ack(tag: int, multiple: bool = False) -> tuple[str, Any]:
    return ("con", commands.Basic.Ack(delivery_tag=tag, multiple=multiple))


def nack(tag: int, multiple: bool = False, requeue: bool = True) -> tuple[str, Any]:
    return ("con", commands.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue))


def qos(count: int, global_: bool = False) -> tuple[str, Any]:
    return ("con", commands.Basic.Qos(prefetch_count=count, global_=global_))


@dataclass
class AckCase:
    setup: list[tuple[str, Any]]
    after: list[tuple[str, Any]]  # the consumer's methods once the publishes are in, one read each
    groups: int = 2  # reads of five publishes each (or one publish per read)


MANUAL = [declare(), qos(20), consume(no_ack=False)]
ACK_CASES: dict[str, AckCase] = {
    "acks one by one and in ranges": AckCase(MANUAL, [ack(3, True), ack(5), ack(4), ack(9, True), ack(10)]),
    "a multiple ack across a group boundary": AckCase(MANUAL, [ack(2), ack(7, True), ack(10, True)]),
    "an ack inside a range splits it": AckCase(MANUAL, [ack(6), ack(4), ack(5, True), ack(8), ack(10, True)]),
    "an unknown tag closes the channel": AckCase(MANUAL, [ack(4), ack(4)]),
    "nack requeues in order, redelivered": AckCase(MANUAL, [nack(3), nack(8, True), ack(0, True)]),
    "reject inside a range, then nack without requeue": AckCase(
        MANUAL, [("con", commands.Basic.Reject(delivery_tag=6, requeue=True)), nack(9, True, requeue=False)]
    ),
    "channel close requeues in order": AckCase(
        MANUAL, [ack(2), ack(5), ("con", commands.Channel.Close(200, "bye", 0, 0))]
    ),
    "basic.recover redelivers everything unacked": AckCase(
        MANUAL, [ack(3), ("con", commands.Basic.Recover(requeue=True)), ack(12, True)]
    ),
    "prefetch limit mid-group": AckCase(
        [declare(), qos(3), consume(no_ack=False)], [ack(1), ack(3, True), ack(5), nack(6, True), ack(9, True)]
    ),
    "prefetch one": AckCase([declare(), qos(1), consume(no_ack=False)], [ack(1), ack(2), nack(3), ack(4)], groups=1),
    "two consumers round-robin": AckCase(
        [declare(), qos(4), consume("c1", no_ack=False), consume("c2", no_ack=False)],
        [ack(3, True), ack(6), nack(8, True), ack(0, True)],
    ),
    "qos global shared by two consumers": AckCase(
        [declare(), qos(3, True), qos(2), consume("c1", no_ack=False), consume("c2", no_ack=False)],
        [ack(2, True), ack(4), ack(5, True), ack(7, True)],
    ),
    "qos global below the consumer's prefetch": AckCase(
        [declare(), qos(3, True), qos(10), consume(no_ack=False)], [ack(2, True), ack(3), nack(5, True), ack(9, True)]
    ),
    "no prefetch": AckCase([declare(), consume(no_ack=False)], [ack(4, True), nack(7), ack(10, True)]),
    "a backlog before the publishes": AckCase(
        [declare(), qos(4), ("pub", commands.Basic.Publish(routing_key="q")), consume(no_ack=False)],
        [ack(1), ack(3, True), ack(5, True)],
    ),
    "priority queue": AckCase(
        [declare(arguments={"x-max-priority": 3}), qos(2), consume(no_ack=False)], [ack(2, True), ack(4, True)]
    ),
}


def run_acks(case: AckCase, together: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], list, tuple, int]:
    """What the consumer read after the publishes and after each of its methods, the queue and the unacked
    counts afterwards, and how many publish groups went into the queue at once."""
    broker = new_broker()
    pub, con = Conn(broker), Conn(broker)
    for who, method in case.setup:
        if isinstance(method, commands.Basic.Publish):  # an empty backlog message, before any consumer
            pub.send(publish_frames(1, "", "q", b"backlog"))
        else:
            (pub if who == "pub" else con).send(frame.marshal(method, 1))
    pub.session.take_output()
    con.session.take_output()
    groups = []
    original = Queue.take_group
    monkeypatch.setattr(Queue, "take_group", lambda self, msgs: (groups.append(len(msgs)), original(self, msgs))[1])
    reads = []
    for g in range(case.groups):
        data = publishes(Case(True, properties={"correlation_id": f"group {g}"}), bodies(100), varied=True)
        reads += [b"".join(data)] if together else data
    outputs = []
    for read in reads:
        pub.send(read)
        outputs.append(con.session.take_output())
    outputs = [b"".join(outputs)]  # what the consumer read during the publishes, however many reads they took
    for _who, method in case.after:
        con.send(method if isinstance(method, bytes) else frame.marshal(method, 1))
        outputs.append(con.session.take_output())
    queue = broker.vhosts["/"].queues["q"]
    ch = con.session.channels.get(1)
    state = (
        queue.unacked,
        [c.unacked for c in queue.consumers],
        list(ch.unacked) if ch is not None else None,
        ch.unacked.count if ch is not None else None,
    )
    left = []
    while (entry := queue.get()) is not None:
        left.append((entry.msg.body, entry.msg.header, entry.redelivered))
    return outputs, left, state, len(groups)


@pytest.mark.parametrize("name", ACK_CASES)
def test_a_manual_ack_consumer_sees_the_same_deliveries_acks_and_requeues_from_a_group_as_one_by_one(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = ACK_CASES[name]
    one = run_acks(case, False, monkeypatch)
    together = run_acks(case, True, monkeypatch)
    assert together[:3] == one[:3]
    assert one[3] == 0
    assert together[3] == case.groups  # each read of publishes went into the queue in one pass
    assert any(b"\x00\x3c\x00\x3c" in out for out in one[0])  # something was delivered


def deliveries(outputs: list[bytes]) -> list[tuple[int, bool, str, str]]:
    """(tag, redelivered, message_id, correlation_id) of each basic.deliver the consumer read."""
    got = []
    pending: Any = None
    for _channel, obj in decode_frames(b"".join(outputs)):
        if isinstance(obj, commands.Basic.Deliver):
            pending = obj
        elif isinstance(obj, header_frame.ContentHeader) and pending is not None:
            p = obj.properties
            got.append((pending.delivery_tag, pending.redelivered, p.message_id, p.correlation_id))
            pending = None
    return got


def test_deliveries_from_a_group_come_back_redelivered_and_never_beyond_the_prefetch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the differential test cannot see (both paths share the queue's hand-out): a message delivered again
    is marked redelivered, the first time it is not, and the channel's global prefetch caps a consumer alone on
    its queue."""
    case = AckCase([declare(), qos(3, True), qos(10), consume(no_ack=False)], [nack(2, True), ack(5, True)])
    outputs, _left, _state, groups = run_acks(case, True, monkeypatch)
    assert groups == 2
    got = deliveries(outputs[:1])
    assert [(tag, again) for tag, again, *_ in got] == [(1, False), (2, False), (3, False)]
    got = deliveries(outputs)
    seen: set[tuple[str, str]] = set()
    for _tag, again, *identity in got:
        assert again == (tuple(identity) in seen)
        seen.add(tuple(identity))  # type: ignore[arg-type]
    assert [tag for tag, *_ in got] == list(range(1, 9))  # 3, then 2 requeued and 3 more after the acks


def acks_in_one_read(case: AckCase, delivered: int) -> AckCase:
    """The case with its leading basic.acks of tags already delivered (at most `delivered`) in one read, as a
    consumer's multiple-acks leave in one write; its other methods one per read, as before."""
    n = 0
    while n < len(case.after):
        method = case.after[n][1]
        if not isinstance(method, commands.Basic.Ack) or method.delivery_tag > delivered:
            break
        n += 1
    joined = b"".join(frame.marshal(method, 1) for _who, method in case.after[:n])
    return replace(case, after=[("con", joined), *case.after[n:]])


@pytest.mark.parametrize("name", ACK_CASES)
def test_acks_in_one_read_leave_the_consumer_what_acks_one_per_read_leave(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deliveries resume once after consecutive acks on a channel (Session._resume_acked), not after each: the
    consumer reads the same bytes and the queue and unacked counts end the same."""
    case = ACK_CASES[name]
    outputs, left, state, _ = run_acks(case, True, monkeypatch)
    delivered = max(tag for tag, *_ in deliveries(outputs[:1]))
    joined = acks_in_one_read(case, delivered)
    if isinstance(case.after[0][1], commands.Basic.Ack):
        assert joined.after[0][1].count(b"\x00\x3c\x00\x50") >= 1  # acks to join: something is tested
    outputs_one_read, left_one_read, state_one_read, _ = run_acks(joined, True, monkeypatch)
    assert b"".join(outputs_one_read) == b"".join(outputs)
    assert (left_one_read, state_one_read) == (left, state)


def test_deliveries_resume_once_after_the_acks_of_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    dispatches = []
    original = Queue.dispatch
    monkeypatch.setattr(Queue, "dispatch", lambda self: (dispatches.append(1), original(self))[1])
    case = AckCase([declare(), qos(4), consume(no_ack=False)], [ack(1), ack(2), ack(3, True), ack(4)])
    outputs, *_ = run_acks(acks_in_one_read(case, 4), True, monkeypatch)
    assert len(dispatches) == 1 + 1  # one at basic.consume, one for the four acks
    assert [tag for tag, *_ in deliveries(outputs)] == list(range(1, 9))


# -- confirm mode: groups stored in one append ------------------------------------------------------------------
#
# With publisher confirms, publishes to one durable queue or stream are stored with one store append and
# confirmed together (PublishGroups._stored_group). A real store (tmp_path) writes them; the publisher must read
# the same confirms (tags, multiple flags, acks and nacks, in the same reads), the consumer the same deliveries,
# and the queue or stream must hold the same messages at the same offsets, as when each publish arrives alone.


@dataclass
class Confirmed:
    grouped: int  # how many of the five publishes are stored by the one-append path
    setup: list[tuple[str, Any]] = field(default_factory=list)
    exchange: str = ""
    routing_key: str = "q"
    mandatory: bool = False
    properties: dict[str, Any] = field(default_factory=lambda: {"delivery_mode": 2})
    each: list[dict[str, Any]] = field(default_factory=lambda: [{}] * 5)  # per-publish properties on top
    fail_write: int = 0  # this segment write fails (1 is a new segment's file header)
    # before the store's commit: what the clients do while the publishes wait for their fsync
    before_commit: Callable[[Conn, Conn], None] | None = None
    grouped_equal: int | None = None  # the same with equal properties where they differ (runs), if not `grouped`
    after_commit: Callable[[Conn, Conn], None] | None = None  # then: what the clients do once they are confirmed


STREAM = declare(durable=True, arguments={"x-queue-type": "stream"})
FROM_FIRST = [
    ("con", commands.Basic.Qos(prefetch_count=100)),
    consume(no_ack=False, arguments={"x-stream-offset": "first"}),
]


def _ack_all(pub: Conn, con: Conn) -> None:
    con.send(frame.marshal(commands.Basic.Ack(delivery_tag=0, multiple=True), 1))


def _ack_up_to_3(pub: Conn, con: Conn) -> None:
    con.send(frame.marshal(commands.Basic.Ack(delivery_tag=3, multiple=True), 1))


def _ack_2_then_up_to_4(pub: Conn, con: Conn) -> None:
    con.send(frame.marshal(commands.Basic.Ack(delivery_tag=2), 1) + frame.marshal(commands.Basic.Ack(4, True), 1))


PREFETCH_2 = ("con", commands.Basic.Qos(prefetch_count=2))

CONFIRMED: dict[str, Confirmed] = {
    "durable queue": Confirmed(5, [declare(durable=True)]),
    "durable queue, manual-ack consumer": Confirmed(5, [declare(durable=True), consume(no_ack=False)]),
    "durable queue, no-ack consumer": Confirmed(5, [declare(durable=True), consume()]),
    "durable queue, all consumed and acked before the fsync": Confirmed(
        5, [declare(durable=True), consume(no_ack=False)], before_commit=_ack_all
    ),
    "durable queue, some acked after the fsync": Confirmed(
        5, [declare(durable=True), consume(no_ack=False)], after_commit=_ack_up_to_3
    ),
    "durable queue, acks out of order after the fsync": Confirmed(
        5, [declare(durable=True), consume(no_ack=False)], after_commit=_ack_2_then_up_to_4
    ),
    "durable queue, a consumer with room for two": Confirmed(
        5, [declare(durable=True), PREFETCH_2, consume(no_ack=False)], before_commit=_ack_up_to_3
    ),
    "durable queue, two consumers": Confirmed(
        5, [declare(durable=True), consume("c1", no_ack=False), consume("c2", no_ack=False)]
    ),
    "durable queue, a consumer with a message ttl": Confirmed(
        5, [declare(durable=True, arguments={"x-message-ttl": 60000}), consume(no_ack=False)]
    ),
    "stream": Confirmed(5, [STREAM]),
    "stream, transient messages": Confirmed(5, [STREAM], properties={}),
    "stream, segments sealed and dropped by retention mid-group": Confirmed(
        5,
        [
            declare(
                durable=True,
                arguments={
                    "x-queue-type": "stream",
                    "x-stream-max-segment-size-bytes": 250,
                    "x-max-length-bytes": 500,
                },
            )
        ],
    ),
    "stream, a consumer from the first offset": Confirmed(5, [STREAM, *FROM_FIRST]),
    # A stream's group is stored without messages; a publish with an expiration goes the message path, which
    # gives its record an expiry.
    "stream, an expiration mid-group": Confirmed(
        2, [STREAM], each=[{}, {}, {"expiration": "60000"}, {}, {}], grouped_equal=4
    ),
    "transient message mid-group to a durable queue": Confirmed(
        2, [declare(durable=True)], each=[{}, {}, {"delivery_mode": 1}, {}, {}], grouped_equal=4
    ),
    "CC header mid-group": Confirmed(
        2,
        [declare(durable=True), declare("q2", durable=True)],
        each=[{}, {}, {"headers": {"CC": ["q2"]}}, {}, {}],
        grouped_equal=4,
    ),
    "mandatory, routed": Confirmed(5, [declare(durable=True)], mandatory=True),
    "unroutable mandatory mid-group": Confirmed(
        0,
        [
            exchange("hx", "headers"),
            declare(durable=True),
            ("pub", commands.Queue.Bind(queue="q", exchange="hx", arguments={"x-match": "any", "to": "q"})),
        ],
        exchange="hx",
        mandatory=True,
        each=[{"headers": {"to": "q"}}, {"headers": {"to": "q"}}, {}, {"headers": {"to": "q"}}, {}],
    ),
    "headers exchange, a header routing one publish to a second queue": Confirmed(
        2,
        [
            exchange("hx", "headers"),
            declare(durable=True),
            declare("q2", durable=True),
            ("pub", commands.Queue.Bind(queue="q", exchange="hx", arguments={"x-match": "all"})),
            ("pub", commands.Queue.Bind(queue="q2", exchange="hx", arguments={"x-match": "any", "to": "q2"})),
        ],
        exchange="hx",
        each=[{}, {}, {"headers": {"to": "q2"}}, {}, {}],
        grouped_equal=4,
    ),
    "dedup in a group, durable queue": Confirmed(
        0,
        [declare(durable=True, arguments={"x-message-deduplication": True})],
        each=[{"message_id": i} for i in ("a", "b", "a", "c", "b")],
    ),
    "dedup in a group, stream": Confirmed(
        0,
        [declare(durable=True, arguments={"x-queue-type": "stream", "x-message-deduplication": True})],
        each=[{"message_id": i} for i in ("a", "b", "a", "c", "b")],
    ),
    "full queue with reject-publish mid-group": Confirmed(
        0, [declare(durable=True, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})]
    ),
    "store failure": Confirmed(5, [declare(durable=True)], fail_write=2),
    "store failure, transient message mid-group": Confirmed(
        2, [declare(durable=True)], each=[{}, {}, {"delivery_mode": 1}, {}, {}], fail_write=2, grouped_equal=4
    ),
    "store failure, stream": Confirmed(5, [STREAM, *FROM_FIRST], fail_write=2),
}


async def confirmed_run(
    case: Confirmed, together: bool, varied: bool, data_dir: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[bytes, bytes, bytes, bytes, list, int]:
    """What the publisher reads before and after the commit, what the consumer reads before and after it,
    what q holds afterwards (offset and body), and how many publishes the one-append path stored."""
    from store import MessageStore
    from tests.store.faulty_io import FailingIO

    store = MessageStore(data_dir, io=FailingIO(fail_write=case.fail_write), fsync="none")
    await store.open()
    broker = Broker(Settings(data_dir=str(data_dir)), store=store)
    pub, con = Conn(broker), Conn(broker)
    for who, method in [*case.setup, ("pub", commands.Confirm.Select())]:
        (pub if who == "pub" else con).send(frame.marshal(method, 1))
    pub.session.take_output()
    con.session.take_output()
    grouped: list[int] = []
    original, original_stream = Broker.store_group, Broker.store_stream_group
    monkeypatch.setattr(
        Broker, "store_group", lambda self, msgs, *a: (grouped.append(len(msgs)), original(self, msgs, *a))[1]
    )
    monkeypatch.setattr(
        Broker,
        "store_stream_group",
        lambda self, stream, ex, key, headers, *a: (
            grouped.append(len(headers)),
            original_stream(self, stream, ex, key, headers, *a),
        )[1],
    )
    data = []
    for i, (each, body) in enumerate(zip(case.each, BODIES, strict=True)):
        properties = {**case.properties, **({"message_id": f"m{i}"} if varied else {}), **each}
        data.append(publish_frames(1, case.exchange, case.routing_key, body, mandatory=case.mandatory, **properties))
    for chunk in [b"".join(data)] if together else data:
        pub.send(chunk)
    if case.before_commit is not None:
        case.before_commit(pub, con)
    pub_early, con_early = pub.session.take_output(), con.session.take_output()
    await store.flush()
    await store.reads_done()
    pub_late, con_late = pub.session.take_output(), con.session.take_output()
    if case.after_commit is not None:
        case.after_commit(pub, con)
        await store.flush()
    queue = broker.vhosts["/"].queues["q"]
    if queue.is_stream:
        stream: Any = queue
        # Everything a record keeps; its time stamp and expiry as the time to live between them (the clock
        # moves between the two runs).
        left = [
            (offset, record.exchange, record.routing_key, record.properties, record.body, _ttl(record))
            for offset, record in await stream.log.read_async(0, 100)
        ]
        left.append(("segments: first offset, bytes", [s[:2] for s in stream._segments]))  # noqa: SLF001
    else:
        left = []
        while (entry := queue.get()) is not None:
            left.append((entry.msg.store_offset, entry.msg.body))
    left.append(_exchange_counts(broker))
    await store.flush()
    await store.abort()  # a crash: what comes back is what the commits wrote (no checkpoint at close)
    left.append(await _after_restart(data_dir))
    return pub_early, pub_late, con_early, con_late, left, sum(grouped)


async def _after_restart(data_dir: Any) -> tuple[str, dict[str, list[tuple[int, bool]]]]:
    """What each durable queue gives back after a restart: offsets, and whether each comes back redelivered."""
    # Each batch the commits wrote (acks and delivery marks included) is replayed.
    from store import MessageStore

    store = MessageStore(data_dir, fsync="none")
    recovered = await store.open()
    await store.close()
    return "after a restart", {q.name: [(m.offset, m.redelivered) for m in q.messages] for q in recovered.queues}


def _exchange_counts(broker: Broker) -> tuple[str, dict[str, tuple[int, int]]]:
    """publish_in and publish_out of every exchange that counted something: the batched paths count as the
    one-at-a-time path does."""
    exchanges = broker.vhosts["/"].exchanges
    return "exchanges", {n: (x.publish_in, x.publish_out) for n, x in exchanges.items() if x.publish_in}


def _delivery_stats(broker: Broker) -> tuple[str, dict[str, Any], dict[str, int]]:
    """What the management API counts: each queue's publish and deliver_get, and the broker-wide totals (its
    rates are sampled from these). A delivery in one pass counts as one by one does."""
    queues = {
        name: {key: stats.get(key) for key in ("publish", "deliver_get", "ack")}
        for name, q in broker.vhosts["/"].queues.items()
        for stats in (queue_info(q, Rates())["message_stats"],)
    }
    return "delivery stats", queues, totals(broker)


def _ttl(record: Any) -> int | None:
    return None if record.expires_at_ms is None else record.expires_at_ms - record.timestamp_ms


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("varied", [False, True], ids=["equal properties", "each its own properties"])
@pytest.mark.parametrize("name", CONFIRMED)
async def test_confirmed_publishes_in_one_read_look_the_same_to_clients_as_one_per_read(
    name: str, varied: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    case = CONFIRMED[name]
    *one, grouped_one = await confirmed_run(case, False, varied, tmp_path / "one", monkeypatch)
    *together, grouped = await confirmed_run(case, True, varied, tmp_path / "together", monkeypatch)
    assert together == one
    assert grouped_one == 0
    assert grouped == (case.grouped if varied or case.grouped_equal is None else case.grouped_equal)


def _confirms(data: bytes) -> list[tuple[str, int, bool]]:
    return [
        (type(obj).__name__, obj.delivery_tag, obj.multiple)
        for _, obj in decode_frames(data)
        if isinstance(obj, (commands.Basic.Ack, commands.Basic.Nack))
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_stored_group_is_confirmed_only_after_the_commit_with_one_multiple_ack(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    pub_early, pub_late, _, _, left, grouped = await confirmed_run(
        CONFIRMED["stream"], True, True, tmp_path, monkeypatch
    )
    assert grouped == 5
    assert _confirms(pub_early) == []
    assert _confirms(pub_late) == [("Ack", 5, True)]
    # offset, body (after them: the segments, the exchange counts and what a restart gives back)
    assert [(row[0], row[4]) for row in left[:-3]] == [(i, b) for i, b in enumerate(BODIES)]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_stored_group_the_store_could_not_write_is_nacked_tag_by_tag(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    case = CONFIRMED["store failure, transient message mid-group"]
    pub_early, pub_late, _, _, left, grouped = await confirmed_run(case, True, True, tmp_path, monkeypatch)
    assert grouped == 2
    assert _confirms(pub_early) == []
    assert _confirms(pub_late) == [("Nack", 1, False), ("Nack", 2, False), ("Ack", 3, False)] + [
        ("Nack", 4, False),
        ("Nack", 5, False),
    ]
    assert [body for _, body in left[:-2]] == BODIES  # still in the queue, from memory


# -- every entry takes the same steps ---------------------------------------------------------------------------
# A message that enters the queues from a delayed exchange's release or from dead-lettering goes through the same
# Publisher as a client's publish: fed the same messages, the queues must end up holding the same messages, with
# the same ids, whatever the queue features in play (only the headers that say how it came differ).

ENTRY_QUEUES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "plain queue": [("q", {})],
    "deduplicating queue": [("q", {"x-message-deduplication": True})],
    "max-length reject-publish": [("q", {"x-max-length": 1, "x-overflow": "reject-publish"})],
    "max-length drop-head": [("q", {"x-max-length": 1})],
    "queue that stamps ids": [("q", {"x-amqpd-message-id": True})],
    "two queues, one deduplicating": [("q", {}), ("q2", {"x-message-deduplication": True})],
    "reject-publish-dlx into a second queue": [
        ("q", {"x-max-length": 1, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "overflow"}),
    ],
}
_HOW_IT_CAME = ("x-delay", "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason")


def _entered(entry: str, queues: list[tuple[str, dict[str, Any]]]) -> dict[str, list[tuple[bytes, Any]]]:
    """Each queue's messages (body, headers but those naming the entry; an id only as present or not) after
    three publishes, two of them with one message id, enter through `entry`."""
    from fakes import ClientChannel, method_payload

    clock = [1_800_000_000_000]
    broker = new_broker(now_ms=lambda: clock[0])
    c = ClientChannel(broker)
    c.call(commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    c.call(commands.Exchange.Declare(exchange="overflow", exchange_type="fanout"))
    c.declare_queue("overflowed")
    c.call(commands.Queue.Bind(queue="overflowed", exchange="overflow"))
    c.call(
        commands.Exchange.Declare(
            exchange="dx", exchange_type="x-delayed-message", arguments={"x-delayed-type": "direct"}
        )
    )
    for name, arguments in queues:
        c.declare_queue(name, arguments=arguments)
        c.call(commands.Queue.Bind(queue=name, exchange="x", routing_key="k"))
        c.call(commands.Queue.Bind(queue=name, exchange="dx", routing_key="k"))
    c.declare_queue("src", arguments={"x-dead-letter-exchange": "x", "x-dead-letter-routing-key": "k"})
    sent = [(b"one", "a"), (b"two", "b"), (b"three", "a")]
    for body, message_id in sent:
        if entry == "client":
            c.publish("x", "k", body, message_id=message_id)
        elif entry == "delayed release":
            c.publish("dx", "k", body, message_id=message_id, headers={"x-delay": 10})
        else:
            c.publish("", "src", body, message_id=message_id)
    if entry == "delayed release":
        clock[0] += 10
        ex = broker.vhosts["/"].exchanges["dx"]
        broker.delayed.release_due(ex)  # type: ignore[arg-type]
    elif entry == "dead-lettering":
        for tag in range(1, len(sent) + 1):
            c.call(commands.Basic.Get(queue="src"))
            c.ch.on_reject(method_payload(commands.Basic.Reject(tag, requeue=False)))
    found = {}
    for name in [n for n, _ in queues] + ["overflowed"]:
        found[name] = [
            (
                e.msg.body,
                {
                    k: (v if k != "x-amqpd-message-id" else "id")
                    for k, v in (e.msg.headers or {}).items()
                    if k not in _HOW_IT_CAME
                },
            )
            for e in broker.vhosts["/"].queues[name].ready
        ]
    return found


@pytest.mark.parametrize("queues", ENTRY_QUEUES.values(), ids=ENTRY_QUEUES.keys())
@pytest.mark.parametrize("entry", ["delayed release", "dead-lettering"])
def test_a_delayed_release_and_a_dead_letter_enter_queues_as_a_client_publish_does(
    entry: str, queues: list[tuple[str, dict[str, Any]]]
) -> None:
    assert _entered(entry, queues) == _entered("client", queues)
