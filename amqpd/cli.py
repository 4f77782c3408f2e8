"""`amqpd [--host H] [--port P] [--data-dir DIR] [--config FILE] [--retention-max-age AGE] ...`: run the
broker in the foreground."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from amqpd import config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="amqpd", description="A lightweight AMQP 0-9-1 broker.")
    p.add_argument(
        "--host",
        action="append",
        help="address to listen on; repeat for several, all on one port (default: 127.0.0.1 and ::1; "
        "0.0.0.0 for every IPv4 interface, :: for every IPv6 one)",
    )
    p.add_argument("--port", type=int, help="port to listen on (default 5672; 0 picks a free port)")
    p.add_argument("--data-dir", help="directory for durable storage (default: $XDG_DATA_HOME/amqpd)")
    p.add_argument("--in-memory", action="store_true", help="keep nothing on disk (for tests and benchmarks)")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--fsync", choices=["always-batched", "none"], help="store fsync policy")
    p.add_argument(
        "--retention-max-age",
        type=_checked(config.parse_duration_ms),
        metavar="AGE",
        help="keep log segments no queue needs until this old: 7d, 12h, 30m, 45s, or ms (default: delete at once)",
    )
    p.add_argument(
        "--retention-max-bytes",
        type=_checked(config.parse_size),
        metavar="SIZE",
        help="keep log segments no queue needs while the log is under this size: 10GiB, 500MB, or bytes",
    )
    p.add_argument(
        "--management-port",
        type=_checked(_port),
        metavar="PORT",
        help="management HTTP API port (default 15672; 0 picks a free port; off: no management API)",
    )
    p.add_argument(
        "--prometheus-port",
        type=_checked(_port),
        metavar="PORT",
        help="Prometheus /metrics port (default 15692; 0 picks a free port; off: no metrics listener)",
    )
    p.add_argument("--management-host", help="address the management and metrics listeners use (default 127.0.0.1)")
    p.add_argument("--definitions", metavar="FILE", help="import this definitions file (JSON) at start")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    return p.parse_args(argv)


def _checked(parse: Callable[[str], int]) -> Callable[[str], int]:
    """`parse` as an argparse type: its ValueError becomes a one-line usage error naming the flag."""

    def checked(value: str) -> int:
        try:
            return parse(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return checked


def _port(value: str) -> int:
    """-1 stands for off, so that "not given" (None) stays distinct from "off"."""
    port = config.parse_port(value)
    return -1 if port is None else port


def settings_from_args(args: argparse.Namespace) -> config.Settings:
    """Flags override the config file and the environment."""
    return config.load(
        args.config,
        host=args.host,
        port=args.port,
        data_dir="" if args.in_memory else args.data_dir,
        fsync=args.fsync,
        log_level=args.log_level,
        retention_max_age_ms=args.retention_max_age,
        retention_max_bytes=args.retention_max_bytes,
        mgmt_host=args.management_host,
        mgmt_port=_flag_port(args.management_port),
        prometheus_port=_flag_port(args.prometheus_port),
        load_definitions=args.definitions,
    )


def _flag_port(value: int | None) -> int | str | None:
    return "off" if value == -1 else value


def main(argv: list[str] | None = None) -> None:
    settings = settings_from_args(parse_args(argv))
    # The composition root: server and mgmt stand side by side on the broker and meet only here.
    from amqpd.mgmt.definitions import load_definitions_file
    from amqpd.mgmt.service import start_management
    from amqpd.server.listener import Services, run

    run(settings, Services(start_management, load_definitions_file))
