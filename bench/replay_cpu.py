"""The broker's and the consumer's CPU per replayed MiB of a stream, the replay alone:
`python -m bench.replay_cpu [--mb 256] [--rounds 3] [--cold] [--headers] [--versus TREE]`.

The cost side of issue 26's replay figure (`bench.loop_reads`, where the replay's consumer and the broker take
the two cores from the confirmed publisher). It starts its own amqpd, fills a stream with --mb MiB of 16 KiB
messages (as bench.loop_reads does), then in each of --rounds rounds one consumer in a process of its own
(aiormq, prefetch 1000, a multiple ack every 500) replays the whole stream from its first offset; from a warm
page cache unless --cold (the cache dropped before each replay: needs root). Each round reports the broker's
CPU seconds over the replay (all its threads: the loop and the store's read thread, from /proc), its loop
XX
average as one JSON line. With `--versus TREE` each round runs on this tree's amqpd and then on TREE's
(PYTHONPATH=TREE), the broker restarted on the same data in between: an alternating A/B on one stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from amqpd.testing import BrokerProcess
from bench.loop_reads import ab_rounds, drop_page_cache, fill, phase, replay_in_child
from bench.procstat import cpu_seconds, thread_cpu_seconds

HEADERS = {"x-request-id": "0123456789abcdef", "x-retries": 0}  # with --headers: a table as many clients send


async def replay_round(url: str, pid: int, count: int, megabytes: int, cold: bool) -> dict[str, Any]:
    if cold and not drop_page_cache():
        raise SystemExit("--cold needs root (echo 3 > /proc/sys/vm/drop_caches)")
    phase("replay", pid)
    with ProcessPoolExecutor(1) as pool:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(pool, time.sleep, 0)  # the child started before the clock does
        before, loop_before = cpu_seconds(pid), thread_cpu_seconds(pid, pid)
        took, consumer_cpu = await loop.run_in_executor(pool, replay_in_child, url, count)
        broker_cpu, loop_cpu = cpu_seconds(pid) - before, thread_cpu_seconds(pid, pid) - loop_before
    ms = 1000.0
    return {
        "broker_cpu_ms_per_mib": round(broker_cpu / megabytes * ms, 3),
        "broker_loop_cpu_ms_per_mib": round(loop_cpu / megabytes * ms, 3),
        "consumer_cpu_ms_per_mib": round(consumer_cpu / megabytes * ms, 3),
        "replay_mib_per_s": round(megabytes / took, 1),
    }


async def measure(
    broker: BrokerProcess, megabytes: int, rounds: int, cold: bool, headers: bool, versus: str | None
) -> dict[str, Any]:
    assert broker.proc is not None
    phase("filling", broker.proc.pid)
    count = await fill(broker.url, megabytes, HEADERS if headers else None)

    def one_round(url: str, pid: int) -> Awaitable[dict[str, Any]]:
        return replay_round(url, pid, count, megabytes, cold)

    results = await ab_rounds(broker, rounds, versus, one_round)
    summary: dict[str, Any] = {"stream_mib": megabytes, "messages": count, "cold_page_cache": cold, "headers": headers}
    for side, found in results.items():
        medians = {"median_" + key: round(statistics.median(r[key] for r in found), 3) for key in found[0]}
        summary[side] = {"rounds": found, **medians}
    summary["load_average"] = [round(v, 2) for v in os.getloadavg()]
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=256, help="MiB in the stream (default 256)")
    p.add_argument("--rounds", type=int, default=3, help="replays (default 3)")
    p.add_argument("--cold", action="store_true", help="drop the page cache before each replay (root)")
    p.add_argument("--headers", action="store_true", help="messages with a headers table, as many clients send")
    p.add_argument("--versus", metavar="TREE", help="A/B: each round also on the amqpd of this source tree")
    a = p.parse_args(argv)
    versus = os.path.abspath(a.versus) if a.versus else None
    with BrokerProcess() as broker:
        result = asyncio.run(measure(broker, a.mb, a.rounds, a.cold, a.headers, versus))
    result["amqpd"] = os.path.dirname(os.path.dirname(sys.modules["amqpd"].__file__ or ""))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
