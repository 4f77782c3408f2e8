"""In-process cost per message of the broker's protocol and semantics, without sockets or an event loop.

`python -m bench.micro [S1|S2|ST] [--messages N] [--batch N] [--equal-properties] [--profile]` drives two Sessions
(a publisher and a consumer; ST: persistent publishes with confirms into a stream that nobody reads, as the
fill phase of `python -m bench ST`) with pre-encoded frames, each message with its own properties as in the bench's
headline (`--equal-properties`: the same property bytes every time, which takes the publish-run path), the
way the server's Protocol does: one feed() per read of `--batch` publishes, then one take_output() per
connection (the per-loop-turn flush). It prints CPU µs per message; `--profile` adds a cProfile table of where
they go. S2 and ST use a real store in a temporary directory (no fsync thread: appends and commits are timed, the
disk wait is not).
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
from amqpd.broker.session import Session
from amqpd.config import Settings
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


def setup(scenario: str, store: Any) -> tuple[Broker, Session, Session]:
    broker = Broker(Settings(), store=store)
    durable = scenario != "S1"
    pub, con = open_session(broker), open_session(broker)
    arguments = {"x-queue-type": "stream"} if scenario == "ST" else {}
    pub.feed(frame.marshal(commands.Queue.Declare(queue="micro", durable=durable, arguments=arguments), 1))
    if durable:
        pub.feed(frame.marshal(commands.Confirm.Select(), 1))
        con.feed(frame.marshal(commands.Basic.Qos(prefetch_count=200), 1))
    if scenario != "ST":
        con.feed(frame.marshal(commands.Basic.Consume(queue="micro", consumer_tag="c", no_ack=not durable), 1))
    pub.take_output()
    con.take_output()
    return broker, pub, con


def chunks(scenario: str, batch: int, equal_properties: bool) -> list[bytes]:
    """What the publisher's reads carry: `batch` publishes each, encoded before the clock starts."""
    mode = 2 if scenario != "S1" else None
    if equal_properties:
        return [publish_frames(1, "", "micro", b"x" * 100, delivery_mode=mode) * batch]
    app = AppPublish(1, "", ("micro",), 100, delivery_mode=mode, tag="micro")
    return [app.batch(batch, 1_790_000_000 + i) for i in range(DISTINCT_CHUNKS)]


async def run(scenario: str, messages: int, batch: int, store: Any, equal_properties: bool) -> tuple[float, float]:
    """(CPU µs per message of the whole process, of the event-loop thread alone)."""
    broker, pub, con = setup(scenario, store)
    reads = chunks(scenario, batch, equal_properties)
    acking = scenario == "S2"
    delivered = acked = 0
    start, start_loop = time.process_time(), time.thread_time()
    for i in range(messages // batch):
        pub.feed(reads[i % len(reads)])
        pub.take_output()
        out = con.take_output()
        if acking:
            # multiple-ack every 10th delivery, as the bench consumer does; delivery tags are sequential
            delivered += out.count(b"\x00\x3c\x00\x3c\x01c")
            if delivered - delivered % 10 > acked:
                acked = delivered - delivered % 10
                con.feed(basic_ack(1, acked, True))
        if store is not None:
            await store.flush()
    if not con.channels or (acking and delivered < messages - batch):  # a channel error would end the load
        raise RuntimeError(f"the consumer stopped: {delivered} of {messages} delivered")
    return (time.process_time() - start) / messages * 1e6, (time.thread_time() - start_loop) / messages * 1e6


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__)
    p.add_argument("scenario", nargs="?", default="S1", choices=("S1", "S2", "ST"))
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--batch", type=int, default=100, help="publishes per read")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--equal-properties", action="store_true", help="the same property bytes on every message")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    measure = (args.scenario, args.messages, args.batch, args.equal_properties)
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
    scenario: str, messages: int, batch: int, equal_properties: bool, profile: bool
) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        store = None
        if scenario != "S1":
            from store import MessageStore

            store = MessageStore(d, fsync="none")
            await store.open()
        gc.collect()
        gc.freeze()  # as amqpd/server/listener.py does once it has started
        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        try:
            return await run(scenario, messages, batch, store, equal_properties)
        finally:
            if prof is not None:
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            if store is not None:
                await store.close()


if __name__ == "__main__":
    main()
