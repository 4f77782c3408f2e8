"""Fields of a management API request body, read as RabbitMQ reads them (a wrong one is a 400)."""

from __future__ import annotations

from typing import Any

from amqpd.mgmt.http_errors import bad_request


def exchange_name(name: str) -> str:
    """The default exchange is `amq.default` in API paths."""
    return "" if name == "amq.default" else name


def bool_field(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


def int_field(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise bad_request(f"{key} must be an integer") from None
    if number < 0:
        raise bad_request(f"{key} must not be negative")
    return number


def arguments_field(body: dict[str, Any]) -> dict[str, Any]:
    args = body.get("arguments") or {}
    if not isinstance(args, dict):
        raise bad_request("arguments must be an object")
    return args
