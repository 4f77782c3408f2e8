"""The last frames of a connection reach a client that is still sending: after close-ok (or a close of the
broker's own) the broker stops writing, reads and drops what the client still sends, and only then closes.
Closing with the client's frames unread makes the kernel answer with a reset, and the client's TCP stack
throws away the close-ok it had not read yet (amqplib's connection.close(cb) never called back)."""

from __future__ import annotations

import os
import struct
import time

import pamqp.frame
import pytest
from pamqp import commands

from amqpd.testing import BrokerProcess
from tests.integration.raw_amqp import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, RawConnection, frame

pytestmark = pytest.mark.timeout(120)


def _publishes(count: int, size: int = 1024) -> bytes:
    """What a client with publishes still queued sends after its connection.close: frames on channel 1."""
    method = commands.Basic.Publish(exchange="", routing_key="nowhere")
    one = (
        frame(FRAME_METHOD, 1, _marshal_method(method))
        + frame(FRAME_HEADER, 1, bytes.fromhex("003c0000") + size.to_bytes(8, "big") + b"\x00\x00")
        + frame(FRAME_BODY, 1, b"x" * size)
    )
    return one * count


def _marshal_method(method: commands.Basic.Publish) -> bytes:
    return struct.pack(">HH", method.index >> 16, method.index & 0xFFFF) + method.marshal()


def _still_sending(c: RawConnection) -> None:
    """A client flushing the frames it had queued behind its close, one write each, as amqplib does: a write
    to a socket the broker had already closed fails (EPIPE / connection reset)."""
    one = _publishes(1)
    for _ in range(20):
        c.send(one)


def test_close_ok_reaches_a_client_that_sends_frames_after_its_close(amqpd_url: str) -> None:
    with RawConnection(amqpd_url) as c:
        c.handshake()
        c.open_channel(1)
        c.send(_close_frame() + _publishes(1000))
        c.expect(commands.Connection.CloseOk, 0)
        _still_sending(c)


def test_the_reason_for_a_broken_frame_reaches_a_client_still_sending(amqpd_url: str) -> None:
    with RawConnection(amqpd_url) as c:
        c.handshake()
        c.open_channel(1)
        broken = frame(FRAME_METHOD, 1, b"\x00\x0a\x00\x0a", end=b"\x00")  # no frame-end octet
        c.send(broken + _publishes(1000))
        close = c.expect(commands.Connection.Close, 0)
        assert close.reply_code == 501
        _still_sending(c)


def _close_frame() -> bytes:
    return pamqp.frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0)


def _open_sockets(pid: int) -> int:
    """The broker's open sockets (its other files, such as the memory monitor's /proc file it opens on its first
    sample, come and go on their own schedule)."""
    fd_dir = f"/proc/{pid}/fd"
    links = []
    for fd in os.listdir(fd_dir):
        try:
            links.append(os.readlink(f"{fd_dir}/{fd}"))
        except FileNotFoundError:  # closed while listed
            pass
    return sum(link.startswith("socket:") for link in links)


@pytest.mark.amqpd_only
def test_clients_that_never_hang_up_after_close_are_dropped_after_the_linger_bound() -> None:
    """A flood of clients that close, keep sending and never hang up: each reads its close-ok, and the broker
    hangs up on all of them by itself, its open sockets back to where they were."""
    with BrokerProcess(env={"AMQPD_CLOSE_LINGER": "1"}) as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        before = _open_sockets(pid)
        clients = [RawConnection(broker.url) for _ in range(40)]
        try:
            for c in clients:
                c.handshake()
                c.open_channel(1)
                c.send(_close_frame() + _publishes(50))
                c.expect(commands.Connection.CloseOk, 0)
                _still_sending(c)
            for c in clients:  # the broker closes: the client never does
                c.read_until_eof(timeout=30)
            deadline = time.monotonic() + 30
            while _open_sockets(pid) > before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _open_sockets(pid) <= before
        finally:
            for c in clients:
                c.sock.close()
