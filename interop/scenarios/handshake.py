"""Handshake: what a client learns while connecting (capabilities, tune), credentials and vhosts."""

from __future__ import annotations

import time
from typing import Any

from pamqp import commands as C

from interop import pika_tools as pt
from interop.rawamqp import RawConnection, close_of, until_close
from interop.registry import scenario


def _with_vhost(url: str, vhost: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{vhost}"


def _with_password(url: str, password: str, user: str | None = None) -> str:
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    u = user or creds.split(":", 1)[0]
    return f"{scheme}://{u}:{password}@{host}"


@scenario("handshake")
def server_capabilities_pika(url: str) -> Any:
    conn = pt.connect(url)
    try:
        props = conn._impl.server_properties
        return {
            "capabilities": {
                k.decode() if isinstance(k, bytes) else k: v for k, v in sorted(props["capabilities"].items())
            }
        }
    finally:
        conn.close()


@scenario("handshake")
def server_properties_keys_raw(url: str) -> Any:
    """The keys clients display (product, version, platform …); their values differ by design."""
    with RawConnection(url) as c:
        c.handshake(open_=False)
        s = c.start
        return {
            "version": [s.version_major, s.version_minor],
            "keys": sorted(s.server_properties),
            "mechanisms": sorted(s.mechanisms.split()),
            "locales": s.locales,
        }


@scenario("handshake")
def tune_values(url: str) -> Any:
    with RawConnection(url) as c:
        c.handshake(open_=False)
        t = c.tune
        return {"channel_max": t.channel_max, "frame_max": t.frame_max, "heartbeat": t.heartbeat}


@scenario("handshake")
def pika_negotiated_limits(url: str) -> Any:
    conn = pt.connect(url, frame_max=16384, channel_max=100)
    try:
        p = conn._impl.params
        return {"frame_max": p.frame_max, "channel_max": p.channel_max}
    finally:
        conn.close()


@scenario("handshake")
def open_ok_and_channel_open(url: str) -> Any:
    with RawConnection(url) as c:
        r = c.handshake()
        ch = c.open_channel(1)
        c.send(0, C.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        closing = c.recv_method()
        return {
            "open": r.name,
            "channel": ch[1].name if isinstance(ch, tuple) else ch,
            "close": closing[1].name if isinstance(closing, tuple) else closing,
        }


@scenario("handshake")
def bad_protocol_header_http(url: str) -> Any:
    with RawConnection(url) as c:
        c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return {"reply_hex": c.recv_bytes(3).hex()}


@scenario("handshake")
def bad_protocol_header_version(url: str) -> Any:
    with RawConnection(url) as c:
        c.send_raw(b"AMQP\x00\x00\x09\x02")
        return {"reply_hex": c.recv_bytes(3).hex()}


@scenario("handshake")
def bad_protocol_header_tls_hello(url: str) -> Any:
    with RawConnection(url) as c:
        c.send_raw(bytes.fromhex("160301002a010000260303") + b"\0" * 32)
        return {"reply_hex": c.recv_bytes(3).hex()}


@scenario("handshake")
def heartbeat_negotiated_by_pika(url: str) -> Any:
    conn = pt.connect(url, heartbeat=7)
    try:
        return {"heartbeat": conn._impl.params.heartbeat}
    finally:
        conn.close()


@scenario("handshake", timeout=25)
def heartbeat_timeout_closes_silent_client(url: str) -> Any:
    """Heartbeat 1 s then silence: the server gives up after ~2 missed intervals (RabbitMQ: 2–3 s). Not
    before two intervals; the upper bound only says "gave up", generous for a loaded machine (a 6 s bound
    failed once on amqpd with the test machine's two cores saturated)."""
    with RawConnection(url, timeout=10) as c:
        c.handshake(heartbeat=1)
        t0 = time.monotonic()
        # Read without answering heartbeats until the server closes the socket.
        while True:
            r = c.recv(10)
            if isinstance(r, str):
                break
        took = time.monotonic() - t0
        return {"end": r, "closed_after_2s_within_15s": 2.0 <= took <= 15.0}


@scenario("credentials")
def bad_password_pika(url: str) -> Any:
    try:
        pt.connect(_with_password(url, "wrong-password"))
    except Exception as e:  # pika raises ProbableAuthenticationError/AuthenticationError — recorded
        return {"error": type(e).__name__, "text": pt.reply_prefix(str(e).split("'")[1] if "'" in str(e) else "")}
    return {"connected": True}


@scenario("credentials")
def bad_password_raw_with_capability(url: str) -> Any:
    with RawConnection(_with_password(url, "nope"), timeout=8) as c:
        return close_of(c.handshake())


@scenario("credentials")
def unknown_user_raw_with_capability(url: str) -> Any:
    with RawConnection(_with_password(url, "nope", user="nobody-interop"), timeout=8) as c:
        return close_of(c.handshake())


@scenario("credentials")
def bad_password_raw_without_capability(url: str) -> Any:
    """A client that doesn't announce authentication_failure_close just sees the socket close."""
    with RawConnection(_with_password(url, "nope"), timeout=8) as c:
        return close_of(c.handshake(capabilities={}))


@scenario("credentials")
def unsupported_mechanism(url: str) -> Any:
    from pamqp import header as H

    with RawConnection(url, timeout=8) as c:
        c.send_raw(H.ProtocolHeader().marshal())
        c.recv_method()
        c.send(
            0,
            C.Connection.StartOk(
                client_properties={"capabilities": {"authentication_failure_close": True}},
                mechanism="CRAM-MD5",
                response="x",
                locale="en_US",
            ),
        )
        r = c.recv_method()
        return close_of(r)


@scenario("vhosts")
def unknown_vhost_pika(url: str) -> Any:
    try:
        pt.connect(_with_vhost(url, "no-such-vhost-interop"))
    except Exception as e:  # pika wraps the 530 in ProbableAccessDeniedError / ConnectionClosedByBroker
        code = getattr(e, "reply_code", None)
        if code is None and e.args and hasattr(e.args[0], "reply_code"):
            code = e.args[0].reply_code
        return {"error": type(e).__name__, "code": code}
    return {"connected": True}


@scenario("vhosts")
def unknown_vhost_raw(url: str) -> Any:
    with RawConnection(url) as c:
        r = c.handshake(vhost="no-such-vhost-interop")
        out = close_of(r)
        return out


@scenario("vhosts")
def default_vhost_slash(url: str) -> Any:
    with RawConnection(url) as c:
        return close_of(c.handshake(vhost="/"))


@scenario("handshake")
def channel_open_twice_504(url: str) -> Any:
    with RawConnection(url) as c:
        c.handshake()
        c.open_channel(1)
        c.send(1, C.Channel.Open())
        return until_close(c)


@scenario("handshake")
def method_on_unopened_channel_504(url: str) -> Any:
    with RawConnection(url) as c:
        c.handshake()
        c.send(3, C.Queue.Declare(queue="", exclusive=True))
        return until_close(c)


@scenario("handshake")
def many_channels_pika(url: str) -> Any:
    conn = pt.connect(url)
    try:
        chans = [conn.channel() for _ in range(50)]
        nums = [c.channel_number for c in chans]
        return {"opened": len(chans), "numbers": nums == list(range(1, 51))}
    finally:
        conn.close()


@scenario("handshake", timeout=40)
def handshake_not_finished_closed(url: str) -> Any:
    """Protocol header then silence: RabbitMQ closes after its 10 s handshake timeout."""
    with RawConnection(url, timeout=30) as c:
        from pamqp import header as H

        c.send_raw(H.ProtocolHeader().marshal())
        t0 = time.monotonic()
        start = c.recv_method()
        while True:
            r = c.recv(30)
            if isinstance(r, str) or r[1].name == "Connection.Close":
                break
        took = time.monotonic() - t0
        return {
            "start": getattr(start[1], "name", None) if isinstance(start, tuple) else start,
            "end": r if isinstance(r, str) else close_of(r),
            "closed_between_5_and_20s": 5 <= took <= 20,
        }


@scenario("handshake")
def amqp_0_8_header(url: str) -> Any:
    """RabbitMQ still speaks 0-8 to an old header: it answers with a frame, not a header."""
    with RawConnection(url) as c:
        c.send_raw(b"AMQP\x01\x01\x08\x00")
        data = c.recv_bytes(2)
        return {"answer_starts_hex": data[:1].hex(), "is_protocol_header": data.startswith(b"AMQP")}
