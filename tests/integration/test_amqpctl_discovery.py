"""amqpctl finds its own broker: amqpd writes a runtime file in its data dir (pid and listener URLs), removed
at a clean stop; amqpctl without --url reads it, and refuses (69, one line) to act on a management API that is
not amqpd's, such as the reference RabbitMQ's on 15672, unless --url names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from amqpd.testing import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "amqpd.runtime.json"
EX_UNAVAILABLE = 69


def amqpctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AMQPCTL_", "AMQPD_"))}
    return subprocess.run(
        [sys.executable, "-m", "amqpd.mgmt.amqpctl", *args],
        env={**clean, **(env or {}), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_runtime_file_names_the_pid_and_listeners_and_goes_at_a_clean_stop(tmp_path: Path) -> None:
    broker = BrokerProcess(data_dir=str(tmp_path), management=True).start()
    try:
        info = json.loads((tmp_path / RUNTIME).read_text())
        assert broker.proc is not None and info["pid"] == broker.proc.pid
        assert info["amqp_url"] == f"amqp://127.0.0.1:{broker.port}"
        assert info["management_url"] == broker.mgmt_url
        assert info["metrics_url"] == broker.metrics_url
    finally:
        assert broker.stop() == 0
        broker.close()
    assert not (tmp_path / RUNTIME).exists()


@pytest.mark.parametrize("how", ["flag", "env", "default"])
def test_amqpctl_without_url_finds_the_broker_of_a_data_dir(how: str, tmp_path: Path) -> None:
    data = tmp_path / "amqpd"  # the default data dir when XDG_DATA_HOME is tmp_path
    with BrokerProcess(data_dir=str(data), management=True):
        args, env = {
            "flag": (["--data-dir", str(data)], {}),
            "env": ([], {"AMQPD_DATA_DIR": str(data)}),
            "default": ([], {"XDG_DATA_HOME": str(tmp_path)}),
        }[how]
        result = amqpctl(*args, "status", env=env)
        assert result.returncode == 0, result.stderr
        assert "Product: amqpd" in result.stdout


def test_await_startup_waits_for_the_broker_of_a_data_dir(tmp_path: Path) -> None:
    """As a container's health check or a start script would: amqpctl is started first."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AMQPCTL_", "AMQPD_"))}
    waiter = subprocess.Popen(
        [sys.executable, "-m", "amqpd.mgmt.amqpctl", "--data-dir", str(tmp_path), "-t", "60", "await_startup"],
        env={**clean, "PYTHONPATH": str(ROOT)},
    )
    try:
        with BrokerProcess(data_dir=str(tmp_path), management=True):
            assert waiter.wait(60) == 0
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()


def test_a_broker_without_management_is_one_line_and_69(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=str(tmp_path)):
        result = amqpctl("--data-dir", str(tmp_path), "list_queues")
    assert result.returncode == EX_UNAVAILABLE
    assert result.stderr.count("\n") == 1
    assert "serves no management API" in result.stderr


def test_a_runtime_file_left_by_a_dead_broker_is_ignored(tmp_path: Path) -> None:
    broker = BrokerProcess(data_dir=str(tmp_path), management=True).start()
    broker.kill()  # no clean stop: the file stays, naming a pid that is gone
    assert (tmp_path / RUNTIME).exists()
    result = amqpctl("--data-dir", str(tmp_path), "status")
    assert result.returncode == EX_UNAVAILABLE  # RabbitMQ's port, then: refused as not amqpd, or unreachable
    assert "http://127.0.0.1:15672" in result.stderr and broker.mgmt_url not in result.stderr
    broker.close()


@pytest.fixture
def reference_management() -> str:
    """The reference RabbitMQ's management API on its default port (rabbitmq-plugins enable
    rabbitmq_management)."""
    url = "http://127.0.0.1:15672"
    try:
        overview = httpx.get(url + "/api/overview", auth=("guest", "guest"), timeout=5).json()
    except (httpx.HTTPError, ValueError):
        pytest.fail("the reference RabbitMQ's management plugin is not answering on 15672")
    assert overview.get("product_name") == "RabbitMQ"
    return url


def test_amqpctl_refuses_rabbitmqs_api_unless_named(reference_management: str, tmp_path: Path) -> None:
    refused = amqpctl("list_queues", env={"AMQPD_DATA_DIR": str(tmp_path)})
    assert refused.returncode == EX_UNAVAILABLE
    assert refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"Error: the management API at {reference_management} is RabbitMQ 3.")
    assert line.endswith(
        "not amqpd (no running amqpd's runtime file in " + f"{tmp_path}); name it with --url to act on it anyway"
    )
    named = amqpctl("--url", reference_management, "status", env={"AMQPD_DATA_DIR": str(tmp_path)})
    assert named.returncode == 0, named.stderr
    assert "Product: RabbitMQ" in named.stdout
