"""One connection's protocol, fed raw bytes as a client would send them, answered with the frames a client reads.

No sockets: a fake transport records close() and flush requests; what the session wants written comes
from take_output() and is decoded with pamqp.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes import FakeTransport, decode_frames, messages, new_broker, publish_frames
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, encode, frame, header

from amqpd.broker.broker import Broker
from amqpd.protocol.frames import frame as raw_frame
from amqpd.session.connection import Session

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class Client:
    def __init__(self, broker: Broker | None = None) -> None:
        self.broker = broker or new_broker()
        self.transport = FakeTransport()
        self.session = Session(self.broker, self.transport, "test-peer")

    def send(self, data: bytes) -> list[tuple[int, Any]]:
        self.session.feed(data)
        return decode_frames(self.session.take_output())

    def method(self, channel: int, method: Any) -> list[Any]:
        return [obj for _, obj in self.send(frame.marshal(method, channel))]

    def start_ok(
        self,
        user: str = "guest",
        password: str = "guest",
        *,
        mechanism: str = "PLAIN",
        capabilities: dict | None = None,
    ) -> list[Any]:
        if mechanism == "AMQPLAIN":
            response = encode.field_table({"LOGIN": user, "PASSWORD": password})[4:].decode("latin-1")
        else:
            response = f"\0{user}\0{password}"
        props = {"product": "test", "capabilities": capabilities or {}}
        return self.method(0, commands.Connection.StartOk(props, mechanism, response, "en_US"))

    def handshake(self, vhost: str = "/", capabilities: dict | None = None) -> None:
        self.send(PROTOCOL_HEADER)
        (tune,) = self.start_ok(capabilities=capabilities)
        assert isinstance(tune, commands.Connection.Tune)
        assert self.method(0, commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0)) == []
        (ok,) = self.method(0, commands.Connection.Open(vhost))
        assert isinstance(ok, commands.Connection.OpenOk)

    def open_channel(self, channel: int) -> None:
        (ok,) = self.method(channel, commands.Channel.Open())
        assert isinstance(ok, commands.Channel.OpenOk)


def close_of(frames: list[Any]) -> tuple[int, int, int]:
    (close,) = frames
    assert isinstance(close, (commands.Connection.Close, commands.Channel.Close)), frames
    return close.reply_code, close.class_id, close.method_id


@pytest.fixture
def client() -> Client:
    c = Client()
    c.handshake()
    return c


# -- protocol header ------------------------------------------------------------------------------------


def test_protocol_header_is_answered_with_connection_start_and_capabilities() -> None:
    c = Client()
    ((channel, start),) = c.send(PROTOCOL_HEADER)
    assert channel == 0 and isinstance(start, commands.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert set(start.mechanisms.split()) == {"PLAIN", "AMQPLAIN"}
    caps = start.server_properties["capabilities"]
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ):
        assert caps[cap] is True


def test_protocol_header_split_across_reads_is_accepted() -> None:
    c = Client()
    assert c.send(PROTOCOL_HEADER[:3]) == []
    assert c.send(PROTOCOL_HEADER[3:6]) == []
    ((_, start),) = c.send(PROTOCOL_HEADER[6:])
    assert isinstance(start, commands.Connection.Start)


@pytest.mark.parametrize(
    "data",
    [
        b"AMQP\x00\x00\x09\x02",
        b"AMQP\x00\x01\x00\x00",
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01",
        b"HELLO",
    ],
)
def test_any_other_protocol_header_gets_ours_back_and_the_connection_closed(data: bytes) -> None:
    c = Client()
    c.session.feed(data)
    assert c.session.take_output() == PROTOCOL_HEADER
    assert c.transport.closed


def test_old_amqp_0_8_header_is_accepted_as_rabbitmq_does() -> None:
    c = Client()
    ((_, start),) = c.send(b"AMQP\x01\x01\x08\x00")
    assert isinstance(start, commands.Connection.Start)


# -- login and tuning -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_valid_login_is_answered_with_rabbitmqs_tune(mechanism: str) -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    (tune,) = c.start_ok(mechanism=mechanism)
    assert isinstance(tune, commands.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


@pytest.mark.parametrize(("user", "password"), [("guest", "wrong"), ("nobody", "guest")])
def test_refused_login_with_authentication_failure_close_is_403(user: str, password: str) -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    frames = c.start_ok(user, password, capabilities={"authentication_failure_close": True})
    assert close_of(frames) == (403, 0, 0)
    assert frames[0].reply_text.startswith("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")


def test_refused_login_text_does_not_tell_unknown_user_from_wrong_password() -> None:
    texts = []
    for user, password in (("guest", "wrong"), ("nobody", "x")):
        c = Client()
        c.send(PROTOCOL_HEADER)
        (close,) = c.start_ok(user, password, capabilities={"authentication_failure_close": True})
        texts.append(close.reply_text)
    assert texts[0] == texts[1]


def test_refused_login_without_authentication_failure_close_just_closes() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    assert c.start_ok("guest", "wrong") == []
    assert c.transport.closed


def test_tune_ok_with_frame_max_above_ours_is_530() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    assert close_of(c.method(0, commands.Connection.TuneOk(2047, 131073, 0))) == (530, 10, 31)


def test_tune_ok_with_frame_max_below_the_minimum_is_530() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    assert close_of(c.method(0, commands.Connection.TuneOk(2047, 4095, 0)))[0] == 530


def test_smaller_frame_max_from_tune_ok_is_used_for_deliveries() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    c.method(0, commands.Connection.TuneOk(2047, 4096, 0))
    c.method(0, commands.Connection.Open("/"))
    c.open_channel(1)
    c.method(1, commands.Queue.Declare(queue="q"))
    c.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    payload = bytes(10_000)
    frames = c.send(publish_frames(1, "", "q", payload, frame_max=4096))
    bodies = [obj for _, obj in frames if isinstance(obj, body.ContentBody)]
    assert [len(b.value) for b in bodies] == [4088, 4088, 1824]


def test_opening_an_unknown_vhost_is_530() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    c.method(0, commands.Connection.TuneOk(2047, 131072, 0))
    assert close_of(c.method(0, commands.Connection.Open("/nowhere")))[0] == 530


# rabbit_reader's handle_exception before the connection runs: while starting only a refused login (with
# authentication_failure_close) and while tuning only a 530 negotiation failure get a connection.close; any other
# error closes the socket silently. While opening every error gets its connection.close.


def tuned_client() -> Client:
    """A client that has sent start-ok and tune-ok: the connection is opening."""
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    c.method(0, commands.Connection.TuneOk(2047, 131072, 0))
    return c


def test_connection_method_out_of_order_while_tuning_closes_silently() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    assert c.method(0, commands.Connection.Open("/")) == []  # tune-ok expected
    assert c.transport.closed


def test_connection_method_out_of_order_while_opening_is_504() -> None:
    c = tuned_client()
    frames = c.method(0, commands.Connection.TuneOk(2047, 131072, 0))
    assert close_of(frames)[0] == 504
    assert frames[0].reply_text == "CHANNEL_ERROR - unexpected method in connection state opening"


def test_channel_frame_while_opening_is_505() -> None:
    c = tuned_client()
    assert close_of(c.method(1, commands.Channel.Open()))[0] == 505


def test_tune_ok_with_frame_max_zero_is_530() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    assert close_of(c.method(0, commands.Connection.TuneOk(2047, 0, 0))) == (530, 10, 31)


def test_tune_ok_with_channel_max_zero_is_530() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    assert close_of(c.method(0, commands.Connection.TuneOk(0, 131072, 0))) == (530, 10, 31)


def test_second_connection_open_is_504(client: Client) -> None:
    assert close_of(client.method(0, commands.Connection.Open("/")))[0] == 504


# -- channels -------------------------------------------------------------------------------------------


def test_opening_a_channel_twice_closes_the_connection_with_504(client: Client) -> None:
    client.open_channel(1)
    assert close_of(client.method(1, commands.Channel.Open())) == (504, 20, 10)


def test_method_on_a_channel_that_is_not_open_is_504(client: Client) -> None:
    assert close_of(client.method(3, commands.Queue.Declare(queue="q")))[0] == 504


def test_unknown_method_is_540_naming_its_class_and_method(client: Client) -> None:
    client.open_channel(1)
    frames = [obj for _, obj in client.send(raw_frame(1, 1, b"\x00\x3c\x00\x63"))]
    assert close_of(frames) == (540, 60, 99)


def test_content_body_without_a_header_is_505(client: Client) -> None:
    client.open_channel(1)
    frames = [obj for _, obj in client.send(frame.marshal(body.ContentBody(b"stray"), 1))]
    assert close_of(frames)[0] == 505


def test_content_frame_on_channel_0_is_505(client: Client) -> None:
    frames = [obj for _, obj in client.send(frame.marshal(body.ContentBody(b"stray"), 0))]
    assert close_of(frames)[0] == 505


def test_content_header_without_a_publish_is_505(client: Client) -> None:
    client.open_channel(1)
    data = frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1)
    assert close_of([obj for _, obj in client.send(data)])[0] == 505


def test_method_while_a_body_is_incomplete_is_505(client: Client) -> None:
    client.open_channel(1)
    client.method(1, commands.Queue.Declare(queue="q"))
    partial = (
        frame.marshal(commands.Basic.Publish(0, "", "q"), 1)
        + frame.marshal(header.ContentHeader(0, 10, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"12345"), 1)
    )
    assert client.send(partial) == []
    assert close_of(client.method(1, commands.Basic.Qos(prefetch_count=1)))[0] == 505


PUBLISH_Q = frame.marshal(commands.Basic.Publish(0, "", "q"), 1)
HEADER_10 = frame.marshal(header.ContentHeader(0, 10, commands.Basic.Properties()), 1)


# rabbit_command_assembler names the method being assembled (basic.publish) in these errors.
@pytest.mark.parametrize(
    ("sent", "text"),
    [
        (PUBLISH_Q, "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead"),
        (PUBLISH_Q + HEADER_10, "UNEXPECTED_FRAME - expected content body, got non content body frame instead"),
        (
            PUBLISH_Q + raw_frame(2, 1, b"\x00\x32\x00\x00" + bytes(8) + b"\x00\x00"),
            "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead",
        ),
    ],
    ids=["header-expected", "body-expected", "header-of-another-class"],
)
def test_content_assembly_errors_name_basic_publish(client: Client, sent: bytes, text: str) -> None:
    client.open_channel(1)
    frames = [obj for _, obj in client.send(sent)]
    if not frames:
        frames = client.method(1, commands.Basic.Qos(prefetch_count=1))
    assert close_of(frames) == (505, 60, 40)
    assert frames[0].reply_text == text


def test_content_frame_on_a_channel_never_opened_is_505(client: Client) -> None:
    frames = [obj for _, obj in client.send(HEADER_10.replace(b"\x02\x00\x01", b"\x02\x00\x05", 1))]
    assert close_of(frames) == (505, 0, 0)


def test_channel_error_closes_only_that_channel(client: Client) -> None:
    client.open_channel(1)
    client.open_channel(2)
    frames = client.method(1, commands.Queue.Declare(queue="missing", passive=True))
    assert close_of(frames) == (404, 50, 10)
    assert frames[0].reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
    (ok,) = client.method(2, commands.Queue.Declare(queue="fine"))
    assert isinstance(ok, commands.Queue.DeclareOk)


def test_frames_after_our_channel_close_are_dropped_until_close_ok(client: Client) -> None:
    client.open_channel(1)
    client.method(1, commands.Queue.Declare(queue="missing", passive=True))
    assert client.method(1, commands.Queue.Declare(queue="q")) == []
    assert client.send(publish_frames(1, "", "q", b"late")) == []
    assert "q" not in client.broker.vhosts["/"].queues
    assert client.method(1, commands.Channel.CloseOk()) == []
    client.open_channel(1)  # the id is free again


def test_opening_more_channels_than_channel_max_is_530() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    c.method(0, commands.Connection.TuneOk(3, 131072, 0))
    c.method(0, commands.Connection.Open("/"))
    for channel in (1, 2, 3):
        c.open_channel(channel)
    assert close_of(c.method(4, commands.Channel.Open()))[0] == 530


def test_channel_max_refusal_names_no_method() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.start_ok()
    c.method(0, commands.Connection.TuneOk(1, 131072, 0))
    c.method(0, commands.Connection.Open("/"))
    c.open_channel(1)
    assert close_of(c.method(2, commands.Channel.Open())) == (530, 0, 0)


def test_client_channel_close_is_answered_and_frees_the_id(client: Client) -> None:
    client.open_channel(1)
    (ok,) = client.method(1, commands.Channel.Close(200, "bye", 0, 0))
    assert isinstance(ok, commands.Channel.CloseOk)
    client.open_channel(1)


# -- messages through the whole connection ----------------------------------------------------------------


def test_publish_reaches_a_consumer_whether_bytes_arrive_together_or_split(client: Client) -> None:
    client.open_channel(1)
    client.method(1, commands.Queue.Declare(queue="q"))
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    together = client.send(publish_frames(1, "", "q", b"one") + publish_frames(1, "", "q", b"two"))
    data = publish_frames(1, "", "q", b"three")
    split: list[tuple[int, Any]] = []
    for i in range(len(data)):
        split += client.send(data[i : i + 1])
    got = messages([obj for _, obj in together + split])
    assert [(d.delivery_tag, b) for d, b in got] == [(1, b"one"), (2, b"two"), (3, b"three")]


def test_content_of_different_channels_may_interleave(client: Client) -> None:
    client.open_channel(1)
    client.open_channel(2)
    client.method(1, commands.Queue.Declare(queue="q"))
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    one = publish_frames(1, "", "q", b"from-1")
    two = publish_frames(2, "", "q", b"from-2")
    body_one = frame.marshal(body.ContentBody(b"from-1"), 1)
    frames = client.send(one[: -len(body_one)] + two + body_one)
    assert [b for _, b in messages([obj for _, obj in frames])] == [b"from-2", b"from-1"]


def test_empty_body_is_delivered_without_a_body_frame(client: Client) -> None:
    client.open_channel(1)
    client.method(1, commands.Queue.Declare(queue="q"))
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    frames = [obj for _, obj in client.send(publish_frames(1, "", "q", b""))]
    assert [type(f).__name__ for f in frames] == ["Deliver", "ContentHeader"]
    assert frames[1].body_size == 0


def test_confirms_reach_the_client_as_one_ack_per_read(client: Client) -> None:
    client.open_channel(1)
    client.method(1, commands.Queue.Declare(queue="q"))
    client.method(1, commands.Confirm.Select())
    frames = client.send(b"".join(publish_frames(1, "", "q", b"m") for _ in range(5)))
    acks = [obj for _, obj in frames if isinstance(obj, commands.Basic.Ack)]
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(5, True)]


def test_closing_the_connection_requeues_unacked_messages_and_drops_exclusive_queues() -> None:
    broker = new_broker()
    c = Client(broker)
    c.handshake()
    c.open_channel(1)
    c.method(1, commands.Queue.Declare(queue="shared"))
    c.method(1, commands.Queue.Declare(queue="mine", exclusive=True))
    c.method(1, commands.Basic.Consume(queue="shared", consumer_tag="c"))
    c.send(publish_frames(1, "", "shared", b"1") + publish_frames(1, "", "shared", b"2"))
    (ok,) = c.method(0, commands.Connection.Close(200, "bye", 0, 0))
    assert isinstance(ok, commands.Connection.CloseOk)
    assert c.transport.closed
    q = broker.vhosts["/"].queues["shared"]
    assert [(e.msg.body, e.redelivered) for e in q.ready] == [(b"1", True), (b"2", True)]
    assert "mine" not in broker.vhosts["/"].queues


def test_connection_error_waits_for_close_ok_then_closes(client: Client) -> None:
    client.open_channel(1)
    client.method(1, commands.Channel.Open())  # 504
    assert not client.transport.closed
    assert client.method(1, commands.Queue.Declare(queue="q")) == []  # ignored while closing
    client.method(0, commands.Connection.CloseOk())
    assert client.transport.closed


def test_frame_over_frame_max_is_501_and_the_connection_closes(client: Client) -> None:
    frames = [obj for _, obj in client.send(b"\x03\x00\x01" + (131073).to_bytes(4, "big"))]
    assert close_of(frames)[0] == 501
    assert client.transport.closed


def test_frames_before_a_bad_frame_in_the_same_read_still_take_effect(client: Client) -> None:
    client.open_channel(1)
    data = frame.marshal(commands.Queue.Declare(queue="q"), 1) + b"\x03\x00\x01" + (131073).to_bytes(4, "big")
    frames = [obj for _, obj in client.send(data)]
    assert isinstance(frames[0], commands.Queue.DeclareOk)
    assert close_of(frames[1:])[0] == 501
    assert "q" in client.broker.vhosts["/"].queues


def test_field_table_nested_deeper_than_max_table_depth_is_502() -> None:
    c = Client(new_broker(max_table_depth=3))
    c.handshake()
    c.open_channel(1)
    ok = c.method(1, commands.Queue.Declare(queue="flat", arguments={"x-a": {"b": {"c": 1}}}))
    assert isinstance(ok[0], commands.Queue.DeclareOk)
    deep = commands.Queue.Declare(queue="deep", arguments={"x-a": {"b": {"c": {"d": 1}}}})
    assert close_of(c.method(1, deep)) == (502, 50, 10)


def test_unknown_frame_type_is_501(client: Client) -> None:
    assert close_of([obj for _, obj in client.send(raw_frame(5, 0, b""))])[0] == 501


# -- any chunking of a client's bytes gives the same deliveries ------------------------------------------


def conversation(bodies: list[bytes]) -> bytes:
    """A client's whole byte stream: handshake, a no-ack consumer, then publishes (some over frame_max)."""
    start_ok = commands.Connection.StartOk({"capabilities": {}}, "PLAIN", "\0guest\0guest", "en_US")
    parts = [
        PROTOCOL_HEADER,
        frame.marshal(start_ok, 0),
        frame.marshal(commands.Connection.TuneOk(2047, 4096, 0), 0),
        frame.marshal(commands.Connection.Open("/"), 0),
        frame.marshal(commands.Channel.Open(), 1),
        frame.marshal(commands.Queue.Declare(queue="q"), 1),
        frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True), 1),
    ]
    parts += [publish_frames(1, "", "q", b, frame_max=4096, message_id=str(i)) for i, b in enumerate(bodies)]
    return b"".join(parts)


def deliveries_for(chunks: list[bytes]) -> list[tuple[int, str, bytes]]:
    c = Client()
    out: list[Any] = []
    for chunk in chunks:
        out += [obj for _, obj in c.send(chunk)]
    heads = [f.properties.message_id for f in out if isinstance(f, header.ContentHeader)]
    return [(d.delivery_tag, mid, b) for (d, b), mid in zip(messages(out), heads, strict=True)]


@settings(max_examples=40, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=9000), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 60_000), max_size=12),
)
def test_any_chunking_of_the_client_bytes_gives_the_same_deliveries(bodies: list[bytes], cuts: list[int]) -> None:
    data = conversation(bodies)
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    expected = [(i + 1, str(i), b) for i, b in enumerate(bodies)]
    assert deliveries_for([data]) == expected
    assert deliveries_for(chunks) == expected
