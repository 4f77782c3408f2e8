"""A Spark standalone cluster on this machine, started from pyspark's own bin/spark-class: a master and two
workers, each a JVM of its own on ephemeral ports bound to 127.0.0.1. Executors are started by the workers (so
they are in another process tree than the driver) and run this checkout's amqpd: PYTHONPATH points at it.
Used by tests/spark and bench.spark_latency; needs the `spark` extra and Java 17.

    with StandaloneCluster(work_dir) as cluster:
        SparkSession.builder.config(map=cluster.conf).getOrCreate()

Every process it starts is ended by pid when it stops, with the executors the workers started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark

import amqpd

SPARK_HOME = Path(pyspark.__file__).parent
STARTUP_S = 90.0  # a JVM's start on a busy 2-core machine
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = re.compile(r"Successfully registered with master")
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def _env(root: Path, logs: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",  # every listener on loopback
        SPARK_LOG_DIR=str(logs),
        SPARK_DAEMON_MEMORY="256m",
        # the master's REST submission server listens on a fixed port (6066) unless told not to
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    return env


def children(pid: int) -> list[int]:
    """The direct children of a process, from /proc (a JVM starts them from any of its threads, so
    /proc/PID/task/*/children would need every thread's: the parents of all processes are read instead)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent(int(entry.name)) == pid:
                    out.append(int(entry.name))
            except (OSError, LookupError):
                pass  # gone meanwhile
    return out


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    for child in children(pid):
        out += [child, *descendants(child)]
    return out


def parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise LookupError(pid)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class StandaloneCluster:
    """`master_url` once started; `conf` is what a driver needs to run this checkout's amqpd on the executors."""

    def __init__(self, work: Path, workers: int = 2, root: Path | None = None) -> None:
        # the checkout or site-packages directory amqpd is imported from: what the executors import
        root = root or Path(amqpd.__file__).resolve().parents[1]
        self.root = root
        self.work = work
        self.worker_count = workers
        self.env = _env(root, work / "logs")
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.master_url = ""

    def _launch(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:  # spark-class execs java: the pid is the JVM's
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.work,
            )
        return proc, log

    def _wait_for(self, proc: subprocess.Popen[bytes], log: Path, pattern: re.Pattern[str]) -> re.Match[str]:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            match = pattern.search(log.read_text(errors="replace"))
            if match:
                return match
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{log.name}: no {pattern.pattern!r} within {STARTUP_S} s:\n{tail}")

    def start(self) -> StandaloneCluster:
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        master_class = "org.apache.spark.deploy.master.Master"
        args = ("--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        self.master, log = self._launch("master", master_class, *args)
        self.master_url = self._wait_for(self.master, log, _MASTER_URL).group(1)
        logs = []
        for i in range(self.worker_count):
            work_dir = self.work / f"worker{i}"
            work_dir.mkdir(exist_ok=True)
            proc, log = self._launch(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
                *("--cores", "1", "--memory", "1g", "--work-dir", str(work_dir)),
                self.master_url,
            )
            self.workers.append(proc)
            logs.append((proc, log))
        for proc, log in logs:
            self._wait_for(proc, log, _REGISTERED)
        return self

    @property
    def conf(self) -> dict[str, str]:
        """A driver's settings: one executor of one core per worker, both registered before a job runs."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.cores.max": str(self.worker_count),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "90s",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
            # a Python worker's start on a loaded machine can take longer than the default 15 s to connect back
            "spark.python.authenticate.socketTimeout": "300s",
            "spark.executorEnv.PYTHONPATH": self.env["PYTHONPATH"],
        }

    def executors(self) -> list[int]:
        """The pids of the executor JVMs the workers are running now."""
        return [pid for w in self.workers for pid in children(w.pid) if EXECUTOR_CLASS in cmdline(pid)]

    def executor_of(self, pid: int) -> int:
        """The executor JVM a process (a Python worker, say) runs under: an error unless it is one of ours."""
        ours = set(self.executors())
        while pid > 1:
            if pid in ours:
                return pid
            pid = parent(pid)
        raise LookupError("not under one of this cluster's executors")

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Workers first (each ends its executors), then the master; what is left after a bound is killed."""
        procs = [*self.workers, *([self.master] if self.master else [])]
        left = [(pid, cmdline(pid)) for p in procs for pid in descendants(p.pid)]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid, line in left:  # an executor its worker did not end (the same process: its pid not reused)
            if line and cmdline(pid) == line:
                os.kill(pid, signal.SIGKILL)
