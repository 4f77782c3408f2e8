"""The management API's list parameters (columns, sort, pagination, name filter) and rate sampling, without
sockets."""

from __future__ import annotations

import pytest

from amqpd.mgmt import listing
from amqpd.mgmt.stats import Rates, depth_rates, message_stats

ITEMS = [
    {"name": "b", "messages": 3, "message_stats": {"publish_details": {"rate": 1.5}}},
    {"name": "a", "messages": 10, "message_stats": {"publish_details": {"rate": 9.0}}},
    {"name": "c", "messages": 1},
]


def test_without_page_a_listing_is_a_plain_list_sorted_by_vhost_and_name() -> None:
    assert [i["name"] for i in listing.apply(ITEMS, {})] == ["a", "b", "c"]
    unnamed = [{"source": "b"}, {"source": "a"}]
    assert listing.apply(unnamed, {}) == unnamed


def test_sort_follows_a_dotted_path_and_puts_missing_values_last() -> None:
    by_rate = listing.apply(ITEMS, {"sort": "message_stats.publish_details.rate"})
    assert [i["name"] for i in by_rate] == ["b", "a", "c"]  # c has no rate: last
    assert [i["name"] for i in listing.apply(ITEMS, {"sort": "messages", "sort_reverse": "true"})] == ["a", "b", "c"]


def test_columns_keep_only_the_named_fields_and_their_nesting() -> None:
    out = listing.apply(ITEMS, {"columns": "name,message_stats.publish_details.rate", "sort": "name"})
    assert out == [
        {"name": "a", "message_stats": {"publish_details": {"rate": 9.0}}},
        {"name": "b", "message_stats": {"publish_details": {"rate": 1.5}}},
        {"name": "c"},
    ]


def test_a_page_comes_in_rabbitmqs_envelope_with_filter_counts() -> None:
    page = listing.apply(ITEMS, {"page": "1", "page_size": "2", "sort": "name", "columns": "name"})
    assert page == {
        "filtered_count": 3,
        "item_count": 2,
        "items": [{"name": "a"}, {"name": "b"}],
        "page": 1,
        "page_count": 2,
        "page_size": 2,
        "total_count": 3,
    }
    regex = listing.apply(ITEMS, {"page": "1", "name": "^[ab]$", "use_regex": "true"})
    assert (regex["filtered_count"], regex["total_count"]) == (2, 3)


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"page": "1", "page_size": "501"}, "invalid_pagination_parameters"),
        ({"page": "0"}, "invalid_pagination_parameters"),
        ({"page": "3", "page_size": "2"}, "page_out_of_range"),
        ({"page": "x"}, "bad_request"),
        ({"page": "1", "name": "(", "use_regex": "true"}, "bad_request"),
    ],
)
def test_bad_list_parameters_are_refused_with_rabbitmqs_error_tags(query: dict[str, str], error: str) -> None:
    with pytest.raises(listing.BadQuery) as refused:
        listing.apply(ITEMS, query)
    assert refused.value.error == error


class Counted:
    def __init__(self) -> None:
        self.published = self.delivered = self.acked = 0
        self.ready: list[object] = []
        self.unacked = 0


def test_rates_are_the_counter_difference_over_the_sampling_interval_and_idle_since_is_set() -> None:
    now = [100.0]
    rates = Rates(clock=lambda: now[0])
    q = Counted()
    rates.sample([q], [], {})
    q.published, q.delivered = 50, 10
    now[0] = 105.0
    rates.sample([q], [], {})
    stats = message_stats({"publish": q.published}, rates.of(q))
    assert stats == {"publish": 50, "publish_details": {"rate": 10.0}}
    assert rates.of(q).rate("deliver_get") == 2.0  # type: ignore[union-attr]
    assert rates.of(q).idle_since is None  # type: ignore[union-attr]
    now[0] = 110.0
    rates.sample([q], [], {})
    assert rates.of(q).rate("publish") == 0.0  # type: ignore[union-attr]
    assert rates.of(q).idle_since == 105.0  # type: ignore[union-attr]
    rates.sample([], [], {})
    assert rates.of(q) is None  # a deleted queue is forgotten


def test_length_rates_are_how_fast_a_queue_grows_or_drains_summed_over_queues() -> None:
    now = [100.0]
    rates = Rates(clock=lambda: now[0])
    a, b = Counted(), Counted()
    rates.sample([a, b], [], {})
    a.ready, a.unacked = [None] * 20, 5  # a grows by 25 in 5 s
    b.ready = []  # b stays empty
    now[0] = 105.0
    rates.sample([a, b], [], {})
    assert depth_rates([rates.of(a), rates.of(b)]) == (5.0, 4.0, 1.0)
    a.ready, a.unacked = [], 0  # a drains
    now[0] = 110.0
    rates.sample([a, b], [], {})
    assert depth_rates([rates.of(a), rates.of(b)]) == (-5.0, -4.0, -1.0)
