"""The connection's and a channel's state machines (amqpd/session/states.py), seen from the client: every method a
state refuses gets RabbitMQ 3.10's reply code, text and offending method, every one it takes its answer, and the
state after is the one the next method finds. interop/ checks the same answers against the reference broker."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands
from test_session import PROTOCOL_HEADER, Client

Confirm, Tx = commands.Confirm, commands.Tx

MODE_SETUP: dict[str, list[Any]] = {"plain": [], "confirm": [Confirm.Select()], "tx": [Tx.Select()]}

# (mode, method) -> the answer: the ok method's type, or the channel.close (code, text, class id, method id)
MODE_ANSWERS: dict[tuple[str, type], type | tuple[int, str, int, int]] = {
    ("plain", Confirm.Select): Confirm.SelectOk,
    ("plain", Tx.Select): Tx.SelectOk,
    ("plain", Tx.Commit): (406, "PRECONDITION_FAILED - channel is not transactional", 90, 20),
    ("plain", Tx.Rollback): (406, "PRECONDITION_FAILED - channel is not transactional", 90, 30),
    ("confirm", Confirm.Select): Confirm.SelectOk,
    ("confirm", Tx.Select): (406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode", 90, 10),
    ("confirm", Tx.Commit): (406, "PRECONDITION_FAILED - channel is not transactional", 90, 20),
    ("confirm", Tx.Rollback): (406, "PRECONDITION_FAILED - channel is not transactional", 90, 30),
    ("tx", Confirm.Select): (406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode", 85, 10),
    ("tx", Tx.Select): Tx.SelectOk,
    ("tx", Tx.Commit): Tx.CommitOk,
    ("tx", Tx.Rollback): Tx.RollbackOk,
}


@pytest.fixture
def client() -> Client:
    c = Client()
    c.handshake()
    return c


@pytest.mark.parametrize(("mode", "method"), list(MODE_ANSWERS), ids=lambda v: getattr(v, "name", v))
def test_a_mode_method_in_each_mode_gets_rabbitmqs_answer(client: Client, mode: str, method: type) -> None:
    client.open_channel(1)
    for setup in MODE_SETUP[mode]:
        client.method(1, setup)
    (answer,) = client.method(1, method())
    expected = MODE_ANSWERS[mode, method]
    if isinstance(expected, tuple):
        assert isinstance(answer, commands.Channel.Close)
        assert (answer.reply_code, answer.reply_text, answer.class_id, answer.method_id) == expected
    else:
        assert isinstance(answer, expected)


@pytest.mark.parametrize("mode", list(MODE_SETUP))
def test_the_mode_a_channel_enters_is_the_one_the_management_api_shows(client: Client, mode: str) -> None:
    client.open_channel(1)
    for setup in MODE_SETUP[mode]:
        client.method(1, setup)
    ch = client.session.channels[1]
    assert (ch.confirm, ch.tx) == (mode == "confirm", mode == "tx")


def test_a_refused_mode_switch_leaves_the_connection_and_other_channels_in_their_modes(client: Client) -> None:
    client.open_channel(1)
    client.open_channel(2)
    client.method(1, Tx.Select())
    client.method(2, Confirm.Select())
    (close,) = client.method(1, Confirm.Select())
    assert isinstance(close, commands.Channel.Close)
    assert isinstance(client.method(2, Confirm.Select())[0], Confirm.SelectOk)  # still in confirm mode
    assert isinstance(client.method(2, Tx.Select())[0], commands.Channel.Close)


def test_a_method_before_channel_open_closes_the_connection_with_504(client: Client) -> None:
    (close,) = client.method(3, commands.Basic.Qos(prefetch_count=1))
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - expected 'channel.open'")
    assert (close.class_id, close.method_id) == (60, 10)


def test_a_second_channel_open_closes_the_connection_with_504(client: Client) -> None:
    client.open_channel(1)
    (close,) = client.method(1, commands.Channel.Open())
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - second 'channel.open' seen")
    assert (close.class_id, close.method_id) == (20, 10)


def test_after_the_brokers_channel_close_only_close_and_close_ok_count(client: Client) -> None:
    client.open_channel(1)
    client.method(1, Tx.Select())
    (close,) = client.method(1, Confirm.Select())  # refused: the broker closes the channel
    assert isinstance(close, commands.Channel.Close)
    assert client.method(1, commands.Basic.Qos(prefetch_count=1)) == []  # dropped while closing
    assert client.method(1, commands.Channel.CloseOk()) == []
    # closed: the channel may open again, and starts in plain mode
    client.open_channel(1)
    assert isinstance(client.method(1, Confirm.Select())[0], Confirm.SelectOk)


def test_a_close_that_crosses_the_brokers_is_answered_and_its_late_close_ok_ignored(client: Client) -> None:
    client.open_channel(1)
    client.method(1, Tx.Commit())  # refused: the broker's channel.close is on its way
    (ok,) = client.method(1, commands.Channel.Close(200, "bye", 0, 0))
    assert isinstance(ok, commands.Channel.CloseOk)
    assert client.method(1, commands.Channel.CloseOk()) == []
    (close,) = client.method(1, commands.Basic.Qos(prefetch_count=1))  # closed now: must be opened first
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 504


def test_a_connection_method_out_of_place_once_open_is_refused_with_504() -> None:
    c = Client()
    c.handshake()
    (close,) = c.method(0, commands.Connection.Open("/"))
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_text == "CHANNEL_ERROR - unexpected method in connection state running"
    assert (close.class_id, close.method_id) == (10, 40)


def test_a_handshake_method_out_of_order_before_tune_ok_hangs_up() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    assert c.method(0, commands.Connection.Open("/")) == []
    assert c.transport.closed


def test_after_the_brokers_connection_close_a_client_close_is_answered_and_the_connection_ends() -> None:
    c = Client()
    c.handshake()
    c.method(0, commands.Connection.Open("/"))  # refused: connection.close sent
    assert c.method(1, commands.Channel.Open()) == []  # ignored while closing
    (ok,) = c.method(0, commands.Connection.Close(200, "bye", 0, 0))
    assert isinstance(ok, commands.Connection.CloseOk)
    assert c.transport.closed
