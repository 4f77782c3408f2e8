"""The AMQP connection's and a channel's state machines, each in one table, h11-style: "method X in state Y" is
a lookup that gives what to do and the state after, or the refusal with RabbitMQ's reply code and text.

No I/O and no handlers here: the session (connection.py) and the channel (channel.py) look their step up with
`connection_step` and `channel_step` and carry it out. tests/unit/test_states.py walks both tables.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pamqp import commands

from amqpd import errors

# Connection states. Ints, not an Enum: the publish path compares the state on every frame.
AWAIT_HEADER, AWAIT_START_OK, AWAIT_TUNE_OK, AWAIT_OPEN, OPEN, CLOSING, CLOSED = range(7)

# Channel states: not open (never, or closed), open in one of its three modes, and two ways of closing.
UNOPENED, CHANNEL_OPEN, CONFIRM, TX = range(4)
CHANNEL_CLOSING = 4  # we sent channel.close: everything but close and close-ok is dropped until close-ok
CROSSED = 5  # the client's channel.close crossed ours and was answered: a late close-ok may still come
OPEN_STATES = (CHANNEL_OPEN, CONFIRM, TX)  # where basic.publish, ack, nack and reject are taken

# What a step does. The connection's: a handshake handler, the client's close, hang up, ignore, or
# update-secret. The channel's: run the method's handler, open, close, answer a crossed close, or ignore.
START_OK, TUNE_OK, OPEN_CONNECTION, CLOSE, HANG_UP, ANSWER_CLOSE, IGNORE, UPDATE_SECRET = (
    "start-ok",
    "tune-ok",
    "open",
    "close",
    "hang up",
    "answer close",
    "ignore",
    "update secret",
)
HANDLE, OPEN_CHANNEL = "handle", "open channel"


class Step(NamedTuple):
    action: str
    after: int  # the state once the action is done


class Refusal(NamedTuple):
    """A method in a state that does not take it: RabbitMQ's error for it."""

    code: int
    text: str
    connection: bool  # closes the connection (else the channel)

    def error(self, method: Any) -> errors.AMQPError:
        kind = errors.ConnectionError if self.connection else errors.ChannelError
        return kind(self.code, self.text, method.index >> 16, method.index & 0xFFFF)


Conn = commands.Connection

CONNECTION: dict[tuple[int, type], Step | Refusal] = {
    (AWAIT_START_OK, Conn.StartOk): Step(START_OK, AWAIT_TUNE_OK),
    (AWAIT_TUNE_OK, Conn.TuneOk): Step(TUNE_OK, AWAIT_OPEN),
    (AWAIT_OPEN, Conn.Open): Step(OPEN_CONNECTION, OPEN),
    (OPEN, Conn.Close): Step(CLOSE, CLOSED),
    (OPEN, Conn.CloseOk): Step(HANG_UP, CLOSED),
    (OPEN, Conn.Blocked): Step(IGNORE, OPEN),
    (OPEN, Conn.Unblocked): Step(IGNORE, OPEN),
    (OPEN, Conn.UpdateSecret): Step(UPDATE_SECRET, OPEN),
    (CLOSING, Conn.CloseOk): Step(HANG_UP, CLOSED),
    (CLOSING, Conn.Close): Step(ANSWER_CLOSE, CLOSED),
}

# Any other method on channel 0: RabbitMQ hangs up on a handshake out of order before tune-ok, refuses one
# after it, and drops everything but close and close-ok once it has sent its connection.close.
CONNECTION_OTHERWISE: dict[int, Step | Refusal] = {
    AWAIT_START_OK: Step(HANG_UP, CLOSED),
    AWAIT_TUNE_OK: Step(HANG_UP, CLOSED),
    AWAIT_OPEN: Refusal(errors.CHANNEL_ERROR, "unexpected method in connection state opening", True),
    OPEN: Refusal(errors.CHANNEL_ERROR, "unexpected method in connection state running", True),
    CLOSING: Step(IGNORE, CLOSING),
    CLOSED: Step(IGNORE, CLOSED),
}


def connection_step(state: int, method_type: type) -> Step | Refusal:
    return CONNECTION.get((state, method_type)) or CONNECTION_OTHERWISE[state]


Ch = commands.Channel
_EXPECTED_OPEN = Refusal(errors.CHANNEL_ERROR, "expected 'channel.open'", True)
_SECOND_OPEN = Refusal(errors.CHANNEL_ERROR, "second 'channel.open' seen", True)
_NOT_TX = Refusal(errors.PRECONDITION_FAILED, "channel is not transactional", False)

CHANNEL: dict[tuple[int, type], Step | Refusal] = {
    (UNOPENED, Ch.Open): Step(OPEN_CHANNEL, CHANNEL_OPEN),
    (CROSSED, Ch.Open): Step(OPEN_CHANNEL, CHANNEL_OPEN),
    (CROSSED, Ch.CloseOk): Step(IGNORE, UNOPENED),
    (CHANNEL_CLOSING, Ch.Close): Step(ANSWER_CLOSE, CROSSED),
    (CHANNEL_CLOSING, Ch.CloseOk): Step(IGNORE, UNOPENED),
    # the modes: confirm and tx exclude each other, and only tx commits or rolls back
    (CHANNEL_OPEN, commands.Confirm.Select): Step(HANDLE, CONFIRM),
    (CONFIRM, commands.Confirm.Select): Step(HANDLE, CONFIRM),
    (TX, commands.Confirm.Select): Refusal(errors.PRECONDITION_FAILED, "cannot switch from tx to confirm mode", False),
    (CHANNEL_OPEN, commands.Tx.Select): Step(HANDLE, TX),
    (TX, commands.Tx.Select): Step(HANDLE, TX),
    (CONFIRM, commands.Tx.Select): Refusal(errors.PRECONDITION_FAILED, "cannot switch from confirm to tx mode", False),
    (CHANNEL_OPEN, commands.Tx.Commit): _NOT_TX,
    (CONFIRM, commands.Tx.Commit): _NOT_TX,
    (CHANNEL_OPEN, commands.Tx.Rollback): _NOT_TX,
    (CONFIRM, commands.Tx.Rollback): _NOT_TX,
}
for _state in OPEN_STATES:
    CHANNEL[_state, Ch.Open] = _SECOND_OPEN
    CHANNEL[_state, Ch.Close] = Step(CLOSE, UNOPENED)
    CHANNEL[_state, Ch.CloseOk] = Step(IGNORE, _state)

# Any other method: an open channel's handler takes it (one it has none for is 503, Channel.handle); a channel
# not open must be opened first; a closing one drops it.
CHANNEL_OTHERWISE: dict[int, Step | Refusal] = {
    UNOPENED: _EXPECTED_OPEN,
    CHANNEL_OPEN: Step(HANDLE, CHANNEL_OPEN),
    CONFIRM: Step(HANDLE, CONFIRM),
    TX: Step(HANDLE, TX),
    CHANNEL_CLOSING: Step(IGNORE, CHANNEL_CLOSING),
    CROSSED: _EXPECTED_OPEN,
}


def channel_step(state: int, method_type: type) -> Step | Refusal:
    return CHANNEL.get((state, method_type)) or CHANNEL_OTHERWISE[state]
