"""One queue's declare, bind, unbind, delete, and one connection's close do the same work whether the vhost holds
a few queues or many (issue 30): a step that walks every queue made deleting 20,000 queues take half a minute.
So do a page of the management API's queue list, a binding to a fanout exchange that already has many,
opening a connection under per-user and per-vhost connection limits while the user holds many, and opening a
channel under the user's channel limit; a full route cache makes room for one route by dropping one.

Work is counted, not timed: the Python lines executed during the operation (sys.settrace), which a loop or a
comprehension over all queues multiplies by their number; and, for a copy made in C (a list of every
destination), the bytes it allocates. The durable store is real, so its bookkeeping counts."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from pamqp import body, commands, frame, header
from starlette.requests import Request

from amqpd.broker.broker import Broker
from amqpd.broker.recovery import restore
from amqpd.broker.routing import vhost as vhost_module
from amqpd.broker.routing.exchanges import topic as topic_module
from amqpd.broker.routing.topic_trie import TopicTrie
from amqpd.broker.routing.vhost import VirtualHost
from amqpd.config import Settings
from amqpd.mgmt.api import ManagementAPI
from amqpd.mgmt.stats import Rates
from amqpd.protocol.constants import PROTOCOL_HEADER
from amqpd.session.connection import Session
from store import MessageStore

pytestmark = pytest.mark.anyio

SMALL, LARGE = 20, 1_000
LOGARITHMIC = 8
OWNER = object()


def lines_executed(operation: Callable[[], Any]) -> int:
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    # A garbage collection during the operation would run finalizers of other tests' garbage (Python code,
    # counted here) in one of the two runs compared and not the other.
    gc.collect()
    gc.disable()
    sys.settrace(tracer)
    try:
        operation()
    finally:
        sys.settrace(None)
        gc.enable()
    return count


def bytes_allocated(operation: Callable[[], Any]) -> int:
    """The most memory the operation held at once beyond what was held before it (tracemalloc)."""
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        operation()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
        gc.enable()


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """A coroutine that never waits, run to its end here (so that the tracer sees it all)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine waited")


class Transport:
    def request_flush(self) -> None: ...

    def close(self) -> None: ...

    def hold_reading(self, reason: object) -> None: ...

    def release_reading(self, reason: object) -> None: ...

    def can_write(self) -> bool:
        return True


def open_connection(broker: Broker) -> Session:
    session = Session(broker, Transport(), "test")
    session.feed(PROTOCOL_HEADER)
    for method in (
        commands.Connection.StartOk({"capabilities": {}}, "PLAIN", "\0guest\0guest", "en_US"),
        commands.Connection.TuneOk(2047, 131072, 0),
        commands.Connection.Open("/"),
    ):
        session.feed(frame.marshal(method, 0))
    session.take_output()
    assert session in broker.connections
    return session


def queue_page(api: ManagementAPI) -> Any:
    query = b"page=2&page_size=10"
    request = Request({"type": "http", "method": "GET", "path": "/api/queues/%2F", "query_string": query})
    page = run(api.queues(request, "/"))
    assert len(page["items"]) == 10
    return page


def declare(vh: VirtualHost, name: str, exclusive: bool = False) -> None:
    vh.declare_queue(
        name, passive=False, durable=not exclusive, exclusive=exclusive, auto_delete=False, arguments={}, owner=OWNER
    )


async def work_per_operation(path: Path, queues: int) -> dict[str, int]:
    """Lines executed by one of each operation in a vhost that already holds `queues` durable queues, each bound
    to amq.direct, and as many exclusive queues of other connections."""
    store = MessageStore(path, fsync="none")
    restore(broker := Broker(Settings(data_dir=str(path)), store=store), await store.open(load_records=False))
    vh = broker.vhosts["/"]
    for i in range(queues):
        declare(vh, f"q{i}")
        vh.bind("amq.direct", vh.queues[f"q{i}"], f"q{i}", {})
        vh.declare_queue(
            f"x{i}", passive=False, durable=False, exclusive=True, auto_delete=False, arguments={}, owner=object()
        )
    declare(vh, "mine", exclusive=True)
    work = {
        "declare": lines_executed(lambda: declare(vh, "new")),
        "bind": lines_executed(lambda: vh.bind("amq.direct", vh.queues["new"], "new", {})),
        "unbind": lines_executed(lambda: vh.unbind("amq.direct", vh.queues["new"], "new", {})),
        "delete": lines_executed(lambda: vh.delete_queue("q0", if_unused=False, if_empty=False, owner=OWNER)),
        "close a connection": lines_executed(lambda: vh.drop_exclusive(OWNER)),
        "a page of the queue list": lines_executed(lambda: queue_page(ManagementAPI(broker, Rates(), []))),
    }
    await store.close()
    return work


async def test_one_queue_operation_does_not_look_at_the_other_queues(tmp_path: Path) -> None:
    small = await work_per_operation(tmp_path / "small", SMALL)
    large = await work_per_operation(tmp_path / "large", LARGE)
    assert large.keys() == small.keys()
    for operation in small:
        # Keeping the names in order (sortedcontainers) costs a logarithm: a line or two of its tree's depth.
        assert large[operation] - small[operation] <= LOGARITHMIC, (operation, small, large)


def opening_work(connections: int) -> int:
    """Lines executed by one connection.open while its user already holds `connections`, under a per-user and
    a per-vhost connection limit (both checked on each open)."""
    broker = Broker(Settings(data_dir="", max_connections_per_user=10 * connections))
    broker.access.set_vhost_limits("/", {"max-connections": 10 * connections})
    for _ in range(connections):
        open_connection(broker)
    return lines_executed(lambda: open_connection(broker))


def test_opening_a_connection_under_connection_limits_does_not_count_the_others() -> None:
    assert opening_work(LARGE) == opening_work(SMALL)


def fanout_with_bindings(count: int) -> VirtualHost:
    vh = VirtualHost("/")
    fanout = vh.exchanges["amq.fanout"]
    for i in range(count + 1):
        declare(vh, f"q{i}")
    for i in range(count):
        vh.bind("amq.fanout", vh.queues[f"q{i}"], "", {})
    assert len(fanout.route("")) == count  # routed once: what it caches is built
    return vh


def test_binding_to_a_fanout_copies_nothing_of_its_other_bindings() -> None:
    allocated = {}
    for count in (SMALL, LARGE):
        vh = fanout_with_bindings(count)
        new = vh.queues[f"q{count}"]
        allocated[count] = bytes_allocated(lambda: vh.bind("amq.fanout", new, "", {}))  # noqa: B023
        assert new in vh.exchanges["amq.fanout"].route("")
    # A copy of the destination list holds a pointer per binding; below a byte per binding, there was none.
    assert allocated[LARGE] - allocated[SMALL] < LARGE - SMALL


def channel_opening_work(connections: int) -> int:
    """Lines executed by one channel.open under the user's max-channels while the user holds `connections`
    connections with a channel open on each (and has closed one on each, so closing is counted too)."""
    broker = Broker(Settings(data_dir=""))
    broker.access.set_user_limits("guest", {"max-channels": 10 * connections + 10})
    sessions = [open_connection(broker) for _ in range(connections)]
    for session in sessions:
        for channel in (1, 2):
            session.feed(frame.marshal(commands.Channel.Open(), channel))
        session.feed(frame.marshal(commands.Channel.Close(200, "bye", 0, 0), 2))
        session.take_output()
    session = open_connection(broker)
    return lines_executed(lambda: session.feed(frame.marshal(commands.Channel.Open(), 1)))


def test_opening_a_channel_under_the_users_channel_limit_does_not_count_the_others() -> None:
    assert channel_opening_work(LARGE) == channel_opening_work(SMALL)


def test_the_users_channel_limit_counts_channels_still_open() -> None:
    """The kept count follows opens, closes and connections closing with channels open (a channel over the
    limit is a connection error: that connection closes)."""
    broker = Broker(Settings(data_dir=""))
    broker.access.set_user_limits("guest", {"max-channels": 3})
    first = open_connection(broker)
    assert opens(first, 1) and opens(first, 2)
    first.feed(frame.marshal(commands.Channel.Close(200, "bye", 0, 0), 1))
    second = open_connection(broker)
    assert opens(second, 1) and opens(second, 2)
    assert not opens(second, 3)  # 2 here and 1 on the first
    assert b"user limit of (3)" in second.take_output()
    third = open_connection(broker)
    assert opens(third, 1) and opens(third, 2)
    first.connection_lost()
    assert opens(third, 3)
    assert not opens(third, 4)


def opens(session: Session, channel: int) -> bool:
    session.feed(frame.marshal(commands.Channel.Open(), channel))
    return channel in session.channels


def test_a_full_route_cache_drops_one_route_for_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A publisher using one key more than the cache holds re-plans that one route, not all of them."""
    monkeypatch.setattr(vhost_module, "ROUTE_CACHE_MAX", LARGE)
    monkeypatch.setattr(topic_module, "ROUTE_CACHE_LIMIT", LARGE)
    vh = VirtualHost("/")
    declare(vh, "q")
    vh.bind("amq.topic", vh.queues["q"], "#", {})
    planned, matched = count_calls(monkeypatch, vh, "_route_uncached"), count_calls(monkeypatch, TopicTrie, "match")
    topic = vh.exchanges["amq.topic"]
    for i in range(LARGE + 1):
        assert vh.route_key(topic, f"k{i}") == [vh.queues["q"]]
    assert planned == [LARGE + 1] and matched == [LARGE + 1]
    for i in range(1, LARGE + 1):  # all but the oldest are still cached
        vh.route_key(topic, f"k{i}")
        topic.route(f"k{i}")
    assert planned == [LARGE + 1] and matched == [LARGE + 1]
    vh.route_key(topic, "k0")
    assert planned == [LARGE + 2] and matched == [LARGE + 2]


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """A one-item list counting the calls of owner.name from now on."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def page_work_with_unacked(deliveries: int) -> int:
    """Lines executed by a page of the queue list while a consumer holds `deliveries` unacked."""
    broker = Broker(Settings(data_dir=""))
    vh = broker.vhosts["/"]
    for i in range(SMALL):
        declare(vh, f"q{i}")
    session = open_connection(broker)
    session.feed(frame.marshal(commands.Channel.Open(), 1))
    session.feed(frame.marshal(commands.Basic.Consume(queue="q0", consumer_tag="c"), 1))
    content = header.ContentHeader(0, 3, commands.Basic.Properties())
    publish = [commands.Basic.Publish(exchange="", routing_key="q0"), content, body.ContentBody(b"abc")]
    for _ in range(deliveries):
        session.feed(b"".join(frame.marshal(part, 1) for part in publish))
    session.take_output()
    assert (vh.queues["q0"].unacked, vh.queues["q0"].unacked_bytes) == (deliveries, 3 * deliveries)
    return lines_executed(lambda: queue_page(ManagementAPI(broker, Rates(), [])))


def test_a_page_of_the_queue_list_does_not_look_at_unacked_deliveries() -> None:
    assert page_work_with_unacked(LARGE) == page_work_with_unacked(SMALL)
