"""pika helpers for scenarios: bounded-time connections, close reasons with class/method ids, and
message observations."""

from __future__ import annotations

import datetime
import decimal
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.channel
import pika.connection
from pika import exceptions as pex

TIMEOUT = 5.0


def _install_close_id_capture() -> None:
    """pika drops class_id/method_id of channel.close and connection.close; keep them on the exception
    (an observation-only wrapper: the protocol behaviour of pika is unchanged)."""
    if getattr(pika.channel.Channel, "_interop_patched", False):
        return
    orig_ch = pika.channel.Channel._on_close_from_broker
    orig_conn = pika.connection.Connection._on_connection_close_from_broker

    def ch_close(self: Any, method_frame: Any) -> None:
        orig_ch(self, method_frame)
        reason = self._closing_reason
        reason.class_id = method_frame.method.class_id
        reason.method_id = method_frame.method.method_id

    def conn_close(self: Any, method_frame: Any) -> None:
        m = method_frame.method
        self._interop_close_ids = (m.class_id, m.method_id)
        orig_conn(self, method_frame)

    orig_terminate = pika.connection.Connection._terminate_stream

    def terminate(self: Any, error: Any) -> None:
        ids = getattr(self, "_interop_close_ids", None)
        if ids and isinstance(error, pex.ConnectionClosedByBroker):
            error.class_id, error.method_id = ids
        orig_terminate(self, error)

    pika.channel.Channel._on_close_from_broker = ch_close
    pika.connection.Connection._on_connection_close_from_broker = conn_close
    pika.connection.Connection._terminate_stream = terminate
    pika.channel.Channel._interop_patched = True


_install_close_id_capture()


def params(url: str, **kw: Any) -> pika.URLParameters:
    p = pika.URLParameters(url)
    p.socket_timeout = kw.pop("socket_timeout", TIMEOUT)
    p.stack_timeout = kw.pop("stack_timeout", 2 * TIMEOUT)
    p.blocked_connection_timeout = kw.pop("blocked_connection_timeout", TIMEOUT)
    p.connection_attempts = 1
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def connect(url: str, **kw: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(params(url, **kw))


def reply_prefix(text: str) -> str:
    """`NOT_FOUND - no queue 'x' in vhost '/'` → `NOT_FOUND`: the code name is what clients rely on."""
    return text.split(" - ", 1)[0].strip()


def close_obs(exc: BaseException) -> dict[str, Any]:
    """A close as observed by the client: who closed, code, text prefix, class and method ids."""
    if isinstance(exc, pex.ChannelClosedByBroker):
        kind = "channel"
    elif isinstance(exc, pex.ConnectionClosedByBroker):
        kind = "connection"
    elif isinstance(exc, pex.ProbableAuthenticationError | pex.ProbableAccessDeniedError):
        return {"closed": "connection", "error": type(exc).__name__}
    elif isinstance(exc, pex.AMQPConnectionError | pex.StreamLostError | pex.ConnectionWrongStateError):
        return {"closed": "connection", "error": type(exc).__name__}
    elif isinstance(exc, pex.ChannelWrongStateError | pex.ChannelClosed):
        return {"closed": "channel", "error": type(exc).__name__}
    else:
        return {"error": type(exc).__name__, "text": str(exc)[:200]}
    return {
        "closed": kind,
        "code": exc.reply_code,
        "text": reply_prefix(exc.reply_text),
        "class_id": getattr(exc, "class_id", None),
        "method_id": getattr(exc, "method_id", None),
    }


def expect_close(op: Callable[[], Any]) -> dict[str, Any]:
    """Run `op`; return the close it provokes, or {"ok": result-summary} when none."""
    try:
        r = op()
    except (pex.AMQPError, pex.ChannelWrongStateError) as e:
        return close_obs(e)
    return {"ok": summarize(r)}


def summarize(r: Any) -> Any:
    """A pika return value (method frame, list, None) as JSON."""
    if r is None or isinstance(r, str | int | float | bool):
        return r
    if isinstance(r, list | tuple):
        return [summarize(x) for x in r]
    method = getattr(r, "method", None)
    if method is not None:
        return {"method": method.NAME, **{k: jsonable(v) for k, v in vars(method).items()}}
    return repr(type(r).__name__)


def jsonable(v: Any) -> Any:
    """Field values as JSON, keeping the type where JSON would lose it."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, decimal.Decimal):
        return {"decimal": str(v)}
    if isinstance(v, datetime.datetime):
        return {"timestamp": v.isoformat()}
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in sorted(v.items())}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    return {type(v).__name__: repr(v)}


PROPS = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)


def props_obs(p: pika.BasicProperties | None) -> dict[str, Any]:
    if p is None:
        return {}
    return {k: jsonable(getattr(p, k)) for k in PROPS if getattr(p, k) is not None}


def body_obs(body: bytes) -> Any:
    if len(body) <= 64:
        try:
            return body.decode()
        except UnicodeDecodeError:
            return {"bytes": body.hex()}
    import hashlib

    return {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()[:16]}


def msg_obs(method: Any, props: Any, body: bytes, *, with_props: bool = False) -> dict[str, Any]:
    o: dict[str, Any] = {
        "body": body_obs(body),
        "redelivered": method.redelivered,
        "exchange": method.exchange,
        "routing_key": method.routing_key,
    }
    if hasattr(method, "delivery_tag"):
        o["delivery_tag"] = method.delivery_tag
    if with_props:
        o["props"] = props_obs(props)
    return o


def get_all(ch: Any, queue: str, limit: int = 1000, ack: bool = True, **kw: Any) -> list[dict[str, Any]]:
    """basic.get until get-empty: the queue's content in order."""
    out = []
    for _ in range(limit):
        m, p, b = ch.basic_get(queue, auto_ack=ack)
        if m is None:
            break
        o = msg_obs(m, p, b, **kw)
        o["message_count"] = m.message_count
        out.append(o)
    return out


def bodies(ch: Any, queue: str, **kw: Any) -> list[Any]:
    return [m["body"] for m in get_all(ch, queue, **kw)]


def consume_n(
    ch: Any, queue: str, n: int, timeout: float = 3.0, auto_ack: bool = False, quiet: float = 0.0, **consume_kw: Any
) -> list[tuple[Any, Any, bytes]]:
    """Consume until n deliveries arrived (then wait `quiet` s for extra ones), bounded by `timeout`."""
    got: list[tuple[Any, Any, bytes]] = []
    tag = ch.basic_consume(queue, lambda c, m, p, b: got.append((m, p, b)), auto_ack=auto_ack, **consume_kw)
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)
    if quiet:
        end = time.monotonic() + quiet
        while time.monotonic() < end:
            ch.connection.process_data_events(time_limit=0.05)
    ch.basic_cancel(tag)
    return got


def pump(conn: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        conn.process_data_events(time_limit=0.05)


def close_quietly(conn: Any) -> None:
    try:
        if conn.is_open:
            conn.close()
    except (pex.AMQPError, OSError):  # already dead: closing is best effort by design
        pass


def settle(conn: Any, measure: Callable[[], Any], quiet: float = 0.3, limit: float = 3.0) -> None:
    """Pump until `measure()` stopped changing for `quiet` seconds (bounded by `limit`): how scenarios
    count deliveries that should *not* come (prefetch) without being fooled by a slow broker."""
    end = time.monotonic() + limit
    last = measure()
    stable_since = time.monotonic()
    while time.monotonic() < end:
        conn.process_data_events(time_limit=0.05)
        now = measure()
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= quiet:
            return
