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
def test_a_bad_port_is_a_config_error_naming_the_flag(value: str) -> None:
    with pytest.raises(config.ConfigError, match="--management-port: mgmt_port: expected a port number"):
        settings(["--management-port", value])


def test_a_management_certificate_alone_serves_https_instead_of_http(tmp_path: Path) -> None:
    """RabbitMQ's rabbit_mgmt_app / rabbit_prometheus_app: management.ssl.* alone starts only the TLS listener
    (15671, 15691); with management.tcp.* set too, both."""
    path = tmp_path / "amqpd.toml"
    path.write_text('mgmt_tls_cert_file = "server.pem"\nprometheus_tls_cert_file = "server.pem"\n')
    s = settings(["--config", str(path)])
    assert (s.mgmt_port, s.mgmt_tls_port, s.prometheus_port, s.prometheus_tls_port) == (None, 15671, None, 15691)


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["--management-port", "15672"], {}, ""),
        ([], {"AMQPD_MGMT_PORT": "15672"}, ""),
        ([], {}, "mgmt_port = 15672\n"),
    ],
)
def test_https_and_http_both_when_the_http_port_is_named_too(
    argv: list[str], env: dict[str, str], line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "amqpd.toml"
    path.write_text('mgmt_tls_cert_file = "server.pem"\n' + line)
    s = settings(["--config", str(path), *argv])
    assert (s.mgmt_port, s.mgmt_tls_port) == (15672, 15671)
    assert s.prometheus_port == 15692  # no prometheus_tls_cert_file: plain HTTP as before
