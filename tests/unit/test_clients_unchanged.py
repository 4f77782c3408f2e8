"""What client libraries' own test suites rely on (issue 10), each as RabbitMQ 3.10 answers it.

Driven through a Session fed raw bytes (no sockets). Deliveries are read as raw frames where pamqp's own
decoder would refuse what RabbitMQ passes through (a timestamp past year 9999).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from fakes import decode_frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands
from test_session import PROTOCOL_HEADER, Client, close_of

from amqpd.errors import AMQPError
from amqpd.protocol.methods import build, encode_method
from amqpd.protocol.properties import check_property_list

RawFrame = tuple[int, int, bytes]


def raw_frames(data: bytes) -> list[RawFrame]:
    out, o = [], 0
    while o < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, o)
        out.append((ftype, channel, data[o + 7 : o + 7 + size]))
        o += size + 8
    return out


def shortstr(raw: bytes) -> bytes:
    return bytes((len(raw),)) + raw


def raw_publish(channel: int, exchange: bytes, routing_key: bytes, body: bytes, props: bytes = b"\0\0") -> bytes:
    """basic.publish + header (properties given encoded: flags word + values) + body, byte for byte."""
    method = struct.pack(">HHH", 60, 40, 0) + shortstr(exchange) + shortstr(routing_key) + b"\0"
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    out = struct.pack(">BHI", 1, channel, len(method)) + method + b"\xce"
    out += struct.pack(">BHI", 2, channel, len(header)) + header + b"\xce"
    if body:
        out += struct.pack(">BHI", 3, channel, len(body)) + body + b"\xce"
    return out


def raw_send(c: Client, data: bytes) -> list[RawFrame]:
    c.session.feed(data)
    return raw_frames(c.session.take_output())


def method_frame(channel: int, method: Any) -> bytes:
    return encode_method(channel, method)


def handshake_with(channel_max: int) -> Client:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    c.method(0, commands.Connection.TuneOk(channel_max, 131072, 0))
    c.method(0, commands.Connection.Open("/"))
    return c


@pytest.fixture
def client() -> Client:
    c = Client()
    c.handshake()
    c.open_channel(1)
    return c


# -- 1. connection.update-secret ------------------------------------------------------------------------


@pytest.mark.parametrize("secret", ["guest", "new secret"])
def test_update_secret_is_answered_ok_and_the_connection_carries_on(client: Client, secret: str) -> None:
    # A password cannot expire: RabbitMQ's internal backend accepts any new secret (amqplib's suite sends
    # 'new secret' on a guest connection and expects update-secret-ok).
    (ok,) = client.method(0, commands.Connection.UpdateSecret(secret, "token refresh"))
    assert isinstance(ok, commands.Connection.UpdateSecretOk)
    client.open_channel(2)


def test_update_secret_for_a_user_that_no_longer_exists_closes_with_530(client: Client) -> None:
    del client.broker.access.users["guest"]  # gone without closing this connection (delete_user would)
    frames = client.method(0, commands.Connection.UpdateSecret("guest", "token refresh"))
    assert close_of(frames) == (530, 10, 70)
    assert frames[0].reply_text == "NOT_ALLOWED - New secret was refused by one of the backends"


# -- 2. unbinding what no longer exists ---------------------------------------------------------------------


def test_queue_unbind_of_a_deleted_queue_and_exchange_is_ok(client: Client) -> None:
    client.method(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    client.method(1, commands.Queue.Declare(queue="q", auto_delete=True))
    client.method(1, commands.Queue.Bind(queue="q", exchange="x", routing_key="k"))
    client.method(1, commands.Queue.Delete(queue="q"))
    (ok,) = client.method(1, commands.Queue.Unbind(queue="q", exchange="x", routing_key="k"))
    assert isinstance(ok, commands.Queue.UnbindOk)
    client.method(1, commands.Exchange.Delete(exchange="x"))
    (ok,) = client.method(1, commands.Queue.Unbind(queue="q", exchange="x", routing_key="k"))
    assert isinstance(ok, commands.Queue.UnbindOk)


def test_queue_unbind_from_a_missing_exchange_is_ok_and_keeps_other_bindings(client: Client) -> None:
    client.method(1, commands.Queue.Declare(queue="q"))
    client.method(1, commands.Queue.Bind(queue="q", exchange="amq.direct", routing_key="k"))
    (ok,) = client.method(1, commands.Queue.Unbind(queue="q", exchange="missing", routing_key="k"))
    assert isinstance(ok, commands.Queue.UnbindOk)
    assert client.broker.vhosts["/"].exchanges["amq.direct"].is_bound(client.broker.vhosts["/"].queues["q"], "k")


def test_exchange_unbind_of_missing_exchanges_is_ok(client: Client) -> None:
    client.method(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    (ok,) = client.method(1, commands.Exchange.Unbind(destination="gone", source="x", routing_key="k"))
    assert isinstance(ok, commands.Exchange.UnbindOk)
    (ok,) = client.method(1, commands.Exchange.Unbind(destination="x", source="gone", routing_key="k"))
    assert isinstance(ok, commands.Exchange.UnbindOk)


def test_unbinding_another_connections_exclusive_queue_is_405_only_when_bound() -> None:
    owner = Client()
    owner.handshake()
    owner.open_channel(1)
    owner.method(1, commands.Queue.Declare(queue="mine", exclusive=True))
    owner.method(1, commands.Queue.Bind(queue="mine", exchange="amq.direct", routing_key="k"))
    other = Client(owner.broker)
    other.handshake()
    other.open_channel(1)
    (ok,) = other.method(1, commands.Queue.Unbind(queue="mine", exchange="amq.direct", routing_key="other"))
    assert isinstance(ok, commands.Queue.UnbindOk)
    assert close_of(other.method(1, commands.Queue.Unbind(queue="mine", exchange="amq.direct", routing_key="k"))) == (
        405,
        50,
        50,
    )


# -- 3. channel ids: channel_max counts open channels --------------------------------------------------------


def test_any_channel_id_opens_while_fewer_than_channel_max_are_open() -> None:
    c = handshake_with(3)
    c.open_channel(65535)
    c.open_channel(4)
    c.method(4, commands.Channel.Close(200, "", 0, 0))
    c.open_channel(1000)
    c.open_channel(7)
    assert close_of(c.method(8, commands.Channel.Open())) == (530, 0, 0)


# -- 5. closes that cross ----------------------------------------------------------------------------------


def test_crossed_closes_leave_the_connection_and_its_other_channels_working(client: Client) -> None:
    client.open_channel(2)
    out = client.send(
        method_frame(1, build(commands.Queue.Declare, 0, "missing", True, False, False, False, False, {}))
    )
    assert close_of([obj for _, obj in out]) == (404, 50, 10)
    # The client closed channel 1 itself before reading our close: the two closes cross.
    (ok,) = client.method(1, commands.Channel.Close(200, "bye", 0, 0))
    assert isinstance(ok, commands.Channel.CloseOk)
    assert client.method(1, commands.Channel.CloseOk()) == []  # its answer to our close, late: ignored
    (declared,) = client.method(2, commands.Queue.Declare(queue="still-here"))
    assert isinstance(declared, commands.Queue.DeclareOk)
    client.open_channel(1)


def test_after_crossed_closes_the_channel_can_be_reopened_before_the_late_close_ok(client: Client) -> None:
    client.method(1, commands.Queue.Declare(queue="missing", passive=True))
    client.method(1, commands.Channel.Close(200, "bye", 0, 0))
    client.open_channel(1)
    (ok,) = client.method(1, commands.Queue.Declare(queue="q"))
    assert isinstance(ok, commands.Queue.DeclareOk)


# -- 4. properties pass through untouched --------------------------------------------------------------------

FLAGS = {
    "content_type": 1 << 15,
    "content_encoding": 1 << 14,
    "headers": 1 << 13,
    "delivery_mode": 1 << 12,
    "priority": 1 << 11,
    "correlation_id": 1 << 10,
    "reply_to": 1 << 9,
    "expiration": 1 << 8,
    "message_id": 1 << 7,
    "timestamp": 1 << 6,
    "type": 1 << 5,
    "user_id": 1 << 4,
    "app_id": 1 << 3,
    "cluster_id": 1 << 2,
}

short_bytes = st.binary(max_size=40)
table_key = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
table_value = st.one_of(
    st.binary(max_size=30).map(lambda b: b"S" + struct.pack(">I", len(b)) + b),
    st.integers(-(2**31), 2**31 - 1).map(lambda i: b"I" + struct.pack(">i", i)),
    st.integers(0, 2**64 - 1).map(lambda i: b"T" + struct.pack(">Q", i)),
    st.booleans().map(lambda b: b"t" + bytes((b,))),
    st.floats(allow_nan=False).map(lambda f: b"d" + struct.pack(">d", f)),
)


def _table(entries: dict[str, bytes]) -> bytes:
    inner = b"".join(shortstr(k.encode()) + v for k, v in entries.items())
    return struct.pack(">I", len(inner)) + inner


raw_table = st.dictionaries(table_key, table_value, max_size=5).map(_table)
property_values: dict[str, st.SearchStrategy[bytes]] = {
    "content_type": short_bytes.map(shortstr),
    "content_encoding": short_bytes.map(shortstr),
    "headers": raw_table,
    "delivery_mode": st.sampled_from([b"\x01", b"\x02"]),
    "priority": st.integers(0, 255).map(lambda i: bytes((i,))),
    "correlation_id": short_bytes.map(shortstr),
    "reply_to": short_bytes.filter(lambda b: not b.startswith(b"amq.rabbitmq.reply-to")).map(shortstr),
    "expiration": st.integers(60_000, 2**32 - 1).map(lambda i: shortstr(str(i).encode())),
    "message_id": short_bytes.map(shortstr),
    "timestamp": st.integers(0, 2**64 - 1).map(lambda i: struct.pack(">Q", i)),
    "type": short_bytes.map(shortstr),
    "user_id": st.just(shortstr(b"guest")),
    "app_id": short_bytes.map(shortstr),
    "cluster_id": short_bytes.map(shortstr),
}


@st.composite
def encoded_properties(draw: st.DrawFn) -> bytes:
    chosen = draw(st.lists(st.sampled_from(list(FLAGS)), unique=True))
    flags = sum(FLAGS[name] for name in chosen)
    values = b"".join(draw(property_values[name]) for name in FLAGS if name in chosen)
    return struct.pack(">H", flags) + values


def consuming_client() -> Client:
    c = Client()
    c.handshake()
    c.open_channel(1)
    c.method(1, commands.Queue.Declare(queue="q"))
    c.method(1, commands.Basic.Consume(queue="q", consumer_tag="ctag", no_ack=True))
    return c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=encoded_properties(), body=st.binary(max_size=64), path=st.sampled_from(["whole", "split", "run"]))
def test_any_property_values_reach_the_consumer_byte_identical(props: bytes, body: bytes, path: str) -> None:
    c = consuming_client()
    data = raw_publish(1, b"", b"q", body, props)
    copies = 3 if path == "run" else 1  # identical publishes in one read: the run path (FrameReader's PUBLISH_RUN)
    if path == "split":  # frame by frame (the assembler) rather than the whole-publish path
        out = []
        for i in range(len(data)):
            out += raw_send(c, data[i : i + 1])
    else:
        out = raw_send(c, data * copies)
    headers = [p for t, _, p in out if t == 2]
    assert headers == [struct.pack(">HHQ", 60, 0, len(body)) + props] * copies, out
    assert b"".join(p for t, _, p in out if t == 3) == body * copies


def test_a_timestamp_past_year_9999_with_user_id_is_delivered(client: Client) -> None:
    # amqp091-go's property test: the user_id check must not decode the timestamp (pamqp makes a datetime).
    c = consuming_client()
    props = struct.pack(">H", FLAGS["timestamp"] | FLAGS["user_id"]) + b"\xff" * 8 + shortstr(b"guest")
    out = raw_send(c, raw_publish(1, b"", b"q", b"t", props))
    assert out[1][2].endswith(props)


def test_a_forged_user_id_is_still_refused_with_406(client: Client) -> None:
    props = struct.pack(">H", FLAGS["timestamp"] | FLAGS["user_id"]) + b"\xff" * 8 + shortstr(b"admin")
    out = raw_send(client, raw_publish(1, b"", b"q", b"t", props))
    (close,) = [
        obj for _, obj in decode_frames(b"".join(struct.pack(">BHI", t, ch, len(p)) + p + b"\xce" for t, ch, p in out))
    ]
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 40)
    assert close.reply_text == (
        "PRECONDITION_FAILED - user_id property set to 'admin' but authenticated user was 'guest'"
    )


# -- 8. smaller differences found with raw frames ------------------------------------------------------------


def test_access_request_is_answered_with_ticket_1(client: Client) -> None:
    payload = struct.pack(">HH", 30, 10) + shortstr(b"/data") + b"\x1e"
    out = raw_send(client, struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    assert out == [(1, 1, b"\x00\x1e\x00\x0b\x00\x01")]


def test_a_routing_key_with_invalid_utf8_is_routed_and_delivered_as_sent(client: Client) -> None:
    client.method(1, commands.Queue.Declare(queue="all"))
    client.method(1, commands.Queue.Bind(queue="all", exchange="amq.topic", routing_key="#"))
    client.method(1, commands.Basic.Consume(queue="all", consumer_tag="c", no_ack=True))
    out = raw_send(client, raw_publish(1, b"amq.topic", b"\xff\xfe.key", b"body"))
    assert out[0][2].endswith(shortstr(b"amq.topic") + shortstr(b"\xff\xfe.key"))
    assert out[2][2] == b"body"


def test_a_heartbeat_frame_with_a_payload_closes_the_connection_with_501(client: Client) -> None:
    frames = client.send(struct.pack(">BHI", 8, 0, 3) + b"abc" + b"\xce")
    assert close_of([obj for _, obj in frames]) == (501, 0, 0)


@pytest.mark.parametrize(
    "props",
    [
        pytest.param(b"\x80\x00\x05ab", id="truncated-shortstr"),
        pytest.param(b"\x00\x40\x00\x00", id="truncated-timestamp"),
        pytest.param(b"\x00\x00zz", id="bytes-after-the-last-property"),
        pytest.param(b"\x00\x01\x00\x00", id="continuation-flag"),
        pytest.param(b"\x20\x00\x00\x00\x00\x03\x01aX", id="bad-table-type"),
    ],
)
@pytest.mark.parametrize("split", [False, True])
def test_a_malformed_property_list_closes_the_connection_with_541(client: Client, props: bytes, split: bool) -> None:
    client.method(1, commands.Queue.Declare(queue="q"))
    data = raw_publish(1, b"", b"q", b"x", props)
    frames = []
    for part in [data[:20], data[20:]] if split else [data]:
        frames += [obj for _, obj in client.send(part)]
    assert close_of(frames) == (541, 0, 0)
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


@pytest.mark.parametrize("mode", [0, 3, 255])
def test_a_delivery_mode_other_than_1_or_2_closes_the_channel_with_406(client: Client, mode: int) -> None:
    client.method(1, commands.Queue.Declare(queue="q"))
    frames = [obj for _, obj in client.send(raw_publish(1, b"", b"q", b"x", b"\x10\x00" + bytes((mode,))))]
    assert close_of(frames) == (406, 60, 40)
    assert frames[0].reply_text == f"PRECONDITION_FAILED - invalid message: {{delivery_mode_unknown,{mode}}}"
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


def test_repeated_publishes_with_a_bad_delivery_mode_are_refused_too(client: Client) -> None:
    client.method(1, commands.Queue.Declare(queue="q"))
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    one = raw_publish(1, b"", b"q", b"x", b"\x10\x00\x07")
    frames = [obj for _, obj in client.send(one * 5)]
    assert close_of(frames[:1]) == (406, 60, 40)
    assert not any(isinstance(f, commands.Basic.Deliver) for f in frames)


def test_passive_and_active_declare_of_the_reply_to_pseudo_queue_report_one_consumer(client: Client) -> None:
    for passive in (True, False):
        (ok,) = client.method(
            1, build(commands.Queue.Declare, 0, "amq.rabbitmq.reply-to", passive, False, False, False, False, {})
        )
        assert (ok.queue, ok.message_count, ok.consumer_count) == ("amq.rabbitmq.reply-to", 0, 1)


def test_declare_of_a_live_reply_to_address_reports_one_consumer_and_a_bogus_one_404(client: Client) -> None:
    client.method(1, commands.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=True))
    token = next(iter(client.broker.vhosts["/"].replies))
    name = "amq.rabbitmq.reply-to." + token
    (ok,) = client.method(1, build(commands.Queue.Declare, 0, name, True, False, False, False, False, {}))
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 1)
    frames = client.method(1, build(commands.Queue.Declare, 0, name + "x", True, False, False, False, False, {}))
    assert close_of(frames) == (404, 50, 10)


def _deliveries(out: list[RawFrame]) -> list[tuple[bytes, bytes]]:
    """(method payload, header payload) of each basic.deliver / get-ok in out."""
    found = []
    for i, (ftype, _ch, payload) in enumerate(out):
        if ftype == 1 and payload[:4] in (b"\x00\x3c\x00\x3c", b"\x00\x3c\x00\x47"):
            found.append((payload, out[i + 1][2]))
    return found


def test_a_quorum_queue_delivery_carries_x_delivery_count_and_rabbitmqs_sorted_headers(client: Client) -> None:
    for q in ("qq1", "qq2"):
        client.method(1, commands.Queue.Declare(queue=q, durable=True, arguments={"x-queue-type": "quorum"}))
    table = shortstr(b"b") + b"I\x00\x00\x00\x01" + shortstr(b"a") + b"I\x00\x00\x00\x02"
    props = struct.pack(">HI", FLAGS["headers"] | FLAGS["timestamp"], len(table)) + table + struct.pack(">Q", 12345)
    raw_send(client, raw_publish(1, b"", b"qq1", b"hello", props))
    raw_send(client, raw_publish(1, b"", b"qq2", b"plain", b"\x80\x00" + shortstr(b"text")))
    # Bytes RabbitMQ 3.10.8 sent for the same publishes: sorted table, 'l' count, other values untouched.
    expected_hello = (
        "003c00000000000000000005204000000028016149000000020162490000000110782d64656c69766572792d636f756e74"
        "6c{count:016x}0000000000003039"
    )
    expected_plain = "003c00000000000000000005a00004746578740000001a10782d64656c69766572792d636f756e746c{count:016x}"
    for count in range(3):
        for q, expected in (("qq1", expected_hello), ("qq2", expected_plain)):
            ((method, header),) = _deliveries(raw_send(client, method_frame(1, commands.Basic.Get(queue=q))))
            assert header.hex() == expected.format(count=count)
            assert method[12] == (1 if count else 0)  # redelivered
            tag = struct.unpack_from(">Q", method, 4)[0]
            raw_send(client, method_frame(1, commands.Basic.Nack(tag, False, True)))


def test_a_quorum_queue_consumer_gets_x_delivery_count_once_the_message_came_back(client: Client) -> None:
    # RabbitMQ 3.10: a consumer's first delivery has no count (basic.get shows 0); after a return, 1.
    client.method(1, commands.Queue.Declare(queue="qq", durable=True, arguments={"x-queue-type": "quorum"}))
    client.method(1, commands.Basic.Consume(queue="qq", consumer_tag="c"))
    first = _deliveries(raw_send(client, raw_publish(1, b"", b"qq", b"x")))
    assert first[0][1] == struct.pack(">HHQ", 60, 0, 1) + b"\0\0"
    tag = struct.unpack_from(">Q", first[0][0], 4 + 2)[0]
    again = _deliveries(raw_send(client, method_frame(1, commands.Basic.Nack(tag, False, True))))
    assert again[0][1].endswith(b"x-delivery-count" + b"l" + struct.pack(">q", 1))


def test_a_classic_queue_delivery_has_no_x_delivery_count(client: Client) -> None:
    client.method(1, commands.Queue.Declare(queue="classic"))
    client.method(1, commands.Basic.Consume(queue="classic", consumer_tag="c", no_ack=True))
    out = _deliveries(raw_send(client, raw_publish(1, b"", b"classic", b"x")))
    assert out[0][1] == struct.pack(">HHQ", 60, 0, 1) + b"\0\0"


def test_per_consumer_and_per_channel_prefetch_apply_together(client: Client) -> None:
    client.method(1, commands.Basic.Qos(prefetch_count=2, global_=False))
    client.method(1, commands.Basic.Qos(prefetch_count=4, global_=True))
    for q in ("a", "b", "c"):
        client.method(1, commands.Queue.Declare(queue=q))
        raw_send(client, b"".join(raw_publish(1, b"", q.encode(), b"m") for _ in range(5)))
    per_consumer = []
    for q in ("a", "b", "c"):
        per_consumer.append(
            len(_deliveries(raw_send(client, method_frame(1, commands.Basic.Consume(queue=q, consumer_tag=q)))))
        )
    assert per_consumer == [2, 2, 0]


@settings(max_examples=300, deadline=None)
@given(props=encoded_properties(), cut=st.integers(1, 40), extra=st.binary(min_size=1, max_size=4))
def test_the_property_list_check_takes_every_well_formed_list_and_no_cut_or_padded_one(
    props: bytes, cut: int, extra: bytes
) -> None:
    header = struct.pack(">HHQ", 60, 0, 1) + props
    check_property_list(header)
    for bad in (header[: max(14, len(header) - cut)], header + extra):
        if bad == header:
            continue
        with pytest.raises(AMQPError) as refused:
            check_property_list(bad)
        assert (refused.value.code, refused.value.class_id, refused.value.method_id) == (541, 0, 0)


def test_a_publish_to_an_exchange_named_in_invalid_utf8_is_404_not_an_internal_error(client: Client) -> None:
    frames = [obj for _, obj in client.send(raw_publish(1, b"\xff\xfe", b"k", b"x"))]
    assert close_of(frames) == (404, 60, 40)
    assert frames[0].reply_text == "NOT_FOUND - no exchange '\ufffd\ufffd' in vhost '/'"


def test_a_close_reason_longer_than_255_bytes_is_cut_on_a_character_boundary(client: Client) -> None:
    name = "é" * 127  # 254 bytes: the reply text around it is longer than a short string holds
    declare = build(commands.Queue.Declare, 0, name, True, False, False, False, False, {})
    frames = [obj for _, obj in client.send(method_frame(1, declare))]
    assert close_of(frames) == (404, 50, 10)
    assert len(frames[0].reply_text.encode()) <= 255
