"""Policies: queue and exchange settings applied by name pattern, changeable at run time (RabbitMQ's
rabbit_policy). Per vhost, the matching policy with the highest priority applies, to queues, exchanges or
both (`apply-to`).

How a policy key combines with the queue's own x-argument is RabbitMQ's (rabbit_amqqueue_process,
rabbit_quorum_queue): for limits and timeouts the lower of the two wins, for the rest the x-argument wins.
QUEUE_KEYS / EXCHANGE_KEYS are the table of what amqpd applies; extend it when a queue learns a new argument
(its `Queue.configure` must then read the x-argument).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

MIN = "min"  # the lower of policy and x-argument
ARGUMENT = "argument"  # the x-argument when the queue has one, else the policy

# policy key -> (the x-argument it stands for, how the two combine)
QUEUE_KEYS: dict[str, tuple[str, str]] = {
    "message-ttl": ("x-message-ttl", MIN),
    "expires": ("x-expires", MIN),
    "max-length": ("x-max-length", MIN),
    "max-length-bytes": ("x-max-length-bytes", MIN),
    "delivery-limit": ("x-delivery-limit", MIN),
    "overflow": ("x-overflow", ARGUMENT),
    "dead-letter-exchange": ("x-dead-letter-exchange", ARGUMENT),
    "dead-letter-routing-key": ("x-dead-letter-routing-key", ARGUMENT),
    "queue-mode": ("x-queue-mode", ARGUMENT),
}
EXCHANGE_KEYS: dict[str, tuple[str, str]] = {
    "alternate-exchange": ("alternate-exchange", ARGUMENT),
}
# Keys RabbitMQ 3.10 knows that amqpd accepts (definitions carry them) but has nothing to apply them to:
# mirroring, federation, streams, quorum-queue tuning.
INERT_KEYS = frozenset(
    {
        "ha-mode",
        "ha-params",
        "ha-sync-mode",
        "ha-sync-batch-size",
        "ha-promote-on-shutdown",
        "ha-promote-on-failure",
        "queue-master-locator",
        "federation-upstream",
        "federation-upstream-set",
        "max-age",
        "stream-max-segment-size-bytes",
        "initial-cluster-size",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "dead-letter-strategy",
        "queue-version",
        "message-ttl-for-streams",
    }
)
APPLY_TO = ("all", "queues", "exchanges")


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse; the text says which setting is wrong."""


def _non_negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "message-ttl": (_non_negative, "is not a valid message TTL"),
    "expires": (lambda v: _non_negative(v) and v >= 1, "is not a valid queue expiry"),
    "max-length": (_non_negative, "is not a valid maximum length"),
    "max-length-bytes": (_non_negative, "is not a valid maximum length in bytes"),
    "delivery-limit": (_non_negative, "is not a valid delivery limit"),
    "overflow": (lambda v: v in ("drop-head", "reject-publish", "reject-publish-dlx"), "is not a valid overflow"),
    "dead-letter-exchange": (lambda v: isinstance(v, str), "is not a valid dead letter exchange"),
    "dead-letter-routing-key": (lambda v: isinstance(v, str), "is not a valid dead letter routing key"),
    "queue-mode": (lambda v: v in ("default", "lazy"), "is not a valid queue mode"),
    "alternate-exchange": (lambda v: isinstance(v, str), "is not a valid alternate exchange name"),
}


@dataclass
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.regex = re.compile(self.pattern)

    def applies(self, kind: str, name: str) -> bool:
        return self.apply_to in ("all", kind + "s") and self.regex.search(name) is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }


def check(pattern: Any, definition: Any, priority: Any, apply_to: Any) -> None:
    """RabbitMQ's validation of a policy, with the setting at fault in the message."""
    if not isinstance(pattern, str):
        raise PolicyError("pattern must be a string")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PolicyError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    if not isinstance(definition, dict) or not definition:
        raise PolicyError("definition must be a non-empty JSON object")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PolicyError(f"priority {priority!r} is not an integer")
    if apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to {apply_to!r} is not one of {', '.join(APPLY_TO)}")
    unknown = sorted(k for k in definition if k not in QUEUE_KEYS and k not in EXCHANGE_KEYS and k not in INERT_KEYS)
    if unknown:
        raise PolicyError(f"Validation failed\n\n{unknown} are not recognised policy settings")
    for key, value in definition.items():
        ok, text = _CHECKS.get(key, (lambda _v: True, ""))
        if not ok(value):
            raise PolicyError(f"Validation failed\n\n{value!r} {text} (setting {key})")


def merge(arguments: dict[str, Any], policy: Policy | None, keys: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """The arguments in force: the object's own x-arguments combined with its policy's settings."""
    effective = dict(arguments)
    if policy is None:
        return effective
    for key, value in policy.definition.items():
        if key not in keys:
            continue
        argument, rule = keys[key]
        own = arguments.get(argument)
        if own is None:
            effective[argument] = value
        elif rule == MIN and isinstance(own, int) and isinstance(value, int):
            effective[argument] = min(own, value)
    return effective


class PolicyStore(Protocol):
    """Where policies are kept (store.MessageStore: the catalogue), each as its JSON document."""

    def put_policy(self, vhost: str, name: str, document: str) -> None: ...
    def delete_policy(self, vhost: str, name: str) -> None: ...


class Policies:
    """Every vhost's policies. `changed(vhost)` is called after each change (the broker re-applies them); each
    change is written through to `store` (none: in memory only)."""

    def __init__(self, store: PolicyStore | None = None) -> None:
        self.by_vhost: dict[str, dict[str, Policy]] = {}
        self.changed: Callable[[str], None] = lambda vhost: None
        self.store = store

    def put(
        self, vhost: str, name: str, pattern: Any, definition: Any, priority: Any = 0, apply_to: Any = "all"
    ) -> bool:
        """Create or replace; True when it existed."""
        check(pattern, definition, priority, apply_to)
        held = self.by_vhost.setdefault(vhost, {})
        existed = name in held
        policy = held[name] = Policy(vhost, name, pattern, dict(definition), priority, apply_to)
        if self.store is not None:
            self.store.put_policy(vhost, name, json.dumps(policy.as_json()))
        self.changed(vhost)
        return existed

    def delete(self, vhost: str, name: str) -> bool:
        held = self.by_vhost.get(vhost, {})
        if held.pop(name, None) is None:
            return False
        if self.store is not None:
            self.store.delete_policy(vhost, name)
        self.changed(vhost)
        return True

    def drop_vhost(self, vhost: str) -> None:
        for name in list(self.by_vhost.pop(vhost, {})):
            if self.store is not None:
                self.store.delete_policy(vhost, name)

    def get(self, vhost: str, name: str) -> Policy | None:
        return self.by_vhost.get(vhost, {}).get(name)

    def entries(self, vhost: str | None = None) -> list[Policy]:
        vhosts: Iterable[str] = [vhost] if vhost is not None else sorted(self.by_vhost)
        return [p for v in vhosts for _, p in sorted(self.by_vhost.get(v, {}).items())]

    def match(self, vhost: str, kind: str, name: str) -> Policy | None:
        """The policy for a queue or exchange: the highest priority among those that match (then by name)."""
        best: Policy | None = None
        for p in self.by_vhost.get(vhost, {}).values():
            if p.applies(kind, name) and (best is None or (p.priority, best.name) > (best.priority, p.name)):
                best = p
        return best

    def load(self, documents: Iterable[str]) -> None:
        """Recovery: the documents `store.put_policy` was given."""
        for document in documents:
            row = json.loads(document)
            self.by_vhost.setdefault(row["vhost"], {})[row["name"]] = Policy(
                row["vhost"],
                row["name"],
                row["pattern"],
                row["definition"],
                row.get("priority", 0),
                row.get("apply-to", "all"),
            )
