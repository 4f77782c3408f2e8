"""Finds the snippets in the README and docs/*.md and runs them, as docs/development.md ("Snippets in the
docs") describes: each page gets a working directory and an amqpd on ephemeral ports, the default ports in a
snippet are rewritten to the live ones, and the snippets of a page run in order."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Fences that run, and the interpreter each one runs with.
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell"}
# Fences that would read as commands but cannot be run as written: a page must say bash or text instead.
REFUSED = {"console", "shell-session", "sh-session", "zsh"}
# The ports a snippet may name, as RabbitMQ's and amqpd's defaults (5672 amqp, 5671 amqps, 15672 management,
# 15671 its HTTPS, 15692 Prometheus, 15691 its HTTPS) and the "beside a RabbitMQ" set one above them.
DEFAULT_PORTS = (5671, 5672, 5673, 15671, 15672, 15673, 15691, 15692, 15693)
_PORT = re.compile(r"(?<![\w.])(" + "|".join(str(p) for p in DEFAULT_PORTS) + r")(?![\w])")
_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_PIP = re.compile(r"(?:\bpython3?\s+-m\s+)?\bpip3?\s+install\b([^\n;&|#]*)")
DEFAULT_TIMEOUT = 120.0
_LISTENING = b"amqpd listening on"
_RUNS_AMQPD = re.compile(r"(?:^|[\s;&|(])(?:python3? -m )?amqpd(?:\s|$)", re.MULTILINE)


class SnippetError(Exception):
    """A page that does not follow the convention, found before anything runs."""


@dataclass
class Snippet:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page.name
        return f"{page}:{self.line}"

    @property
    def runs(self) -> bool:
        return "file" in self.markers or self.lang in PYTHON | SHELL


def parse_markers(text: str) -> dict[str, str]:
    """`background, timeout 120` -> {"background": "", "timeout": "120"}."""
    markers = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition(" ")
        if key not in ("background", "syntax", "timeout", "file"):
            raise SnippetError(f"unknown doc-test marker {key!r}")
        markers[key] = value.strip()
    return markers


def parse_page(page: Path) -> list[Snippet]:
    """Every fenced block of a page, with the markers in the comment on the line before its fence."""
    lines = page.read_text().splitlines()
    snippets: list[Snippet] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start, lang = i, fence.group(1).lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise SnippetError(f"{page.name}:{start + 1}: a fence that is never closed")
        marker = _MARKER.match(lines[start - 1]) if start else None
        markers = parse_markers(marker.group(1)) if marker else {}
        where = f"{page.name}:{start + 1}"
        if lang in REFUSED:
            raise SnippetError(f"{where}: ```{lang} is not run; write the commands as ```bash (or ```text)")
        if markers and "file" not in markers and lang not in PYTHON | SHELL:
            raise SnippetError(f"{where}: a doc-test marker on a ```{lang} block that does not run")
        snippets.append(Snippet(page, start + 1, lang, "\n".join(lines[start + 1 : end]) + "\n", markers))
        i = end + 1
    return snippets


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rewrite_ports(code: str, ports: dict[int, int]) -> str:
    return _PORT.sub(lambda m: str(ports[int(m.group(1))]), code)


def project_extras() -> set[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(data["project"].get("optional-dependencies", {}))


def check_pip_install(args: str) -> None:
    """What a `pip install` line names must exist: this project's extras, or packages installed here."""
    for word in shlex.split(args, comments=True):
        if word.startswith("-"):
            continue
        name, _, extras = word.partition("[")
        wanted = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
        if name in (".", "./", "amqpd"):
            missing = wanted - project_extras()
            if missing:
                raise AssertionError(f"pip install {word}: pyproject.toml has no extra {sorted(missing)}")
            continue
        package = re.split(r"[<>=!~ ]", name)[0]
        try:
            metadata.distribution(package)
        except metadata.PackageNotFoundError:
            raise AssertionError(f"pip install {word}: {package} is not installed where the docs are tested") from None


def without_pip_installs(code: str) -> str:
    """Each `pip install …` checked, then replaced by `:` so that the test environment stays as it is."""

    def replace(match: re.Match[str]) -> str:
        check_pip_install(match.group(1))
        return ": "

    return _PIP.sub(replace, code)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


# Loaded into every Python process a snippet starts (amqpctl included): a connection to a default port that
# was not rewritten would otherwise reach the reference RabbitMQ and pass for amqpd.
_GUARD = """
import os, socket
_guarded = {int(p) for p in os.environ.get("DOC_TEST_GUARDED_PORTS", "").split(",") if p}
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _check(address):
    if isinstance(address, tuple) and len(address) >= 2 and address[1] in _guarded:
        if str(address[0]) in ("127.0.0.1", "::1", "localhost", "::ffff:127.0.0.1"):
            raise ConnectionRefusedError(
                f"doc-test: the snippet reached default port {address[1]} without naming it; "
                "write the port in the snippet so that the test can point it at its amqpd"
            )


def connect(self, address):
    _check(address)
    return _connect(self, address)


def connect_ex(self, address):
    _check(address)
    return _connect_ex(self, address)


socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
"""


class PageRun:
    """One page's working directory, ports, broker and background processes; snippets run in page order."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page = page
        self.workdir = workdir
        self.ports = {p: free_port() for p in DEFAULT_PORTS}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.failed: str | None = None
        self.done: set[int] = set()
        for entry in REPO.iterdir():  # a checkout to the snippets; what they write stays out of the repository
            if entry.name not in (".git", ".doc-test") and not (workdir / entry.name).exists():
                (workdir / entry.name).symlink_to(entry)
        self.scratch = workdir / ".doc-test"
        (self.scratch / "guard").mkdir(parents=True)
        (self.scratch / "guard" / "sitecustomize.py").write_text(_GUARD)
        self.env = self._environment()

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        python_path = [str(self.scratch / "guard"), str(REPO), env.get("PYTHONPATH", "")]
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, python_path)),
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            PYTHONUNBUFFERED="1",
            XDG_DATA_HOME=str(self.workdir / "xdg-data"),  # amqpd's default data dir, inside the page's directory
            AMQPD_PORT=str(self.ports[5672]),
            AMQPD_MGMT_PORT=str(self.ports[15672]),
            AMQPD_PROMETHEUS_PORT=str(self.ports[15692]),
            AMQPD_TLS_PORT=str(self.ports[5671]),
            AMQPCTL_URL=f"http://127.0.0.1:{self.ports[15672]}",
            DOC_TEST_GUARDED_PORTS=",".join(str(p) for p in DEFAULT_PORTS),
        )
        env.pop("AMQPD_TEST_TARGET_URL", None)
        return env

    def run(self, snippet: Snippet) -> None:
        if self.failed:
            raise AssertionError(f"not run: an earlier snippet of the page failed ({self.failed})")
        try:
            self._run(snippet)
        except BaseException:
            self.failed = snippet.name
            raise
        finally:
            self.done.add(snippet.line)

    def _run(self, snippet: Snippet) -> None:
        code = rewrite_ports(snippet.code, self.ports)
        if "file" in snippet.markers:
            (self.workdir / snippet.markers["file"]).write_text(code)
            return
        is_python = snippet.lang in PYTHON
        path = self.scratch / f"line{snippet.line}.{'py' if is_python else 'sh'}"
        path.write_text(code if is_python else without_pip_installs(code))
        command = [sys.executable, str(path)] if is_python else ["bash", "-euo", "pipefail", str(path)]
        if "syntax" in snippet.markers:
            check = [sys.executable, "-m", "py_compile", str(path)] if is_python else ["bash", "-n", str(path)]
            self._foreground(snippet, check)
            return
        if "background" in snippet.markers:
            self.close()  # as a reader stops one amqpd before starting the next: one data dir, one set of ports
            self._background(snippet, command, code)
            return
        self._ensure_broker()
        self._foreground(snippet, command)

    def _timeout(self, snippet: Snippet) -> float:
        return float(snippet.markers.get("timeout") or DEFAULT_TIMEOUT)

    def _foreground(self, snippet: Snippet, command: list[str]) -> None:
        """Runs to the end within its timeout; whatever it left running in its process group is stopped."""
        proc = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=self._timeout(snippet))
        except subprocess.TimeoutExpired:
            _stop_group(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError(f"{snippet.name}: still running after {self._timeout(snippet):.0f} s") from None
        finally:
            _stop_group(proc.pid, signal.SIGTERM)
        if proc.returncode != 0:
            raise AssertionError(
                f"{snippet.name}: exit status {proc.returncode}\n--- stdout\n{stdout.decode(errors='replace')}"
                f"--- stderr\n{stderr.decode(errors='replace')}"
            )

    def _background(self, snippet: Snippet, command: list[str], code: str) -> None:
        """Started and left running until the page ends or the next background snippet starts; ready once
        every port it names (else the page's AMQP port) accepts connections."""
        log = self.scratch / f"line{snippet.line}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, cwd=self.workdir, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(proc)
        named = [live for default, live in self.ports.items() if str(live) in code and default != 5671]
        runs_amqpd = bool(_RUNS_AMQPD.search(code))
        self._wait_ready(named or [self.ports[5672]], proc, log, self._timeout(snippet), runs_amqpd)

    def _wait_ready(
        self, ports: list[int], proc: subprocess.Popen[bytes], log: Path, timeout: float, amqpd: bool
    ) -> None:
        """Until every port accepts connections and, for a command that runs amqpd, amqpd printed "amqpd
        listening on" (it binds its AMQP port before its TLS and HTTP listeners, and prints once all are up)."""
        deadline = time.monotonic() + timeout
        waiting = list(ports)
        while waiting or (amqpd and _LISTENING not in log.read_bytes()):
            if proc.poll() is not None:
                raise AssertionError(f"exited with status {proc.returncode} before listening:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready after {timeout:.0f} s (ports {waiting}):\n{log.read_text()}")
            waiting = [p for p in waiting if not listening(p)]
            time.sleep(0.05)

    def _ensure_broker(self) -> None:
        """The page's amqpd, unless a background snippet already started one on the page's ports."""
        if listening(self.ports[5672]):
            return
        log = self.scratch / "amqpd.log"
        data_dir = self.scratch / "amqpd-data"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "amqpd", "--data-dir", str(data_dir)],
                cwd=self.workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(proc)
        self._wait_ready([self.ports[5672], self.ports[15672], self.ports[15692]], proc, log, 30, amqpd=True)

    def close(self) -> None:
        """SIGTERM to each process group started here, then SIGKILL to what is left after 15 s. Waits for the
        whole group, not only its leader: a background `bash` running amqpd exits at once, while amqpd still
        holds its data dir until it has stopped, and the next amqpd on the page needs that data dir."""
        for proc in reversed(self.processes):
            _stop_group(proc.pid, signal.SIGTERM)
            if not _group_gone(proc, 15):
                _stop_group(proc.pid, signal.SIGKILL)
                _group_gone(proc, 10)
        self.processes.clear()


def _group_gone(leader: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether every process of the leader's group has exited within the timeout (the leader reaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if leader.poll() is not None:
            try:
                os.killpg(leader.pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


def _stop_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
