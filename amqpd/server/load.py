"""How busy the broker's event loop is, sampled a few times a second, for publisher flow control.

amqpd runs on one core. When it is saturated, every publish it reads takes CPU from the deliveries and acks
of the queue's consumers, and a queue with consumers can grow without bound while they starve. RabbitMQ's
credit flow pauses publishers in that case (a queue process that cannot keep up withholds credit), and only
then: a backlog behind consumers that are slow on their own (prefetch full, processing) never blocks its
publishers. This sampler is the second of two reasons to pause publishers to a deep consumed queue; the
first is consumer pace (broker/queues/flow.py), which holds on a machine shared with other work, where this one
misjudges. It stays for what pace cannot see: a no-ack consumer that the broker cannot write to fast enough
is measured only when its socket drains from write_buffer_high to write_buffer_low, many turns apart, and
looks slow on its own (without this sampler S1 delivered a fraction of what it accepted; docs/performance.md).
Publishers it paused go on at the first sample with time to spare.

Busy is either of two shares of a sample reaching BUSY_SHARE:
- the process's CPU time: on a quiet machine that is the loop's whole work, the socket calls made outside
  our callbacks included (with equal-properties runs those are most of it, and the callbacks alone then
  never looked busy: the consumer starved and S1EQ fell by more than half);
- the wall time the loop spends inside our callbacks (reading and writing): on a machine shared with other
  work the broker may get only part of a core, and its consumers starve just the same while every turn of
  the loop goes to reading publishes (measured: S3 with the CPU share alone under other load delivered a
  few percent of what it accepted).
"""

from __future__ import annotations

import asyncio
import time

from amqpd.broker.broker import Broker


class LoopTime:
    """Wall seconds spent inside the connections' callbacks; one event loop per process."""

    __slots__ = ("busy",)

    def __init__(self) -> None:
        self.busy = 0.0


LOOP = LoopTime()
SAMPLE_S = 0.05  # short enough that a paused publisher waits little once the broker has time again
BUSY_SHARE = 0.85  # of one core, over a sample


async def sample_load(broker: Broker, loop_time: LoopTime = LOOP) -> None:
    busy, cpu, wall = loop_time.busy, time.process_time(), time.perf_counter()
    while True:
        await asyncio.sleep(SAMPLE_S)
        busy2, cpu2, wall2 = loop_time.busy, time.process_time(), time.perf_counter()
        elapsed = wall2 - wall
        if elapsed > 0:
            broker.set_busy(max(busy2 - busy, cpu2 - cpu) / elapsed >= BUSY_SHARE)
        busy, cpu, wall = busy2, cpu2, wall2
