"""A large body goes to the consumer's connection as pieces: its frames cut from it by views, the body never
copied into the delivery's bytes (a 16 MiB body would be another 16 MiB of fresh memory per delivery)."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable

from pamqp import commands

from amqpd.broker.delivery.deliveries import PIECES_FROM
from tests.unit.fakes import ClientChannel, FakeConnection, new_broker

MIB = 1024 * 1024


class PiecesConnection(FakeConnection):
    """Keeps what is sent as it is sent: no copy of its own to count."""

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def send_pieces(self, pieces: list[bytes | memoryview]) -> None:
        self.sent += pieces  # type: ignore[arg-type]


def allocated_by(step: Callable[[], object]) -> int:
    """The peak of memory allocated while `step` runs."""
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_large_bodies_handed_to_a_new_consumer_are_not_copied() -> None:
    client = ClientChannel(new_broker(), PiecesConnection())
    client.declare_queue("big")
    bodies = [os.urandom(4 * MIB), os.urandom(PIECES_FROM), b"small"]
    for body in bodies:
        client.publish("", "big", body)
    consume = commands.Basic.Consume(queue="big", consumer_tag="c")
    peak = allocated_by(lambda: client.ch.handle(consume))  # all three at once (deliver_batch)
    assert peak < MIB, f"{peak} bytes allocated to deliver {sum(map(len, bodies))} bytes of bodies"
    got = client.deliveries()
    assert [body for _, body in got] == bodies
    assert [method.delivery_tag for method, _ in got] == [1, 2, 3]


def test_a_large_body_delivered_once_an_ack_makes_room_is_not_copied() -> None:
    client = ClientChannel(new_broker(), PiecesConnection())
    client.declare_queue("big")
    client.call(commands.Basic.Qos(prefetch_count=1))
    bodies = [os.urandom(4 * MIB), os.urandom(4 * MIB)]
    for body in bodies:
        client.publish("", "big", body)
    client.consume("big")
    ((first, got),) = client.deliveries()
    assert got == bodies[0]
    peak = allocated_by(lambda: client.ack(first.delivery_tag))  # makes room for the second one
    assert peak < MIB, f"{peak} bytes allocated to deliver {len(bodies[1])} bytes of body"
    ((method, got),) = client.deliveries()
    assert (method.delivery_tag, got) == (2, bodies[1])
