"""In-process cost per message of a stream replay, without sockets: `python -m bench.micro_stream`.

Publishes `--messages` messages (each with its own properties, as the bench's headline publisher sends them)
into a stream of a real store (no fsync), then replays them from `first` with `--consumers` consumers the
way `python -m bench ST` does (prefetch 1000, a multiple-ack every 100th delivery) and prints the CPU µs per
replayed message of the replay alone. `--profile` adds a cProfile table. A/B: run it with PYTHONPATH set to
each checkout in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import struct
import tempfile
import time

import anyio
from pamqp import commands, frame

from amqpd.broker.broker import Broker
from amqpd.config import Settings
from bench.codec import AppPublish, basic_ack
from bench.micro import open_session

PREFETCH = 1000
ACK_EVERY = 100
IDLE_POLL_S = 0.0005
STALL_S = 10.0  # no delivery for this long: the replay is stuck, not slow
_FRAME = struct.Struct(">BHI")
_DELIVER = b"\x00\x3c\x00\x3c"


def deliveries(out: bytes) -> list[int]:
    """The delivery tags of the basic.deliver frames in a consumer's output."""
    tags, pos = [], 0
    while pos < len(out):
        kind, _channel, size = _FRAME.unpack_from(out, pos)
        if kind == 1 and out[pos + 7 : pos + 11] == _DELIVER:
            ctag_len = out[pos + 11]
            tags.append(struct.unpack_from(">Q", out, pos + 12 + ctag_len)[0])
        pos += 8 + size
    return tags


async def fill(broker: Broker, store: object, messages: int, body: int = 100) -> None:
    pub = open_session(broker)
    args = {"x-queue-type": "stream"}
    pub.feed(frame.marshal(commands.Queue.Declare(queue="st", durable=True, arguments=args), 1))
    app = AppPublish(1, "", ("st",), body, delivery_mode=2, tag="st")
    for i in range(messages // 100):
        pub.feed(app.batch(100, 1_790_000_000 + i))
        pub.take_output()
        if i % 50 == 0:
            await store.flush()  # type: ignore[attr-defined]
    await store.flush()  # type: ignore[attr-defined]


async def replay(broker: Broker, messages: int, consumers: int) -> float:
    """CPU seconds of the broker's work while `consumers` consumers each replay `messages`: the process's CPU
    time (the store's read thread included) less the consumers' own parsing. Reads go to the store's read
    thread and a replay goes on in slices on later loop turns, so the loop runs whenever a consumer's output
    is empty."""
    sessions = []
    for _ in range(consumers):
        con = open_session(broker)
        con.feed(frame.marshal(commands.Basic.Qos(prefetch_count=PREFETCH), 1))
        sessions.append(con)
    state = [[0] for _ in sessions]  # received
    client = 0.0
    start = time.process_time()
    for con in sessions:
        con.feed(
            frame.marshal(
                commands.Basic.Consume(queue="st", consumer_tag="c", arguments={"x-stream-offset": "first"}), 1
            )
        )
    idle_since = time.monotonic()
    while any(s[0] < messages for s in state):
        progressed = False
        for con, s in zip(sessions, state, strict=True):
            out = con.take_output()
            t = time.process_time()
            tags = deliveries(out)
            s[0] += len(tags)
            acks = [basic_ack(1, tag, True) for tag in tags if tag % ACK_EVERY == 0]
            if tags and s[0] >= messages and tags[-1] % ACK_EVERY:
                acks.append(basic_ack(1, tags[-1], True))  # the last ones
            client += time.process_time() - t
            progressed |= bool(tags)
            for ack in acks:
                con.feed(ack)
        if progressed:
            idle_since = time.monotonic()
            await asyncio.sleep(0)  # the replay's next slices
        elif time.monotonic() - idle_since > STALL_S:
            raise RuntimeError(f"the replay stalled at {min(s[0] for s in state)} of {messages}")
        else:
            await asyncio.sleep(IDLE_POLL_S)  # waiting on the read thread: no CPU spent spinning
    return time.process_time() - start - client


async def measure(messages: int, consumers: int, profile: bool, body: int = 100) -> float:
    with tempfile.TemporaryDirectory() as d:
        from store import MessageStore

        store = MessageStore(d, fsync="none")
        await store.open()
        try:
            broker = Broker(Settings(), store=store)
            await fill(broker, store, messages, body)
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 10)  # as amqpd/server/listener.py
            prof = cProfile.Profile() if profile else None
            if prof is not None:
                prof.enable()
            cpu = await replay(broker, messages, consumers)
            if prof is not None:
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            return cpu / (messages * consumers) * 1e6
        finally:
            await store.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.micro_stream", description=__doc__)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--consumers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--body", type=int, default=100, help="body bytes of each message (default 100)")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    results = sorted(anyio.run(measure, args.messages, args.consumers, False, args.body) for _ in range(args.rounds))
    mid, low = results[len(results) // 2], results[0]
    per_mib = (1 << 20) / (args.body + 250)  # messages in a replayed MiB (their properties about 250 bytes)
    print(
        f"replay x{args.consumers}: {mid:.2f} µs/msg, {mid * per_mib / 1000:.3f} ms/MiB "
        f"(median of {args.rounds}; min {low:.2f})"
    )
    if args.profile:
        anyio.run(measure, args.messages, args.consumers, True, args.body)


if __name__ == "__main__":
    main()
