"""A shovel parameter's value checked as RabbitMQ's rabbit_shovel_parameters checks it (AMQP 0-9-1 on both
sides), with its reasons word for word, and turned into a `ShovelSpec`."""

from __future__ import annotations

import html
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from amqpd.broker.parameters import ParameterError

ACK_MODES = ("no-ack", "on-publish", "on-confirm")
SCHEMES = ("amqp", "amqps")


@dataclass
class ShovelSpec:
    src_uris: list[str]
    dest_uris: list[str]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = "#"
    prefetch: int = 1000
    delete_after: str | int = "never"
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = field(default_factory=dict)
    ack_mode: str = "on-confirm"
    reconnect_delay: float = 1.0


def erlang(value: Any) -> str:
    """A JSON value as RabbitMQ prints the Erlang term it decoded (then HTML-escaped, as its API does)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = f'<<"{value}">>'
    elif isinstance(value, list):
        text = "[" + ",".join(erlang(v) for v in value) + "]"
    elif value is None:
        text = "null"
    else:
        text = str(value)
    return html.escape(text, quote=False)


def _binary(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ParameterError(f"{key} should be binary, actually was {erlang(value)}")
    return value


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParameterError(f"{key} should be a number, actually was {erlang(value)}")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{key} should be boolean, actually was {erlang(value)}")
    return value


def check_uri(uri: str) -> None:
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in SCHEMES:
        raise ParameterError(f'"{uri}" not a valid URI: {{{{unexpected_uri_scheme,"{scheme}"}},"{uri}"}}')
    try:
        urllib.parse.urlsplit(uri).port  # noqa: B018 - parsing is the check
    except ValueError:
        raise ParameterError(f'"{uri}" not a valid URI: {{unable_to_parse_uri,"{uri}"}}') from None


def _uris(key: str, value: Any) -> list[str]:
    uris = value if isinstance(value, list) else [value]
    if not uris or not all(isinstance(u, str) for u in uris):
        raise ParameterError(f"{key} should be list, actually was {erlang(value)}")
    for uri in uris:
        check_uri(uri)
    return list(uris)


def _delete_after(value: Any) -> str | int:
    if value in ("never", "queue-length") or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value  # type: ignore[no-any-return]
    raise ParameterError(
        'src-delete-after should be a number greater than or equal to 0, "never" or "queue-length",'
        f" actually was {erlang(value)}"
    )


def _ack_mode(value: Any) -> str:
    if value not in ACK_MODES:
        modes = ",".join(erlang(m) for m in ACK_MODES)
        raise ParameterError(f"ack-mode should be one of [{modes}], actually was {erlang(value)}")
    return str(value)


def _properties(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParameterError(f"dest-publish-properties not a list {erlang(value)}")
    return value


# key -> (the spec field it sets, its check); RabbitMQ 3.10's keys for AMQP 0-9-1 on both sides
FIELDS: dict[str, tuple[str | None, Any]] = {
    "src-uri": ("src_uris", _uris),
    "src-queue": ("src_queue", _binary),
    "src-exchange": ("src_exchange", _binary),
    "src-exchange-key": ("src_exchange_key", _binary),
    "src-prefetch-count": ("prefetch", _number),
    "src-delete-after": ("delete_after", lambda _k, v: _delete_after(v)),
    "dest-uri": ("dest_uris", _uris),
    "dest-queue": ("dest_queue", _binary),
    "dest-exchange": ("dest_exchange", _binary),
    "dest-exchange-key": ("dest_exchange_key", _binary),
    "dest-add-forward-headers": ("add_forward_headers", _boolean),
    "dest-add-timestamp-header": ("add_timestamp_header", _boolean),
    "dest-publish-properties": ("publish_properties", lambda _k, v: _properties(v)),
    "ack-mode": ("ack_mode", lambda _k, v: _ack_mode(v)),
    "reconnect-delay": ("reconnect_delay", _number),
    "src-protocol": (None, lambda _k, v: _one_of_protocols("src-protocol", v)),
    "dest-protocol": (None, lambda _k, v: _one_of_protocols("dest-protocol", v)),
}


def _one_of_protocols(key: str, value: Any) -> None:
    if value != "amqp091":
        raise ParameterError(f"{key} should be one of [{erlang('amqp091')}], actually was {erlang(value)}")


def parse(name: str, value: Any) -> ShovelSpec:
    """The spec, or ParameterError with RabbitMQ's reason."""
    if not isinstance(value, dict):
        raise ParameterError(f"{name}: the value must be a JSON object, actually was {erlang(value)}")
    unknown = [(k, v) for k, v in value.items() if k not in FIELDS]
    if unknown:
        terms = ",".join(f"{{{erlang(k)},{erlang(v)}}}" for k, v in unknown)
        raise ParameterError(f"Unrecognised terms [{terms}] in {name}")
    for key in ("src-uri", "dest-uri"):
        if key not in value:
            raise ParameterError(f'Key "{key}" not found in {name}')
    settings: dict[str, Any] = {}
    for key, raw in value.items():
        attribute, check = FIELDS[key]
        checked = check(key, raw)
        if attribute is not None:
            settings[attribute] = checked
    if "src_queue" in settings and "src_exchange" in settings:
        raise ParameterError("Cannot specify 'src-exchange' and 'src-queue'")
    if "src_queue" not in settings and "src_exchange" not in settings:
        raise ParameterError("Must specify 'src-exchange' or 'src-queue'")
    if "dest_queue" in settings and "dest_exchange" in settings:
        raise ParameterError("Cannot specify 'dest-exchange' and 'dest-queue'")
    settings["prefetch"] = int(settings.get("prefetch", 1000))
    return ShovelSpec(**settings)
