"""The management and Prometheus listener settings: defaults, 0 for a free port, "off" from flags, env and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqpd import cli, config


def settings(argv: list[str]) -> config.Settings:
    return cli.settings_from_args(cli.parse_args(argv))


def test_defaults_are_rabbitmqs_ports() -> None:
    s = settings([])
    assert (s.mgmt_host, s.mgmt_port, s.prometheus_port) == ("127.0.0.1", 15672, 15692)


def test_flags_pick_a_free_port_or_turn_a_listener_off() -> None:
    s = settings(["--management-port", "0", "--prometheus-port", "off"])
    assert (s.mgmt_port, s.prometheus_port) == (0, None)


def test_env_and_file_turn_listeners_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AMQPD_MGMT_PORT", "off")
    path = tmp_path / "amqpd.toml"
    path.write_text('prometheus_port = "off"\n')
    s = settings(["--config", str(path)])
    assert (s.mgmt_port, s.prometheus_port) == (None, None)


@pytest.mark.parametrize("value", ["70000", "-5", "http"])
def test_a_bad_port_is_a_usage_error(value: str) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(["--management-port", value])
    assert exited.value.code == 2
