"""RabbitMQ's list query parameters, as plain functions of a list of JSON objects:
`name` + `use_regex` filtering, `sort` (a dotted path) + `sort_reverse`, `page` + `page_size` with its
envelope, and `columns` (dotted paths) trimming each item."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

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
    filtered = name_filter(items, query.get("name", ""), query.get("use_regex", "false").lower() == "true")
    number, size = _page_numbers(query, len(filtered))
    page_count = max(1, math.ceil(len(filtered) / size))
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


def apply_lazily(
    objects: list[T],
    query: Mapping[str, str],
    build: Callable[[T], dict[str, Any]],
    fields: Mapping[str, Callable[[T], Any]],
) -> Any:
    """What apply() answers for [build(o) for o in objects], building only the objects it returns.

    `fields` reads a field straight from an object, equal to build(o)'s (dotted paths as in `sort`); it must
    have "name" and "vhost", both strings. The name filter and the sort then need no built object, so a page of
    a list of many thousands (the web UI's queue list) costs the rows shown. Sorting by a field not in `fields`
    builds every object, as apply() does. Filtering before a stable sort keeps apply()'s order."""
    sort = query.get("sort")
    if sort and sort not in fields:
        return apply([build(o) for o in objects], query)
    reverse = query.get("sort_reverse", "false").lower() == "true"
    name, vhost = fields["name"], fields["vhost"]
    kept = _filter_objects(objects, name, query)
    if sort:
        key = fields[sort]
        filtered = sorted(kept, key=lambda o: _sort_key(key(o)), reverse=reverse)
    else:
        filtered = sorted(kept, key=lambda o: (vhost(o), name(o)), reverse=reverse)
    columns = [c for c in query.get("columns", "").split(",") if c]

    def built(chunk: list[T]) -> list[dict[str, Any]]:
        items = [build(o) for o in chunk]
        return [select_columns(i, columns) for i in items] if columns else items

    if "page" not in query:
        return built(filtered)
    number, size = _page_numbers(query, len(filtered))
    return {
        "filtered_count": len(filtered),
        "item_count": len(filtered[(number - 1) * size : number * size]),
        "items": built(filtered[(number - 1) * size : number * size]),
        "page": number,
        "page_count": max(1, math.ceil(len(filtered) / size)),
        "page_size": size,
        "total_count": len(objects),
    }


@dataclass(frozen=True)
class KeptOrder(Generic[T]):
    """Objects already kept in the listing's default order (by vhost, then name): `count` of them, and
    `read(start, stop)` the ones at positions start to stop (exclusive)."""

    count: int
    read: Callable[[int, int], list[T]]


def in_kept_order(query: Mapping[str, str]) -> bool:
    """Whether the page asked for is a slice of the default order, unfiltered: page_in_kept_order answers it."""
    return "page" in query and not query.get("sort") and not query.get("name")


def page_in_kept_order(order: KeptOrder[T], query: Mapping[str, str], build: Callable[[T], dict[str, Any]]) -> Any:
    """What apply_lazily() answers for such a page, reading and building only its rows (no sort, no pass over
    every object: paging through many thousands of queues costs each page its own rows)."""
    number, size = _page_numbers(query, order.count)
    start, stop = (number - 1) * size, min(number * size, order.count)
    if query.get("sort_reverse", "false").lower() == "true":
        chunk = order.read(max(0, order.count - stop), order.count - start)[::-1]
    else:
        chunk = order.read(start, stop)
    columns = [c for c in query.get("columns", "").split(",") if c]
    items = [build(o) for o in chunk]
    return {
        "filtered_count": order.count,
        "item_count": len(items),
        "items": [select_columns(i, columns) for i in items] if columns else items,
        "page": number,
        "page_count": max(1, math.ceil(order.count / size)),
        "page_size": size,
        "total_count": order.count,
    }


def _filter_objects(objects: list[T], name: Callable[[T], str], query: Mapping[str, str]) -> list[T]:
    wanted = query.get("name", "")
    if not wanted:
        return objects
    if query.get("use_regex", "false").lower() == "true":
        try:
            pattern = re.compile(wanted)
        except re.error as exc:
            raise BadQuery("bad_request", f"invalid regular expression: {exc}") from None
        return [o for o in objects if pattern.search(name(o))]
    return [o for o in objects if wanted in name(o)]


def _page_numbers(query: Mapping[str, str], filtered: int) -> tuple[int, int]:
    """page and page_size, refused as page() refuses them."""
    number, size = _int(query, "page", 1), _int(query, "page_size", 100)
    if number < 1 or size < 1 or size > MAX_PAGE_SIZE:
        raise BadQuery(
            "invalid_pagination_parameters", f"Invalid pagination parameters: page number {number}, page size {size}"
        )
    if number > max(1, math.ceil(filtered / size)):
        raise BadQuery("page_out_of_range", f"Page out of range, page: {number} page size: {size}, len: {filtered}")
    return number, size
