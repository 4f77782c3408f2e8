"""amqpd as a subprocess on ephemeral ports, stopped when the block ends.

with BrokerProcess() as broker:
    pika.BlockingConnection(pika.URLParameters(broker.url))
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

_LISTENING = re.compile(rb"amqpd listening on (\S+):(\d+)")
# management / prometheus, or management-tls / prometheus-tls for their HTTPS listeners
_HTTP_LISTENING = re.compile(rb"amqpd (management|prometheus)( TLS)? listening on (\S+):(\d+)")
_TLS_LISTENING = re.compile(rb"amqpd TLS listening on (\S+):(\d+)")  # printed before _LISTENING
_LOGGED_ERROR = re.compile(r" (?:ERROR|CRITICAL) [\w.]+: (.*)")  # amqpd's log format: time, level, logger: message


def _cached_bytecode(env: dict[str, str]) -> dict[str, str]:
    """Where PYTHONDONTWRITEBYTECODE is set (a read-only or kept-clean source tree), the broker's Python would
    compile amqpd again at every start, most of a start's CPU time: its bytecode goes to a cache directory of
    amqpd's own instead ($XDG_CACHE_HOME/amqpd/pycache, PYTHONPYCACHEPREFIX), never beside the sources. A
    PYTHONPYCACHEPREFIX already set is left as it is."""
    if not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return env
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amqpd" / "pycache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable cache: compile at every start, as asked
        return env
    env.pop("PYTHONDONTWRITEBYTECODE")
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


class BrokerProcess:
    """An amqpd subprocess; `url` is its AMQP URL once started. With management=True its management API and
    Prometheus listener run on ephemeral ports (`mgmt_url`, `metrics_url`); otherwise they are off."""

    def __init__(
        self,
        data_dir: str | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        hosts: tuple[str, ...] = ("127.0.0.1",),
        management: bool = False,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        """hosts: the --host flags (the first one is the one `url` names); () leaves amqpd's default.
        preexec_fn: run in the child before amqpd starts (to set a resource limit, say)."""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="amqpd-")
            data_dir = self._tmp.name
        self.data_dir = data_dir
        self.extra_args = extra_args or []
        self.env = env
        self.hosts = hosts
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.tls_port = 0  # the amqps port, when the broker was configured with a certificate
        self.stderr_lines: list[str] = []
        self.management = management
        self.preexec_fn = preexec_fn
        self.http_ports: dict[str, int] = {}
        self._same_ports = False  # restart(): listen where the last run did, so that clients' URLs still work
        self._listening = threading.Event()  # set by launch()'s stdout reader on the AMQP listening line
        self._settled = threading.Event()  # set by that reader on the listening line, or when stdout ends (exit)
        self._stderr_pump: threading.Thread | None = None

    @property
    def mgmt_url(self) -> str:
        return f"http://{self.host}:{self.http_ports['management']}"

    @property
    def management_url(self) -> str:
        return self.mgmt_url

    @property
    def mgmt_tls_url(self) -> str:
        """The management API over HTTPS, when the broker was configured with mgmt_tls_* settings."""
        return f"https://{self.host}:{self.http_ports['management-tls']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.http_ports['prometheus']}"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> None:
        """Start the subprocess without waiting for it: it boots while the caller does something else, and
        `wait_started` then waits for its listening line."""
        same = self._same_ports
        cmd = [
            sys.executable,
            "-m",
            "amqpd",
            *(f"--host={h}" for h in self.hosts),
            "--port",
            str(self.port if same else 0),
            "--data-dir",
            self.data_dir,
        ]
        for flag, kind in (("--management-port", "management"), ("--prometheus-port", "prometheus")):
            # never the default ports: tests run beside a RabbitMQ
            cmd += [flag, str(self.http_ports[kind] if same and kind in self.http_ports else 0)]
            if not self.management:
                cmd[-1] = "off"
        env = _cached_bytecode(dict(os.environ, **(self.env or {})))
        if same and self.tls_port:
            env["AMQPD_TLS_PORT"] = str(self.tls_port)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            cmd + self.extra_args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(Path(__file__).resolve().parents[2]),  # the directory holding the amqpd package
            preexec_fn=self.preexec_fn,
        )
        self._stderr_pump = threading.Thread(target=self._pump_stderr, daemon=True)
        self._stderr_pump.start()
        found = self._listening = threading.Event()
        settled = self._settled = threading.Event()

        def read_stdout() -> None:
            assert self.proc and self.proc.stdout
            for line in self.proc.stdout:
                http = _HTTP_LISTENING.search(line)
                if http:
                    kind = http.group(1).decode() + ("-tls" if http.group(2) else "")
                    self.http_ports[kind] = int(http.group(4))
                tls = _TLS_LISTENING.search(line)
                if tls:
                    self.tls_port = int(tls.group(2))
                m = _LISTENING.search(line)
                if m and not found.is_set():
                    self.host, self.port = m.group(1).decode(), int(m.group(2))
                    found.set()
                    settled.set()
            settled.set()  # stdout closed: the broker has exited (before listening, if `found` is not set)

        threading.Thread(target=read_stdout, daemon=True).start()

    def wait_started(self, timeout: float = 30.0) -> BrokerProcess:
        """Wait (on an event set by the line reader, no polling) until the launched broker listens for AMQP.
        RuntimeError with the broker's reason in one line as soon as it exits without listening."""
        self._settled.wait(timeout)
        if self._listening.is_set():
            return self
        if self._settled.is_set():  # its stdout closed: it exited, its last words are on stderr, read to the end
            try:
                code = self.proc.wait(10) if self.proc else None
            except subprocess.TimeoutExpired:  # it closed its stdout but runs on: stop() below ends it
                code = None
            if self._stderr_pump is not None:
                self._stderr_pump.join(10)
            self.stop()
            raise RuntimeError(f"amqpd did not start: {self.failure()} (exit status {code})")
        self.stop()
        raise RuntimeError(f"amqpd did not start: not listening after {timeout:g} s; its last line: {self.failure()}")

    def failure(self) -> str:
        """Why the broker did not start, in one line: the last error it logged, else its last line of output."""
        errors = [m.group(1) for m in map(_LOGGED_ERROR.search, self.stderr_lines) if m]
        line = (errors or self.stderr_lines or ["it exited without a word"])[-1]
        return line.removeprefix("amqpd: ")  # a usage or configuration error names the program

    def _pump_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode(errors="replace").rstrip())
            del self.stderr_lines[:-2000]

    def restart(self, kill: bool = False, timeout: float = 30.0) -> BrokerProcess:
        """Stop (SIGTERM; with kill=True SIGKILL, a crash) and start again on the same data dir and ports."""
        if kill:
            self.kill()
        else:
            self.stop()
        self._same_ports = True
        try:
            return self.start(timeout)
        finally:
            self._same_ports = False

    def kill(self) -> None:
        """SIGKILL: a crash, for recovery tests."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; returns the exit code."""
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def close(self) -> None:
        self.stop()
        if self._tmp:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
