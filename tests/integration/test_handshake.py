"""Connection handshake as pika sees it: server properties, tune values, refused logins."""

from __future__ import annotations

import pika
import pytest

EXPECTED_CAPABILITIES = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
]


def test_server_announces_rabbitmq_capabilities(conn: pika.BlockingConnection) -> None:
    props = conn._impl.server_properties
    caps = props["capabilities"]
    for cap in EXPECTED_CAPABILITIES:
        assert caps.get(cap) is True, cap
    for key in ("product", "version", "platform"):
        assert key in props


def test_tune_values_negotiated_by_pika_are_rabbitmq_defaults(conn: pika.BlockingConnection) -> None:
    p = conn._impl.params
    assert (p.channel_max, p.frame_max, p.heartbeat) == (2047, 131072, 60)


def test_client_may_ask_for_smaller_limits(params: pika.URLParameters) -> None:
    params.channel_max = 10
    params.frame_max = 8192
    params.heartbeat = 5
    conn = pika.BlockingConnection(params)
    try:
        p = conn._impl.params
        assert (p.channel_max, p.frame_max, p.heartbeat) == (10, 8192, 5)
        ch = conn.channel()
        ok = ch.queue_declare("", exclusive=True)
        ch.basic_publish("", ok.method.queue, b"x" * 20000)  # split into frames of at most 8192 bytes
        _, _, body = ch.basic_get(ok.method.queue, auto_ack=True)
        assert body == b"x" * 20000
    finally:
        conn.close()


def test_wrong_password_is_refused_with_403(params: pika.URLParameters) -> None:
    params.credentials = pika.PlainCredentials("guest", "not-the-password")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    # pika wraps the broker's connection.close: a silently dropped socket would read "StreamLostError".
    assert "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED" in str(info.value)


def test_unknown_user_is_refused_with_403(params: pika.URLParameters) -> None:
    params.credentials = pika.PlainCredentials("no-such-user", "guest")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED" in str(info.value)


def test_unknown_vhost_is_refused_with_530(params: pika.URLParameters) -> None:
    params.virtual_host = "no-such-vhost"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params)
    assert "ConnectionClosedByBroker: (530) 'NOT_ALLOWED" in str(info.value)


def test_many_channels_open_and_close(conn: pika.BlockingConnection) -> None:
    channels = [conn.channel() for _ in range(50)]
    assert len({c.channel_number for c in channels}) == 50
    for c in channels:
        c.close()
    assert conn.channel().is_open


def test_heartbeat_keeps_idle_connection_open(params: pika.URLParameters) -> None:
    params.heartbeat = 1
    conn = pika.BlockingConnection(params)
    try:
        assert conn._impl.params.heartbeat == 1
        conn.sleep(3.5)  # pika answers heartbeats while sleeping; the broker must not close us
        ch = conn.channel()
        assert ch.is_open
    finally:
        conn.close()
