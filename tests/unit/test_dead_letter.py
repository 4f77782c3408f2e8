"""Dead-lettering as a consumer of the dead-letter queue sees it: which messages arrive, with what x-death."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from fakes import ClientChannel, method_payload, new_broker
from pamqp import body, commands, header

from amqpd.broker.broker import Broker
from amqpd.config import Settings


@pytest.fixture
def clock() -> list[int]:
    """The broker's wall clock in ms; tests move it by assigning clock[0]."""
    return [1_767_225_600_000]  # 2026-01-01T00:00:00Z


@pytest.fixture
def client(clock: list[int]) -> ClientChannel:
    return ClientChannel(Broker(Settings(), now_ms=lambda: clock[0]))


class Got:
    def __init__(self, frames: list[Any]) -> None:
        self.method = frames[0]
        self.properties = next(f.properties for f in frames if isinstance(f, header.ContentHeader))
        self.body = b"".join(f.value for f in frames if isinstance(f, body.ContentBody))

    @property
    def headers(self) -> dict[str, Any]:
        return self.properties.headers or {}

    @property
    def deaths(self) -> list[dict[str, Any]]:
        return self.headers.get("x-death", [])


def get(client: ClientChannel, queue: str) -> Got | None:
    frames = client.call(commands.Basic.Get(queue=queue, no_ack=True))
    return None if isinstance(frames[0], commands.Basic.GetEmpty) else Got(frames)


def count(client: ClientChannel, queue: str) -> int:
    return client.broker.vhosts["/"].queues[queue].message_count


def setup_dlx(client: ClientChannel, source: str = "work", **arguments: Any) -> None:
    """source → (dead-letters to) fanout exchange 'dlx' → queue 'dlq'."""
    client.call(commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    client.declare_queue("dlq")
    client.call(commands.Queue.Bind(queue="dlq", exchange="dlx"))
    client.declare_queue(source, arguments={"x-dead-letter-exchange": "dlx", **arguments})


def reject_one(client: ClientChannel, queue: str, *, nack: bool = False) -> None:
    frames = client.call(commands.Basic.Get(queue=queue))
    tag = frames[0].delivery_tag
    if nack:
        client.nack(tag, requeue=False)
    else:
        client.reject(tag, requeue=False)


# -- why messages die ---------------------------------------------------------------------------------


@pytest.mark.parametrize("nack", [False, True])
def test_rejected_message_goes_to_the_dead_letter_exchange_with_x_death(client: ClientChannel, nack: bool) -> None:
    setup_dlx(client)
    client.publish("", "work", b"payload", content_type="text/plain", headers={"app": "v"})
    reject_one(client, "work", nack=nack)
    got = get(client, "dlq")
    assert got is not None
    assert got.body == b"payload" and got.properties.content_type == "text/plain"
    assert (got.method.exchange, got.method.routing_key) == ("dlx", "work")
    (death,) = got.deaths
    assert {k: death[k] for k in ("count", "reason", "queue", "exchange", "routing-keys")} == {
        "count": 1,
        "reason": "rejected",
        "queue": "work",
        "exchange": "",
        "routing-keys": ["work"],
    }
    assert isinstance(death["time"], datetime.datetime)
    assert "original-expiration" not in death
    assert got.headers["app"] == "v"
    assert (
        got.headers["x-first-death-reason"],
        got.headers["x-first-death-queue"],
        got.headers["x-first-death-exchange"],
    ) == ("rejected", "work", "")


def test_rejected_with_requeue_is_not_dead_lettered(client: ClientChannel) -> None:
    setup_dlx(client)
    client.publish("", "work", b"m")
    tag = client.call(commands.Basic.Get(queue="work"))[0].delivery_tag
    client.reject(tag, requeue=True)
    assert (count(client, "work"), count(client, "dlq")) == (1, 0)


def test_expired_message_is_dead_lettered_with_its_original_expiration(client: ClientChannel, clock: list[int]) -> None:
    setup_dlx(client)
    client.publish("", "work", b"m", expiration="100")
    clock[0] += 100
    assert get(client, "work") is None
    got = get(client, "dlq")
    assert got is not None
    (death,) = got.deaths
    assert (death["reason"], death["queue"], death["original-expiration"]) == ("expired", "work", "100")
    assert got.properties.expiration is None  # the TTL does not follow the message


def test_queue_ttl_expiry_is_dead_lettered_without_original_expiration(client: ClientChannel, clock: list[int]) -> None:
    setup_dlx(client, **{"x-message-ttl": 50})
    client.publish("", "work", b"m")
    clock[0] += 50
    client.broker.vhosts["/"].queues["work"].expire_head()
    got = get(client, "dlq")
    assert got is not None
    assert got.deaths[0]["reason"] == "expired" and "original-expiration" not in got.deaths[0]


def test_message_pushed_out_by_max_length_is_dead_lettered_as_maxlen(client: ClientChannel) -> None:
    setup_dlx(client, **{"x-max-length": 1})
    client.publish("", "work", b"first")
    client.publish("", "work", b"second")
    got = get(client, "dlq")
    assert got is not None and got.body == b"first"
    assert got.deaths[0]["reason"] == "maxlen"
    assert get(client, "work").body == b"second"  # type: ignore[union-attr]


def test_message_refused_by_reject_publish_dlx_is_dead_lettered(client: ClientChannel) -> None:
    setup_dlx(client, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    client.publish("", "work", b"kept")
    client.publish("", "work", b"refused")
    got = get(client, "dlq")
    assert got is not None and got.body == b"refused"
    assert got.deaths[0]["reason"] == "maxlen"


def test_messages_of_a_deleted_or_purged_queue_are_not_dead_lettered(client: ClientChannel) -> None:
    setup_dlx(client)
    client.publish("", "work", b"purged")
    client.call(commands.Queue.Purge(queue="work"))
    client.publish("", "work", b"deleted")
    client.call(commands.Queue.Delete(queue="work"))
    assert count(client, "dlq") == 0


def test_missing_dead_letter_exchange_drops_the_message(client: ClientChannel) -> None:
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "not-declared"})
    client.publish("", "work", b"m")
    reject_one(client, "work")
    assert count(client, "work") == 0


# -- where they go -------------------------------------------------------------------------------------


def test_dead_letter_routing_key_replaces_the_original_key(client: ClientChannel) -> None:
    client.call(commands.Exchange.Declare(exchange="dlx", exchange_type="direct"))
    client.declare_queue("errors")
    client.call(commands.Queue.Bind(queue="errors", exchange="dlx", routing_key="err"))
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "err"})
    client.publish("", "work", b"m")
    reject_one(client, "work")
    got = get(client, "errors")
    assert got is not None
    assert got.method.routing_key == "err"
    assert got.deaths[0]["routing-keys"] == ["work"]


def test_routing_keys_in_x_death_include_cc(client: ClientChannel) -> None:
    setup_dlx(client)
    client.call(commands.Queue.Bind(queue="work", exchange="amq.direct", routing_key="a"))
    client.publish("amq.direct", "a", b"m", headers={"CC": ["b"]})
    reject_one(client, "work")
    got = get(client, "dlq")
    assert got is not None
    assert got.deaths[0]["routing-keys"] == ["a", "b"]
    assert got.deaths[0]["exchange"] == "amq.direct"


def test_dead_letter_routing_key_stops_cc_from_routing_the_dead_message(client: ClientChannel) -> None:
    client.call(commands.Exchange.Declare(exchange="dlx", exchange_type="direct"))
    for name, key in (("errors", "err"), ("copies", "b")):
        client.declare_queue(name)
        client.call(commands.Queue.Bind(queue=name, exchange="dlx", routing_key=key))
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "err"})
    client.call(commands.Queue.Bind(queue="work", exchange="amq.direct", routing_key="a"))
    client.publish("amq.direct", "a", b"m", headers={"CC": ["b"]})
    reject_one(client, "work")
    assert count(client, "copies") == 0
    got = get(client, "errors")
    assert got is not None and "CC" not in got.headers


def test_routing_keys_in_x_death_leave_out_bcc(client: ClientChannel) -> None:
    # rabbit_dead_letter records [publish key | CC and BCC still in the headers]; BCC was stripped at publish.
    setup_dlx(client)
    client.call(commands.Queue.Bind(queue="work", exchange="amq.direct", routing_key="a"))
    client.publish("amq.direct", "a", b"m", headers={"CC": ["b"], "BCC": ["c"]})
    reject_one(client, "work")
    got = get(client, "dlq")
    assert got is not None
    assert got.deaths[0]["routing-keys"] == ["a", "b"]
    assert "BCC" not in got.headers and got.headers["CC"] == ["b"]


def test_dead_letter_without_a_routing_key_follows_the_original_cc_and_bcc_keys(client: ClientChannel) -> None:
    client.call(commands.Exchange.Declare(exchange="dlx", exchange_type="direct"))
    for name in ("a", "b", "c"):
        client.declare_queue(f"dl-{name}")
        client.call(commands.Queue.Bind(queue=f"dl-{name}", exchange="dlx", routing_key=name))
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
    client.call(commands.Queue.Bind(queue="work", exchange="amq.direct", routing_key="a"))
    client.publish("amq.direct", "a", b"m", headers={"CC": ["b"], "BCC": ["c"]})
    reject_one(client, "work")
    assert [count(client, f"dl-{name}") for name in ("a", "b", "c")] == [1, 1, 1]


def test_repeated_death_keeps_the_time_of_the_first(client: ClientChannel, clock: list[int]) -> None:
    first = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    client.declare_queue("retry", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
    client.publish("", "retry", b"m")
    reject_one(client, "retry")
    clock[0] += 3_600_000
    reject_one(client, "retry")
    got = get(client, "retry")
    assert got is not None
    (death,) = got.deaths
    assert death["count"] == 2
    assert death["time"] == first


def test_second_death_in_the_same_queue_increments_the_count(client: ClientChannel) -> None:
    # Rejected messages come straight back to the same queue through the default exchange.
    client.declare_queue("retry", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
    client.publish("", "retry", b"m")
    reject_one(client, "retry")
    reject_one(client, "retry")
    got = get(client, "retry")
    assert got is not None
    (death,) = got.deaths
    assert (death["count"], death["reason"], death["queue"]) == (2, "rejected", "retry")


def test_x_death_lists_the_latest_death_first_and_first_death_headers_stay(
    client: ClientChannel, clock: list[int]
) -> None:
    client.declare_queue(
        "delay", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "final"}
    )
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "delay"})
    client.declare_queue("final")
    client.publish("", "work", b"m")
    reject_one(client, "work")
    clock[0] += 10
    assert get(client, "delay") is None
    got = get(client, "final")
    assert got is not None
    assert [(d["reason"], d["queue"]) for d in got.deaths] == [("expired", "delay"), ("rejected", "work")]
    assert (got.headers["x-first-death-reason"], got.headers["x-first-death-queue"]) == ("rejected", "work")


def test_expiry_cycle_back_to_the_same_queue_is_dropped(client: ClientChannel, clock: list[int]) -> None:
    client.declare_queue(
        "loop", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "loop"}
    )
    client.publish("", "loop", b"m")
    clock[0] += 10
    assert get(client, "loop") is None
    assert count(client, "loop") == 0


def test_cycle_through_two_queues_without_a_rejection_is_dropped(client: ClientChannel, clock: list[int]) -> None:
    client.declare_queue(
        "a", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"}
    )
    client.declare_queue(
        "b", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"}
    )
    client.publish("", "a", b"m")
    clock[0] += 10
    assert get(client, "a") is None
    assert count(client, "b") == 1
    clock[0] += 10
    assert get(client, "b") is None
    assert count(client, "a") == 0


def test_expiry_cycle_after_an_older_rejection_elsewhere_is_dropped(client: ClientChannel, clock: list[int]) -> None:
    client.declare_queue(
        "park", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "park"}
    )
    client.declare_queue("work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "park"})
    client.publish("", "work", b"m")
    reject_one(client, "work")  # x-death: [rejected@work]
    assert count(client, "park") == 1
    clock[0] += 10
    # Expiring in park would route back to park: the cycle park → park has no rejection in it.
    assert get(client, "park") is None
    assert count(client, "park") == 0


def test_dead_lettered_message_is_delivered_to_a_waiting_consumer(client: ClientChannel) -> None:
    setup_dlx(client)
    client.consume("dlq", "dl-consumer", no_ack=True)
    client.publish("", "work", b"m")
    reject_one(client, "work")
    ((deliver, payload),) = client.deliveries()
    assert (deliver.consumer_tag, deliver.exchange, payload) == ("dl-consumer", "dlx", b"m")


class OneQueueRouter:
    """A dead_letter.Router without a broker: one exchange, "dlx", that routes everything to one queue."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.stored: list[Any] = []

    def has_exchange(self, vhost: str, name: str) -> bool:
        return name == "dlx"

    def route_to(self, vhost: str, exchange: str, msg: Any) -> list[Any]:
        return [self.target]

    def enqueue(self, msg: Any, queues: list[Any]) -> None:
        self.stored.append(msg)
        for q in queues:
            q.push(msg)

    def body_of(self, msg: Any) -> bytes:
        return msg.body

    def now_ms(self) -> int:
        return 1_700_000_000_000


def test_dead_lettering_needs_only_a_router() -> None:
    from test_queue import msg

    from amqpd.broker.entry import Entry
    from amqpd.broker.publish.dead_letter import dead_letter
    from amqpd.broker.queues.queue import Queue

    source = Queue("/", "work", arguments={"x-dead-letter-exchange": "dlx"})
    target: Queue = Queue("/", "dead")
    router = OneQueueRouter(target)
    dead_letter(router, source, Entry(msg(b"late"), 1, None), "expired", "dlx")
    dead_letter(router, source, Entry(msg(b"lost"), 2, None), "expired", "nowhere")  # no such exchange: dropped
    entry = target.get()
    assert entry is not None and target.get() is None
    assert entry.msg.body == b"late" and router.stored == [entry.msg]
    (death,) = entry.msg.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == ("work", "expired", 1)
    assert death["time"] == datetime.datetime.fromtimestamp(1_700_000_000, datetime.UTC)


def test_a_dead_lettered_duplicate_is_dropped_by_a_deduplicating_queue() -> None:
    """Dead-lettering enters a queue as any publish does: x-message-deduplication drops a repeated id (the
    plugin's queue-level check sits in the backing queue, which every delivery into the queue passes)."""
    broker = new_broker()
    c = ClientChannel(broker)
    c.call(commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    c.declare_queue("dead", arguments={"x-message-deduplication": True})
    c.call(commands.Queue.Bind(queue="dead", exchange="dlx"))
    c.declare_queue("src", arguments={"x-dead-letter-exchange": "dlx"})
    for payload in (b"first", b"again"):
        c.publish("", "src", payload, message_id="same")
    for tag in (1, 2):
        c.call(commands.Basic.Get(queue="src"))
        c.ch.on_reject(method_payload(commands.Basic.Reject(tag, requeue=False)))
    assert [e.msg.body for e in broker.vhosts["/"].queues["dead"].ready] == [b"first"]
