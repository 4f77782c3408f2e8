"""How busy the broker's one thread is, sampled a few times a second, for publisher flow control.

amqpd runs on one core. When it is saturated, every publish it reads takes CPU from the deliveries and acks
of the queue's consumers, and a queue with consumers can grow without bound while they starve. RabbitMQ's
credit flow pauses publishers in that case (a queue process that cannot keep up withholds credit), and only
then: a backlog behind consumers that are slow on their own (prefetch full, processing) never blocks its
publishers. So the broker pauses publishers to a deep consumed queue only while this sampler says it is
busy, and lets them all go on at the first sample with time to spare.
"""

from __future__ import annotations

import asyncio
import time

from amqpd.broker.broker import Broker

SAMPLE_S = 0.05  # short enough that a paused publisher waits little once the broker has time again
BUSY_SHARE = 0.85  # of one core, over a sample


async def sample_load(broker: Broker) -> None:
    cpu, wall = time.process_time(), time.monotonic()
    while True:
        await asyncio.sleep(SAMPLE_S)
        cpu2, wall2 = time.process_time(), time.monotonic()
        elapsed = wall2 - wall
        if elapsed > 0:
            broker.set_busy((cpu2 - cpu) / elapsed >= BUSY_SHARE)
        cpu, wall = cpu2, wall2
