"""RabbitMQ's list query parameters, as plain functions of a list of JSON objects:
`name` + `use_regex` filtering, `sort` (a dotted path) + `sort_reverse`, `page` + `page_size` with its
envelope, and `columns` (dotted paths) trimming each item."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

MAX_PAGE_SIZE = 500  # RabbitMQ refuses bigger pages


class BadQuery(Exception):
    """A query parameter RabbitMQ answers with 400; `error` is its error tag."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


def lookup(item: Mapping[str, Any], path: str) -> Any:
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    """Mixed types sort numbers, then strings, then the rest (missing values last), never raising."""
    if isinstance(value, bool):
        return (2, str(value))
    if isinstance(value, (int, float)):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (3, "" if value is None else str(value))


def select_columns(item: Mapping[str, Any], columns: list[str]) -> dict[str, Any]:
    """Only the named fields; a dotted column keeps its nesting (message_stats.publish_details.rate)."""
    out: dict[str, Any] = {}
    for column in columns:
        value = lookup(item, column)
        if value is None and column.split(".")[0] not in item:
            continue
        parts = column.split(".")
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


def name_filter(items: list[dict[str, Any]], name: str, use_regex: bool) -> list[dict[str, Any]]:
    if not name:
        return items
    if use_regex:
        try:
            pattern = re.compile(name)
        except re.error as exc:
            raise BadQuery("bad_request", f"invalid regular expression: {exc}") from None
        return [i for i in items if pattern.search(str(i.get("name", "")))]
    return [i for i in items if name in str(i.get("name", ""))]


def apply(items: list[dict[str, Any]], query: Mapping[str, str]) -> Any:
    """The response body for a listing: a plain list, or RabbitMQ's page envelope when `page` is given."""
    sort = query.get("sort")
    reverse = query.get("sort_reverse", "false").lower() == "true"
    if sort:
        items = sorted(items, key=lambda i: _sort_key(lookup(i, sort)), reverse=reverse)
    elif items and "name" in items[0]:  # RabbitMQ's default order: by vhost, then name
        items = sorted(items, key=lambda i: (str(i.get("vhost", "")), str(i["name"])), reverse=reverse)
    elif reverse:
        items = list(reversed(items))
    columns = [c for c in query.get("columns", "").split(",") if c]
    if "page" not in query:
        filtered = name_filter(items, query.get("name", ""), query.get("use_regex", "false").lower() == "true")
        return [select_columns(i, columns) for i in filtered] if columns else filtered
    return page(items, query, columns)


def _int(query: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(query.get(key, default))
    except ValueError:
        raise BadQuery("bad_request", f"{key} must be an integer") from None


def page(items: list[dict[str, Any]], query: Mapping[str, str], columns: list[str]) -> dict[str, Any]:
    number, size = _int(query, "page", 1), _int(query, "page_size", 100)
    if number < 1 or size < 1 or size > MAX_PAGE_SIZE:
        raise BadQuery(
            "invalid_pagination_parameters", f"Invalid pagination parameters: page number {number}, page size {size}"
        )
    filtered = name_filter(items, query.get("name", ""), query.get("use_regex", "false").lower() == "true")
    page_count = max(1, math.ceil(len(filtered) / size))
    if number > page_count:
        raise BadQuery(
            "page_out_of_range", f"Page out of range, page: {number} page size: {size}, len: {len(filtered)}"
        )
    chunk = filtered[(number - 1) * size : number * size]
    return {
        "filtered_count": len(filtered),
        "item_count": len(chunk),
        "items": [select_columns(i, columns) for i in chunk] if columns else chunk,
        "page": number,
        "page_count": page_count,
        "page_size": size,
        "total_count": len(items),
    }
