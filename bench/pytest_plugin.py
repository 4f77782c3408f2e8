"""The amqpd pytest plugin against the usual ways of testing with RabbitMQ: `python -m bench.pytest_plugin`.

Options: `--tests N` (suite size, default 1000), `--slow-tests N` (size of the pytest-rabbitmq run with its own
rabbitmqctl clean-up, default 10, extrapolated to N), `--rounds R` (start-up samples, default 5),
`--rabbitmq-url URL` (the shared RabbitMQ; its management API on port 15672).

1. Session start to first connection: from pytest's `pytest_sessionstart` to the first test's connection being
   open, for the session broker in a thread and in a subprocess (and from launching pytest, for scale).
2. Per-test vhost set-up and tear-down: `IsolatedVhost` create + remove, what `amqp_url` adds to each test.
3. A suite of N tests that each declare a queue, publish 10 messages and consume them, run by pytest in a
   subprocess (wall time, pytest's start included) on:
   - the amqpd plugin (`amqp_url`, broker in a thread, the default; and in a subprocess),
   - pytest-rabbitmq (PyPI), which starts its own rabbitmq-server node on its own ports: its `rabbitmq` fixture
     as shipped (clean-up through rabbitmqctl, two Erlang VM starts per test: run on --slow-tests and
     extrapolated), and with the faster clean-up its docs suggest (the test's own queue deleted over AMQP),
   - one shared RabbitMQ (the reference broker) with per-test clean-up (the test's queue deleted after it),
   - the amqpd plugin pointed at that RabbitMQ (`--amqpd-url`: a vhost per test through its management API).
pytest-rabbitmq's node is never the reference one: its own node name, AMQP and distribution ports, data dir.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from importlib.metadata import entry_points
from pathlib import Path

from amqpd.testing import BrokerProcess, EmbeddedBroker, IsolatedVhost, ManagementClient
from amqpd.testing.vhosts import DirectAdmin
from bench.procstat import cpu_seconds

PLUGIN = "amqpd.testing.pytest_plugin"
ROOT = Path(__file__).resolve().parent.parent

SUITE = """
import pika, pytest

@pytest.mark.parametrize("n", range({tests}))
def test_declare_publish_consume(n, broker_url, queue_name):
    connection = pika.BlockingConnection(pika.URLParameters(broker_url))
    channel = connection.channel()
    channel.queue_declare(queue_name)
    for i in range(10):
        channel.basic_publish("", queue_name, b"message %d" % i)
    got = []
    for method, _properties, body in channel.consume(queue_name, inactivity_timeout=10):
        assert method is not None, "a message did not arrive"
        channel.basic_ack(method.delivery_tag)
        got.append(body)
        if len(got) == 10:
            break
    channel.cancel()
    assert got == [b"message %d" % i for i in range(10)]
    connection.close()
"""

QUEUE = """
import pytest

@pytest.fixture
def queue_name():
    return "jobs"
"""

CONFTESTS = {
    "amqpd plugin": """
@pytest.fixture
def broker_url(amqp_url):
    return amqp_url
""",
    "pytest-rabbitmq (rabbitmqctl clean-up)": """
@pytest.fixture
def broker_url(rabbitmq, rabbitmq_proc):
    return f"amqp://guest:guest@{rabbitmq_proc.host}:{rabbitmq_proc.port}/%2F"
""",
    "pytest-rabbitmq (queue deleted over AMQP)": """
from pytest_rabbitmq import factories

def delete_jobs(process, connection):
    connection.channel().queue_delete("jobs")

rabbitmq_fast = factories.rabbitmq("rabbitmq_proc", teardown=delete_jobs)

@pytest.fixture
def broker_url(rabbitmq_fast, rabbitmq_proc):
    return f"amqp://guest:guest@{rabbitmq_proc.host}:{rabbitmq_proc.port}/%2F"
""",
    "shared RabbitMQ, queue deleted after each test": """
import pika, uuid

@pytest.fixture
def queue_name():
    return f"plugin-bench-{{uuid.uuid4().hex[:12]}}"

@pytest.fixture
def broker_url(queue_name):
    yield {rabbitmq_url!r}
    connection = pika.BlockingConnection(pika.URLParameters({rabbitmq_url!r}))
    connection.channel().queue_delete(queue_name)
    connection.close()
""",
}

SESSION_START = """
import time

def pytest_sessionstart(session):
    session.config._bench_start = (time.perf_counter(), time.process_time())
"""

# CPU time, besides wall time: on a machine that others keep busy, the wall time mostly measures their load. The
# test process's CPU (its broker thread's included), plus a broker subprocess's own until the first connection.
FIRST_CONNECTION = """
import json, os, time, pika
from bench.procstat import cpu_seconds

def test_first_connection(amqp_url, amqpd_broker, pytestconfig):
    pika.BlockingConnection(pika.URLParameters(amqp_url)).close()
    wall, cpu = time.perf_counter(), time.process_time()
    proc = getattr(amqpd_broker, "proc", None)
    broker_cpu = cpu_seconds(proc.pid) if proc is not None else 0.0
    wall_start, cpu_start = pytestconfig._bench_start
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump({"session_start": wall_start, "connected": wall, "cpu": cpu - cpu_start + broker_cpu}, f)
"""


def _plugin_args() -> list[str]:
    registered = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    return [] if registered else ["-p", PLUGIN]


def _pytest(
    directory: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 3600
) -> tuple[float, float]:
    """Runs pytest in `directory`; its wall time and the CPU time of it and its children (a broker subprocess
    included), in seconds. A failed run raises, with pytest's last lines."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(), *args]
    started, cpu = time.perf_counter(), _children_cpu()
    run = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True, timeout=timeout)
    elapsed, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if run.returncode != 0:
        raise RuntimeError(
            f"pytest {' '.join(args)} failed in {directory}:\n" + run.stdout[-3000:] + run.stderr[-2000:]
        )
    return elapsed, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def first_connection(rounds: int) -> dict[str, dict[str, float]]:
    """Each mode with Python's bytecode cache as the environment has it, and with the bytecode of every module
    cached (as for an installed package: pip compiles it), in a cache of its own that a first round fills.
    The modes and caches take turns, round after round, so that a change in the machine's load hits them alike."""
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="plugin-bench-") as tmp:
        directory = Path(tmp)
        (directory / "conftest.py").write_text(SESSION_START)
        (directory / "test_first.py").write_text(FIRST_CONNECTION)
        cached = {"PYTHONPYCACHEPREFIX": str(directory / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}
        runs = [(f"{mode}, {label}", mode, env) for mode in ("process", "thread") for label, env in _caches(cached)]
        for _, mode, env in runs:  # fills the cache
            _pytest(directory, f"--amqpd-mode={mode}", env={"BENCH_OUT": str(directory / "first.json"), **env})
        for _ in range(rounds):
            for label, mode, env in runs:
                out = directory / "first.json"
                started = time.perf_counter()
                _pytest(directory, f"--amqpd-mode={mode}", env={"BENCH_OUT": str(out), **env})
                times = json.loads(out.read_text())
                samples = results.setdefault(label, {"session start ms": [], "CPU ms": [], "pytest launch ms": []})
                samples["session start ms"].append(1000 * (times["connected"] - times["session_start"]))
                samples["CPU ms"].append(1000 * times["cpu"])
                samples["pytest launch ms"].append(1000 * (times["connected"] - started))
    return {label: {k: statistics.median(v) for k, v in samples.items()} for label, samples in results.items()}


def _caches(cached: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    as_is = "bytecode cache as in this environment" + (
        " (PYTHONDONTWRITEBYTECODE: compiled at every start)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""
    )
    return [(as_is, {}), ("bytecode cached", cached)]


def vhost_cost(samples: int, rabbitmq_management: str) -> dict[str, dict[str, float]]:
    """Wall time per vhost, and CPU time per vhost of this process and (for a subprocess) the broker's."""
    results = {}
    with BrokerProcess(extra_args=["--in-memory"], management=True) as process:
        admin = ManagementClient(process.management_url)
        assert process.proc is not None
        results["amqpd (subprocess, HTTP)"] = _vhost_samples(admin, process.url, samples, True, process.proc.pid)
    with EmbeddedBroker() as broker:
        results["amqpd (thread, calling the broker)"] = _vhost_samples(broker, broker.url, samples)
        admin = ManagementClient(broker.management_url)
        results["amqpd (thread, HTTP)"] = _vhost_samples(admin, broker.url, samples, one_request=True)
    rabbit = ManagementClient(rabbitmq_management)
    results["RabbitMQ"] = _vhost_samples(rabbit, "amqp://guest:guest@127.0.0.1:5672/%2F", max(samples // 10, 10))
    return results


def _vhost_samples(
    admin: ManagementClient | DirectAdmin, url: str, samples: int, one_request: bool = False, pid: int = 0
) -> dict[str, float]:
    """What amqp_url adds to a test, as the plugin does it: calling a broker in this process, one definitions
    import on an amqpd subprocess, three PUTs elsewhere."""
    costs = []
    cpu = time.process_time() + (cpu_seconds(pid) if pid else 0.0)
    for _ in range(samples):
        started = time.perf_counter()
        IsolatedVhost(admin, url, "bench", one_request=one_request).create().remove()
        costs.append(1000 * (time.perf_counter() - started))
    cpu = time.process_time() + (cpu_seconds(pid) if pid else 0.0) - cpu
    costs.sort()
    return {
        "median ms": statistics.median(costs),
        "p95 ms": costs[int(len(costs) * 0.95) - 1],
        "CPU ms": 1000 * cpu / samples,  # RabbitMQ's own CPU not included
        "samples": samples,
    }


def suite(
    tests: int, slow_tests: int, rabbitmq_url: str, rabbitmq_management: str, only: str = ""
) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    runs = [
        ("amqpd plugin, broker in a thread (default)", "amqpd plugin", tests, ["--amqpd-mode=thread"]),
        ("amqpd plugin, broker in a subprocess", "amqpd plugin", tests, ["--amqpd-mode=process"]),
        (
            "amqpd plugin --amqpd-url RabbitMQ (vhost per test)",
            "amqpd plugin",
            tests,
            ["--amqpd-url", rabbitmq_url, "--amqpd-management-url", rabbitmq_management],
        ),
        ("pytest-rabbitmq, queue deleted over AMQP", "pytest-rabbitmq (queue deleted over AMQP)", tests, []),
        ("pytest-rabbitmq as shipped (rabbitmqctl clean-up)", "pytest-rabbitmq (rabbitmqctl clean-up)", slow_tests, []),
        ("shared RabbitMQ, queue deleted after each test", "shared RabbitMQ, queue deleted after each test", tests, []),
    ]
    for label, conftest, count, args in runs:
        if only not in label:
            continue
        with tempfile.TemporaryDirectory(prefix="plugin-bench-") as tmp:
            directory = Path(tmp)
            source = QUEUE + textwrap.dedent(CONFTESTS[conftest])
            if "shared" in conftest:
                source = source.format(rabbitmq_url=rabbitmq_url)
            (directory / "conftest.py").write_text(source)
            (directory / "test_suite.py").write_text(SUITE.format(tests=count))
            rabbit_args = ["--rabbitmq-plugindir", str(directory)]
            extra = rabbit_args if "pytest-rabbitmq" in label else ["-p", "no:pytest_rabbitmq"]
            wall, cpu = _pytest(directory, *extra, *args)
            entry = {"tests": count, "wall s": wall, "CPU s": cpu}  # a RabbitMQ's CPU only if pytest started it
            if count != tests:
                entry[f"extrapolated to {tests} s"] = wall / count * tests
            results[label] = entry
            print(f"  {label}: {count} tests in {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pytest_plugin")
    p.add_argument("--tests", type=int, default=1000)
    p.add_argument("--slow-tests", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--vhosts", type=int, default=300, help="vhost set-up/tear-down samples")
    p.add_argument(
        "--rabbitmq-url", default=os.environ.get("AMQPD_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    )
    p.add_argument("--rabbitmq-management-url", default="http://127.0.0.1:15672")
    p.add_argument("--parts", default="first,vhost,suite", help="which measurements, comma-separated")
    p.add_argument("--suite-only", default="", metavar="TEXT", help="only the suite runs whose label has TEXT")
    p.add_argument("--suite-rounds", type=int, default=1, help="run the suite's runs this many times, in turn")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args()
    report: dict[str, object] = {"load before": os.getloadavg(), "run": uuid.uuid4().hex[:8]}
    parts = args.parts.split(",")
    if "first" in parts:
        print("session start to first connection (median of rounds):", flush=True)
        report["first connection"] = first_connection(args.rounds)
        print(json.dumps(report["first connection"], indent=2), flush=True)
    if "vhost" in parts:
        print("per-test vhost set-up + tear-down:", flush=True)
        report["vhost"] = vhost_cost(args.vhosts, args.rabbitmq_management_url)
        print(json.dumps(report["vhost"], indent=2), flush=True)
    if "suite" in parts:
        print(f"suite of {args.tests} tests (declare, publish 10, consume 10):", flush=True)
        report["suite"] = [
            suite(args.tests, args.slow_tests, args.rabbitmq_url, args.rabbitmq_management_url, args.suite_only)
            for _ in range(args.suite_rounds)
        ]
        print(json.dumps(report["suite"], indent=2))
    report["load after"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pytest-plugin-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
