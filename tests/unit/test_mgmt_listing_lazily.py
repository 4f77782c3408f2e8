"""The queue list built lazily (only the page shown) must answer exactly what the plain listing answers for the
same queues and query: a differential test over random queries, and each field read straight from a queue
equal to the one in its API object."""

from __future__ import annotations

from typing import Any

from fakes import new_broker
from hypothesis import given, settings
from hypothesis import strategies as st

from amqpd.mgmt import listing, objects
from amqpd.mgmt.stats import Rates

ITEMS = [
    {"name": n, "vhost": v, "messages": m, "message_stats": {"ack_details": {"rate": r}}}
    for n, v, m, r in [
        ("b", "/", 3, 1.5),
        ("a", "x", 3, 0.0),
        ("c", "/", 0, 2.0),
        ("a", "/", 7, 1.5),
        ("ab", "/", 1, 0.0),
    ]
]
FIELDS = {
    "name": lambda i: i["name"],
    "vhost": lambda i: i["vhost"],
    "messages": lambda i: i["messages"],
    "message_stats.ack_details.rate": lambda i: i["message_stats"]["ack_details"]["rate"],
}


def outcome(run: Any) -> Any:
    try:
        return run()
    except listing.BadQuery as exc:
        return ("refused", exc.error, exc.reason)


queries = st.fixed_dictionaries(
    {},
    optional={
        "sort": st.sampled_from(["name", "vhost", "messages", "message_stats.ack_details.rate", "policy", ""]),
        "sort_reverse": st.sampled_from(["true", "false"]),
        "page": st.sampled_from(["1", "2", "3", "0", "x"]),
        "page_size": st.sampled_from(["1", "2", "100", "501"]),
        "name": st.sampled_from(["", "a", "^a", "b$", "("]),
        "use_regex": st.sampled_from(["true", "false"]),
        "columns": st.sampled_from(["", "name", "name,message_stats.ack_details.rate"]),
    },
)


@settings(max_examples=300, deadline=None)
@given(query=queries, order=st.permutations(range(len(ITEMS))))
def test_the_lazy_listing_answers_what_the_plain_one_does(query: dict[str, str], order: list[int]) -> None:
    items = [ITEMS[i] for i in order]
    built: list[str] = []

    def build(item: dict[str, Any]) -> dict[str, Any]:
        built.append(item["name"])
        return dict(item)

    plain = outcome(lambda: listing.apply([dict(i) for i in items], query))
    lazy = outcome(lambda: listing.apply_lazily(items, query, build, FIELDS))
    assert lazy == plain
    if "page" in query and not isinstance(lazy, tuple) and query.get("sort", "") in FIELDS | {"": None}:
        assert len(built) == lazy["item_count"]  # only the rows on the page were built


def test_each_field_read_from_a_queue_equals_the_api_objects() -> None:
    broker = new_broker(data_dir="")
    vhost = broker.vhosts["/"]
    for name, args in (("plain", {}), ("stream", {"x-queue-type": "stream"}), ("quorum", {"x-queue-type": "quorum"})):
        vhost.declare_queue(
            name, passive=False, durable=True, exclusive=False, auto_delete=False, arguments=args, owner=None
        )
    rates = Rates()
    queues = list(vhost.queues.values())
    rates.sample(queues, [], {})
    fields = objects.queue_fields(rates)
    for q in queues:
        info = objects.queue_info(q, rates)
        for path, read in fields.items():
            assert read(q) == listing.lookup(info, path), (q.name, path)


kept_order_queries = st.fixed_dictionaries(
    {"page": st.sampled_from(["1", "2", "3", "4", "0", "x"])},
    optional={
        "sort_reverse": st.sampled_from(["true", "false"]),
        "page_size": st.sampled_from(["1", "2", "3", "100", "501"]),
        "columns": st.sampled_from(["", "name", "name,vhost"]),
        "sort": st.just(""),
        "name": st.just(""),
    },
)


@settings(max_examples=200, deadline=None)
@given(query=kept_order_queries, names=st.lists(st.sampled_from(["a", "b", "ab", "z", "é", "B"]), unique=True))
def test_a_page_read_from_the_kept_order_is_the_page_the_sorted_listing_answers(
    query: dict[str, str], names: list[str]
) -> None:
    broker = new_broker(data_dir="")
    broker.access.add_vhost("other")
    for vhost in ("other", "/"):
        for name in names:
            broker.vhosts[vhost].declare_queue(
                name, passive=False, durable=False, exclusive=False, auto_delete=False, arguments={}, owner=None
            )
    if names:  # a deleted queue leaves the kept order too
        broker.vhosts["/"].delete_queue(names[0], if_unused=False, if_empty=False, owner=None)
    vhosts = list(broker.vhosts.values())
    queues = [q for v in vhosts for q in v.queues.values()]

    def build(q: Any) -> dict[str, Any]:
        return {"name": q.name, "vhost": q.vhost}

    assert listing.in_kept_order(query)
    fields = objects.queue_fields(Rates())
    sorted_page = outcome(lambda: listing.apply_lazily(queues, query, build, fields))
    kept_page = outcome(lambda: listing.page_in_kept_order(objects.queues_in_order(vhosts), query, build))
    assert kept_page == sorted_page
