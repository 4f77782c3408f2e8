"""A plain install works: the wheel, installed without extras into a new venv, gives an `amqpd` that serves
and an `amqpctl` that talks to it (every import either needs is a base dependency). Slow: it builds the wheel
and fetches the dependencies from PyPI, once per test session."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def clean_env() -> dict[str, str]:
    """No PYTHONPATH (it would import the source tree instead of the installed wheel) and no AMQPD_/AMQPCTL_
    settings from the caller."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("AMQPD_", "AMQPCTL_"))}


def run(*cmd: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], env=clean_env(), cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the wheel and its base dependencies only; its bin/ directory."""
    base = tmp_path_factory.mktemp("packaging")
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", base / "dist", ROOT, cwd=base)
    assert built.returncode == 0, built.stderr
    (wheel,) = (base / "dist").glob("amqpd-*.whl")
    env = base / "venv"
    python = env / "bin" / "python"
    if run(sys.executable, "-m", "venv", env).returncode == 0:
        pip: list[str | Path] = [python, "-m", "pip"]
    else:  # Debian's python without python3-venv's ensurepip: a bare venv, filled by this interpreter's pip
        made = run(sys.executable, "-m", "venv", "--clear", "--without-pip", env)
        assert made.returncode == 0, made.stderr
        pip = [sys.executable, "-m", "pip", "--python", python]
    installed = run(*pip, "install", "--disable-pip-version-check", wheel, cwd=base)
    assert installed.returncode == 0, installed.stderr
    return env / "bin"


@pytest.fixture
def installed_broker(venv: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The venv's amqpd on ephemeral ports: (its management URL, its data dir)."""
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [venv / "amqpd", "--port", "0", "--data-dir", data, "--management-port", "0", "--prometheus-port", "off"],
        env=clean_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"amqpd management listening on (\S+)", line)
            if m:
                found["mgmt"] = f"http://{m[1]}"
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(60) and "mgmt" in found, "the installed amqpd did not start"
        yield found["mgmt"], data
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_the_installed_console_scripts_say_their_version(venv: Path) -> None:
    from amqpd import __version__

    for script in ("amqpd", "amqpctl"):
        out = run(venv / script, "--version")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"{script} {__version__}"


def test_the_installed_amqpctl_operates_the_installed_amqpd(venv: Path, installed_broker: tuple[str, Path]) -> None:
    url, _data = installed_broker
    status = run(venv / "amqpctl", "--url", url, "status")
    assert status.returncode == 0, status.stderr
    assert "Product: amqpd" in status.stdout
    queues = run(venv / "amqpctl", "--url", url, "list_queues")
    assert queues.returncode == 0, queues.stderr
    exported = run(venv / "amqpctl", "--url", url, "export_definitions", "-")
    assert exported.returncode == 0, exported.stderr
    assert '"users"' in exported.stdout and '"vhosts"' in exported.stdout


def test_the_installed_amqpctl_finds_its_broker_by_data_dir(venv: Path, installed_broker: tuple[str, Path]) -> None:
    _url, data = installed_broker
    status = run(venv / "amqpctl", "--data-dir", data, "status")
    assert status.returncode == 0, status.stderr
    assert "Product: amqpd" in status.stdout
