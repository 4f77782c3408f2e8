"""Policy matching and RabbitMQ's precedence between a policy and a queue's own arguments, without sockets."""

from __future__ import annotations

import pytest

from amqpd.broker.routing.policy import EXCHANGE_KEYS, QUEUE_KEYS, Policies, PolicyError, check, merge


def policies(*rows: tuple[str, str, dict, int, str]) -> Policies:
    p = Policies()
    for name, pattern, definition, priority, apply_to in rows:
        p.put("/", name, pattern, definition, priority, apply_to)
    return p


def test_limits_take_the_lower_value_and_other_settings_keep_the_queues_argument() -> None:
    p = policies(
        (
            "p",
            ".*",
            {
                "max-length": 5,
                "message-ttl": 100,
                "expires": 9000,
                "dead-letter-exchange": "pol",
                "overflow": "reject-publish",
            },
            0,
            "queues",
        )
    )
    policy = p.match("/", "queue", "q")
    own = {"x-max-length": 10, "x-message-ttl": 50, "x-dead-letter-exchange": "arg"}
    assert merge(own, policy, QUEUE_KEYS) == {
        "x-max-length": 5,
        "x-message-ttl": 50,
        "x-expires": 9000,
        "x-dead-letter-exchange": "arg",
        "x-overflow": "reject-publish",
    }
    assert merge(own, None, QUEUE_KEYS) == own


def test_the_highest_priority_matching_policy_of_the_right_kind_wins() -> None:
    p = policies(
        ("low", "^a", {"max-length": 1}, 1, "all"),
        ("high", "^a", {"max-length": 2}, 7, "queues"),
        ("x-only", "^a", {"alternate-exchange": "ae"}, 9, "exchanges"),
        ("other", "^b", {"max-length": 3}, 99, "all"),
    )
    assert p.match("/", "queue", "abc").name == "high"  # type: ignore[union-attr]
    assert p.match("/", "exchange", "abc").name == "x-only"  # type: ignore[union-attr]
    assert p.match("/", "queue", "zzz") is None
    assert p.match("/other-vhost", "queue", "abc") is None
    assert merge({}, p.match("/", "exchange", "abc"), EXCHANGE_KEYS) == {"alternate-exchange": "ae"}


class Catalogue:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], str] = {}

    def put_policy(self, vhost: str, name: str, document: str) -> None:
        self.rows[(vhost, name)] = document

    def delete_policy(self, vhost: str, name: str) -> None:
        self.rows.pop((vhost, name), None)


def test_changes_are_reported_written_through_and_loaded_back() -> None:
    store = Catalogue()
    p = Policies(store)
    changed: list[str] = []
    p.changed = changed.append
    assert p.put("/", "p", ".*", {"max-length": 1}) is False
    assert p.put("/", "p", ".*", {"max-length": 2}, 3, "queues") is True
    p.put("/", "gone", ".*", {"max-length": 9})
    assert p.delete("/", "gone") is True and p.delete("/", "gone") is False
    assert changed == ["/", "/", "/", "/"]
    again = Policies()
    again.load(store.rows.values())
    assert [x.as_json() for x in again.entries()] == [
        {
            "vhost": "/",
            "name": "p",
            "pattern": ".*",
            "apply-to": "queues",
            "definition": {"max-length": 2},
            "priority": 3,
        }
    ]
    p.drop_vhost("/")
    assert store.rows == {} and p.entries() == []


@pytest.mark.parametrize(
    ("pattern", "definition", "priority", "apply_to"),
    [
        ("(", {"max-length": 1}, 0, "all"),
        (".*", {}, 0, "all"),
        (".*", {"max-length": -1}, 0, "all"),
        (".*", {"expires": 0}, 0, "all"),
        (".*", {"max-length": True}, 0, "all"),
        (".*", {"nonsense": 1}, 0, "all"),
        (".*", {"max-length": 1}, "high", "all"),
        (".*", {"max-length": 1}, 0, "streams"),
    ],
)
def test_invalid_policies_are_refused(pattern: str, definition: dict, priority: object, apply_to: str) -> None:
    with pytest.raises(PolicyError):
        check(pattern, definition, priority, apply_to)


def test_rabbitmq_settings_amqpd_cannot_apply_are_accepted() -> None:
    check(".*", {"ha-mode": "all", "ha-sync-mode": "automatic", "max-length": 3}, 0, "all")
