"""`python -m bench [S1 … S6] [--rounds N] [--duration S]`: each scenario against each target, alternating,
then medians, amqpd/RabbitMQ ratios, and JSON + PNG in bench/results/."""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import procstat, report
from bench.options import Options
from bench.scenarios import DEFAULT_SCENARIOS, SCENARIOS
from bench.wire import RawConnection, Target

DEFAULT_RABBITMQ = os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="S1…S6 (each message with its own properties), S1EQ…S6EQ (equal properties), SAT "
        "(default: S1…S6, S1EQ, S2EQ, S3EQ, S6EQ)",
    )
    p.add_argument("--rounds", type=int, default=3, help="runs per scenario and target (median reported)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per steady-state scenario")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring")
    p.add_argument("--backlog", type=int, default=1_000_000, help="S4 message count")
    p.add_argument("--targets", default="rabbitmq,amqpd", help="comma-separated: rabbitmq, amqpd")
    p.add_argument("--rabbitmq-url", default=DEFAULT_RABBITMQ)
    p.add_argument("--amqpd-url", help="measure an already running amqpd instead of starting one")
    p.add_argument("--amqpd-arg", action="append", default=[], help="extra amqpd argument (repeatable)")
    p.add_argument("--out", type=Path, default=RESULTS, help="directory for JSON and PNG")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG (no matplotlib needed)")
    args = p.parse_args(argv)
    args.scenarios = [s.upper() for s in args.scenarios] or list(DEFAULT_SCENARIOS)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown or not targets or any(t not in ("rabbitmq", "amqpd") for t in targets):
        p.error(f"scenarios are {', '.join(SCENARIOS)}; targets are rabbitmq and amqpd")
    args.targets = targets
    return args


@contextlib.contextmanager
def amqpd_target(args: argparse.Namespace) -> Iterator[Target]:
    if args.amqpd_url:
        yield Target("amqpd", args.amqpd_url, procstat.broker_pid(args.amqpd_url))
        return
    from amqpd.testing import BrokerProcess  # only when we start it: --amqpd-url works without the package

    with BrokerProcess(extra_args=args.amqpd_arg) as broker:
        assert broker.proc is not None
        yield Target("amqpd", broker.url, broker.proc.pid)


def server_version(url: str) -> str:
    conn = RawConnection(url).connect()
    try:
        props = conn.server_properties
        return f"{props.get('product', '?')} {props.get('version', '?')}"
    finally:
        conn.close()


def run_one(scenario: str, target: Target, opts: Options, round_no: int) -> dict[str, Any]:
    started = time.monotonic()
    record: dict[str, Any] = {"round": round_no, "scenario": scenario, "target": target.name}
    try:
        record["metrics"], record["error"] = SCENARIOS[scenario](target, opts), None
    except Exception as exc:  # one failing scenario (e.g. amqpd lacking a feature) must not end the whole run
        record["metrics"], record["error"] = None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    record["seconds"] = round(time.monotonic() - started, 1)
    status = "ok" if record["metrics"] else "FAILED: " + record["error"].splitlines()[0]
    print(f"  round {round_no + 1} {scenario} {target.name}: {status} ({record['seconds']} s)", flush=True)
    return record


def run_all(targets: list[Target], args: argparse.Namespace) -> list[dict[str, Any]]:
    opts = Options(duration=args.duration, warmup=args.warmup, backlog=args.backlog)
    runs = []
    for round_no in range(args.rounds):
        for scenario in args.scenarios:
            # Alternate which broker goes first so drift (page cache, other load) doesn't favour one side.
            order = targets if round_no % 2 == 0 else targets[::-1]
            runs += [run_one(scenario, t, opts, round_no) for t in order]
    return runs


def meta(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    info: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "python": platform.python_version(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    for t in targets:
        info[t.name] = {"url": t.url, "pid": t.pid, "server": server_version(t.url)}
    return info


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with contextlib.ExitStack() as stack:
        targets = []
        for name in args.targets:
            if name == "rabbitmq":
                targets.append(
                    Target("rabbitmq", args.rabbitmq_url, procstat.broker_pid(args.rabbitmq_url, "beam.smp"))
                )
            else:
                targets.append(stack.enter_context(amqpd_target(args)))
        missing_pid = [t.name for t in targets if t.pid is None]
        if missing_pid:
            print(f"warning: no process found for {missing_pid}: broker CPU/RSS will read 0", file=sys.stderr)
        info = meta(targets, args)
        print(f"running {', '.join(args.scenarios)} × {args.rounds} rounds on {', '.join(args.targets)}")
        runs = run_all(targets, args)
    info["loadavg_after"] = os.getloadavg()
    return finish(runs, info, args)


def finish(runs: list[dict[str, Any]], info: dict[str, Any], args: argparse.Namespace) -> int:
    meds = report.medians(runs, args.targets)
    errors = {(r["scenario"], r["target"]): r["error"] for r in runs if r["error"]}
    print()
    print(report.table(meds, args.targets, errors))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = args.out / f"bench-{stamp}.json"
    report.write_json(json_path, {"meta": info, "medians": meds, "runs": runs})
    print(f"\nwrote {json_path}")
    if not args.no_chart:
        png = args.out / f"bench-{stamp}.png"
        title = f"amqpd vs RabbitMQ — medians of {args.rounds} rounds, {info['started']}"
        try:
            report.write_chart(png, meds, args.targets, title)
            print(f"wrote {png}")
        except ModuleNotFoundError:  # the chart is the optional `bench` extra; the table and JSON are the result
            print("no chart: matplotlib is not installed (pip install -e '.[bench]')")
    return 1 if errors and not any(r["metrics"] for r in runs) else 0
