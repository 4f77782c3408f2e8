"""`amqpd [--host H] [--port P] [--data-dir DIR] [--config FILE] [--retention-max-age AGE] ...`: run the
broker in the foreground. `amqpd --check-config` prints the effective settings and where each came from."""

from __future__ import annotations

import argparse
import sys

from amqpd import __version__, config

# The setting each flag sets (flags are parsed by amqpd.config, as the environment's values are, so that a bad
# one gets the same one-line error and exit code).
FLAGS = {
    "host": "--host",
    "port": "--port",
    "data_dir": "--data-dir",
    "fsync": "--fsync",
    "log_level": "--log-level",
    "log_file": "--log-file",
    "log_format": "--log-format",
    "retention_max_age_ms": "--retention-max-age",
    "retention_max_bytes": "--retention-max-bytes",
    "mgmt_host": "--management-host",
    "mgmt_port": "--management-port",
    "prometheus_port": "--prometheus-port",
    "load_definitions": "--definitions",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="amqpd", description="A lightweight AMQP 0-9-1 broker.")
    p.add_argument("--version", action="version", version=f"amqpd {__version__}")
    p.add_argument(
        "--host",
        action="append",
        help="address to listen on; repeat for several, all on one port (default: 127.0.0.1 and ::1; "
        "0.0.0.0 for every IPv4 interface, :: for every IPv6 one)",
    )
    p.add_argument("--port", help="port to listen on (default 5672; 0 picks a free port)")
    p.add_argument("--data-dir", help="directory for durable storage (default: $XDG_DATA_HOME/amqpd)")
    p.add_argument("--in-memory", action="store_true", help="keep nothing on disk (for tests and benchmarks)")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument(
        "--check-config",
        action="store_true",
        help="print the effective settings and where each came from, then exit (78 on a bad setting)",
    )
    p.add_argument("--fsync", help="store fsync policy: always-batched or none")
    p.add_argument(
        "--retention-max-age",
        metavar="AGE",
        help="keep log segments no queue needs until this old: 7d, 12h, 30m, 45s, or ms (default: delete at once)",
    )
    p.add_argument(
        "--retention-max-bytes",
        metavar="SIZE",
        help="keep log segments no queue needs while the log is under this size: 10GiB, 500MB, or bytes",
    )
    p.add_argument(
        "--management-port",
        metavar="PORT",
        help="management HTTP API port (default 15672; 0 picks a free port; off: no management API)",
    )
    p.add_argument(
        "--prometheus-port",
        metavar="PORT",
        help="Prometheus /metrics port (default 15692; 0 picks a free port; off: no metrics listener)",
    )
    p.add_argument("--management-host", help="address the management and metrics listeners use (default 127.0.0.1)")
    p.add_argument("--definitions", metavar="FILE", help="import this definitions file (JSON) at start")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--log-file", metavar="FILE", help="log here instead of stderr (reopened on SIGUSR1)")
    p.add_argument("--log-format", help="text or json (one object per line)")
    return p.parse_args(argv)


def loaded_from_args(args: argparse.Namespace) -> config.Loaded:
    """Flags override the config file and the environment; a bad value is a config.ConfigError."""
    overrides = {name: getattr(args, flag[2:].replace("-", "_")) for name, flag in FLAGS.items()}
    flags = dict(FLAGS)
    if args.in_memory:
        overrides["data_dir"], flags["data_dir"] = "", "--in-memory"
    return config.load_with_origins(args.config, overrides, flags)


def settings_from_args(args: argparse.Namespace) -> config.Settings:
    return loaded_from_args(args).settings


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        loaded = loaded_from_args(args)
    except config.ConfigError as exc:
        print(f"amqpd: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(config.EX_CONFIG) from None
    if args.check_config:
        print(config.describe(loaded))
        return
    # The composition root: server and mgmt stand side by side on the broker and meet only here.
    from amqpd.mgmt.service import load_definitions, start_management
    from amqpd.server.listener import Services, run

    run(loaded.settings, Services(start_management, load_definitions))
