"""In-process cost per message of the broker's protocol and semantics, without sockets or an event loop.

`python -m bench.micro [S1|S2|S3|ST] [--messages N] [--batch N] [--equal-properties] [--profile]` drives two
Sessions (a publisher and a consumer) with pre-encoded frames, each message with its own properties as in the
bench's headline (`--equal-properties`: the same property bytes every time, which takes the publish-run path), the
way the server's Protocol does: one feed() per read of `--batch` publishes, then one take_output() per
connection (the per-loop-turn flush). It prints CPU µs per message; `--profile` adds a cProfile table of where
they go. S2 and ST use a real store in a temporary directory (no fsync thread: appends and commits are timed, the
disk wait is not). S3 is one of the bench's four S3 lanes in its steady state: 1 KiB transient messages into a
queue that holds a backlog (BACKLOG, filled before the clock starts), a manual-ack consumer with prefetch 100
that multiple-acks every 10th delivery, so publishes are queued and deliveries follow the acks. ST: persistent
publishes with confirms into a stream that nobody reads, as the fill phase of `python -m bench ST`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import struct
import tempfile
import time
from typing import Any

import anyio
from pamqp import commands, frame

from amqpd.broker.broker import Broker
from amqpd.config import Settings
from amqpd.session.connection import Session
from bench.codec import AppPublish, basic_ack, publish_frames

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_deliver_tag = struct.Struct(">Q")


class NullTransport:
    def request_flush(self) -> None:
        pass

    def close(self) -> None:
        raise RuntimeError("the session closed the connection")

    def hold_reading(self, reason: object) -> None:
        pass

    def release_reading(self, reason: object) -> None:
        pass


def open_session(broker: Broker) -> Session:
    s = Session(broker, NullTransport(), "micro")
    s.feed(PROTOCOL_HEADER)
    props: dict[str, Any] = {"product": "micro", "capabilities": {}}
    for method in (
        commands.Connection.StartOk(props, "PLAIN", "\0guest\0guest", "en_US"),
        commands.Connection.TuneOk(2047, 131072, 0),
        commands.Connection.Open("/"),
        commands.Channel.Open(),
    ):
        s.feed(frame.marshal(method, 0 if not isinstance(method, commands.Channel.Open) else 1))
    s.take_output()
    return s


DISTINCT_CHUNKS = 200  # pre-encoded batches cycled through: ids repeat only every DISTINCT_CHUNKS * batch
BACKLOG = 10_000  # S3: messages in the queue before the clock starts
PREFETCH = {"S2": 200, "S3": 100}
BODY_SIZE = {"S1": 100, "S2": 100, "S3": 1024, "ST": 100}
STORED = ("S2", "ST")  # persistent, durable, confirm mode, a real store
_DELIVER = b"\x00\x3c\x00\x3c\x01c"  # a basic.deliver to consumer tag "c"


def setup(scenario: str, store: Any, reads: list[bytes]) -> tuple[Broker, Session, Session, int]:
    """The broker and both sessions, and how many deliveries the consumer has had before the clock starts."""
    broker = Broker(Settings(), store=store)
    durable = scenario in STORED
    pub, con = open_session(broker), open_session(broker)
    arguments = {"x-queue-type": "stream"} if scenario == "ST" else {}
    pub.feed(frame.marshal(commands.Queue.Declare(queue="micro", durable=durable, arguments=arguments), 1))
    if durable:
        pub.feed(frame.marshal(commands.Confirm.Select(), 1))
    for i in range(BACKLOG if scenario == "S3" else 0):
        pub.feed(reads[i % len(reads)])
        if len(broker.vhosts["/"].queues["micro"].ready) >= BACKLOG:
            break
    if scenario in PREFETCH:
        con.feed(frame.marshal(commands.Basic.Qos(prefetch_count=PREFETCH[scenario]), 1))
    if scenario != "ST":
        con.feed(frame.marshal(commands.Basic.Consume(queue="micro", consumer_tag="c", no_ack=scenario == "S1"), 1))
    pub.take_output()
    return broker, pub, con, con.take_output().count(_DELIVER)


def chunks(scenario: str, batch: int, equal_properties: bool) -> list[bytes]:
    """What the publisher's reads carry: `batch` publishes each, encoded before the clock starts."""
    mode = 2 if scenario in STORED else None
    size = BODY_SIZE[scenario]
    if equal_properties:
        return [publish_frames(1, "", "micro", b"x" * size, delivery_mode=mode) * batch]
    app = AppPublish(1, "", ("micro",), size, delivery_mode=mode, tag="micro")
    return [app.batch(batch, 1_790_000_000 + i) for i in range(DISTINCT_CHUNKS)]


async def run(
    scenario: str, messages: int, batch: int, store: Any, equal_properties: bool, stalls: int = 0
) -> tuple[float, float]:
    """(CPU µs per message of the whole process, of the event-loop thread alone). stalls: the consumer's
    connection is not writable for that many reads out of every twice as many, then drains (as over a socket,
    where a consumer reading slower than the broker writes fills the socket's buffer)."""
    reads = chunks(scenario, batch, equal_properties)
    broker, pub, con, delivered = setup(scenario, store, reads)
    acking = scenario in ("S2", "S3")
    acked = 0
    start, start_loop = time.process_time(), time.thread_time()
    for i in range(messages // batch):
        if stalls and i % stalls == 0:
            if (i // stalls) % 2:
                con.writable = False
            else:
                con.writable_again()
        pub.feed(reads[i % len(reads)])
        pub.take_output()
        out = con.take_output()
        if acking:
            # a multiple-ack at every 10th delivery, all of one read's in one write, as the bench consumer sends
            # them; delivery tags are sequential
            delivered += out.count(_DELIVER)
            if delivered - delivered % 10 > acked:
                con.feed(b"".join(basic_ack(1, t, True) for t in range(acked + 10, delivered + 1, 10)))
                acked = delivered - delivered % 10
        if store is not None:
            await store.flush()
    if not con.channels or (acking and delivered < messages - batch):  # a channel error would end the load
        raise RuntimeError(f"the consumer stopped: {delivered} of {messages} delivered")
    return (time.process_time() - start) / messages * 1e6, (time.thread_time() - start_loop) / messages * 1e6


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__)
    p.add_argument("scenario", nargs="?", default="S1", choices=("S1", "S2", "S3", "ST"))
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--batch", type=int, default=100, help="publishes per read")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--equal-properties", action="store_true", help="the same property bytes on every message")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--stalls", type=int, default=0, help="the consumer's socket is full for N reads of every 2N (S1)")
    args = p.parse_args()
    measure = (args.scenario, args.messages, args.batch, args.equal_properties, args.stalls)
    results = [anyio.run(_measure, *measure, False) for _ in range(args.rounds)]
    mid = len(results) // 2
    total, loop = sorted(r[0] for r in results), sorted(r[1] for r in results)
    print(
        f"{args.scenario}: {total[mid]:.2f} µs/msg, loop thread {loop[mid]:.2f} (medians of {args.rounds}; "
        f"min {total[0]:.2f}, {loop[0]:.2f})"
    )
    if args.profile:
        anyio.run(_measure, *measure, True)


async def _measure(
    scenario: str, messages: int, batch: int, equal_properties: bool, stalls: int, profile: bool
) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        store = None
        if scenario in STORED:
            from store import MessageStore

            store = MessageStore(d, fsync="none")
            await store.open()
        gc.collect()
        gc.freeze()  # as amqpd/server/listener.py does once it has started
        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        try:
            return await run(scenario, messages, batch, store, equal_properties, stalls)
        finally:
            if prof is not None:
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            if store is not None:
                await store.close()


if __name__ == "__main__":
    main()
