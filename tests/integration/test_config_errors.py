"""Configuration mistakes stop amqpd before anything starts: one line naming where the value came from, the
setting, what was expected and what was given; exit 78 (EX_CONFIG); no traceback; no data dir created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EX_CONFIG = 78


def amqpd(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AMQPD_")}
    return subprocess.run(
        [sys.executable, "-m", "amqpd", "--port", "0", "--management-port", "off", "--prometheus-port", "off", *args],
        env={**clean, **(env or {}), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused configuration prints; asserts the exit code and that nothing else was said."""
    assert result.returncode == EX_CONFIG, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""  # no listener announced
    return lines[0]


FILE_CASES = [
    ('heartbeat = "sixty"\n', 'amqpd.toml:1: heartbeat: expected an integer 0..65535, got "sixty"'),
    ('frame_max = "128k"\n', 'amqpd.toml:1: frame_max: expected an integer 4096..2147483647, got "128k"'),
    ("port = 1\nchannel_max = 70000\n", "amqpd.toml:2: channel_max: expected an integer 1..65535, got 70000"),
    (
        "[amqpd]\nport = 1\nhartbeat = 30\n",
        "amqpd.toml:3: hartbeat: expected a known setting (did you mean heartbeat?)",
    ),
    ('port = 1\nfsync = "sometimes"\n', 'amqpd.toml:2: fsync: expected one of always-batched, none, got "sometimes"'),
    ("tls_verify_peer = 1\n", "amqpd.toml:1: tls_verify_peer: expected true or false, got 1"),
    ('loopback_users = "guest"\n', 'amqpd.toml:1: loopback_users: expected a list of strings, got "guest"'),
    ('port = 1\n[log_levels]\nconection = "debug"\n', "amqpd.toml:2: log_levels: expected a table of keys connection"),
    ("port = \n", 'amqpd.toml:1: expected valid TOML (Invalid value), got "port ="'),
    ("heartbeat = 30\n[amqpd]\nport = 1\n", "amqpd.toml:1: heartbeat: expected every setting inside the [amqpd] table"),
]


@pytest.mark.parametrize(("text", "line"), FILE_CASES)
def test_a_bad_config_file_is_one_line_and_exit_78(text: str, line: str, tmp_path: Path) -> None:
    (tmp_path / "amqpd.toml").write_text(text)
    data = tmp_path / "data"
    out = refused(amqpd("--config", "amqpd.toml", "--data-dir", str(data), cwd=tmp_path))
    assert out.startswith("amqpd: configuration error: ")
    assert line in out
    assert not data.exists()  # nothing half-started


ENV_CASES = [
    ("AMQPD_HEARTBEAT", "sixty", 'AMQPD_HEARTBEAT: heartbeat: expected an integer 0..65535, got "sixty"'),
    ("AMQPD_FRAME_MAX", "128k", 'AMQPD_FRAME_MAX: frame_max: expected an integer 4096..2147483647, got "128k"'),
    ("AMQPD_TLS_VERIFY_PEER", "maybe", 'AMQPD_TLS_VERIFY_PEER: tls_verify_peer: expected true or false, got "maybe"'),
    ("AMQPD_STATS_INTERVAL", "0", 'AMQPD_STATS_INTERVAL: stats_interval: expected a number 0.01..3600, got "0"'),
    ("AMQPD_STATS_INTERVAL", "nan", 'AMQPD_STATS_INTERVAL: stats_interval: expected a number 0.01..3600, got "nan"'),
    ("AMQPD_LOG_LEVELS", "connection", "AMQPD_LOG_LEVELS: log_levels: expected a table of keys connection"),
    ("AMQPD_RETENTION_MAX_AGE_MS", "7w", "AMQPD_RETENTION_MAX_AGE_MS: retention_max_age_ms: expected a duration"),
]


@pytest.mark.parametrize(("name", "value", "line"), ENV_CASES)
def test_an_unusable_environment_value_is_one_line_and_exit_78(
    name: str, value: str, line: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    out = refused(amqpd("--data-dir", str(data), env={name: value}))
    assert line in out
    assert not data.exists()


def test_a_bad_flag_value_names_the_flag(tmp_path: Path) -> None:
    out = refused(amqpd("--data-dir", str(tmp_path / "d"), "--port", "5672x"))
    assert out.endswith('--port: port: expected an integer 0..65535, got "5672x"')


def test_a_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    out = refused(amqpd("--data-dir", str(path)))
    assert out.endswith(f'--data-dir: data_dir: expected a directory amqpd can write, got "{path}" (a file)')
    out = refused(amqpd(env={"AMQPD_DATA_DIR": str(path / "below")}))
    assert f'AMQPD_DATA_DIR: data_dir: expected a directory amqpd can write, got "{path / "below"}"' in out


def test_a_missing_definitions_file_or_an_unusable_log_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "defs.json"
    out = refused(amqpd("--data-dir", str(tmp_path / "d"), "--definitions", str(missing)))
    assert out.endswith(
        f'--definitions: load_definitions: expected a readable definitions file, got "{missing}" (no such file)'
    )
    out = refused(amqpd("--data-dir", str(tmp_path / "d"), env={"AMQPD_LOG_FILE": str(tmp_path)}))
    assert out.endswith(
        f'AMQPD_LOG_FILE: log_file: expected a file amqpd can append to, got "{tmp_path}" (a directory)'
    )
    assert not (tmp_path / "d").exists()


def test_a_missing_config_file_is_refused(tmp_path: Path) -> None:
    out = refused(amqpd("--config", str(tmp_path / "nope.toml"), "--data-dir", str(tmp_path / "d")))
    assert out.endswith(f"{tmp_path / 'nope.toml'}: expected a readable TOML file, got no such file or directory")


def check_config_lines(out: str) -> dict[str, tuple[str, str]]:
    """--check-config's `name = value  # origin` lines as {name: (value, origin)}."""
    settings = {}
    for line in out.splitlines():
        name, rest = line.split(" = ", 1)
        value, origin = rest.rsplit("  # ", 1)
        settings[name] = (value.strip(), origin)
    return settings


def test_check_config_prints_each_setting_and_its_source(tmp_path: Path) -> None:
    (tmp_path / "amqpd.toml").write_text("[amqpd]\nport = 5673\n\nheartbeat = 30\n")
    env = {"AMQPD_LOOPBACK_USERS": "guest,admin", "AMQPD_MAX_CONNECTIONS": "10"}
    result = amqpd("--config", "amqpd.toml", "--check-config", "--log-level", "debug", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    settings = check_config_lines(result.stdout)
    assert settings["heartbeat"] == ("30", "file amqpd.toml:4")
    assert settings["loopback_users"] == ('["guest", "admin"]', "environment AMQPD_LOOPBACK_USERS")
    assert settings["max_connections"] == ("10", "environment AMQPD_MAX_CONNECTIONS")
    assert settings["port"] == ("0", "flag --port")
    assert settings["log_level"] == ('"DEBUG"', "flag --log-level")
    assert settings["channel_max"] == ("2047", "default")
    assert len(settings) > 60  # every declared setting is listed


def test_an_empty_list_from_the_environment_is_the_empty_list() -> None:
    result = amqpd("--check-config", env={"AMQPD_LOOPBACK_USERS": ""})
    assert check_config_lines(result.stdout)["loopback_users"] == ("[]", "environment AMQPD_LOOPBACK_USERS")


def test_check_config_with_a_bad_setting_exits_78() -> None:
    out = refused(amqpd("--check-config", env={"AMQPD_PORT": "-1"}))
    assert out.endswith('AMQPD_PORT: port: expected an integer 0..65535, got "-1"')
