"""`amqpd [--host H] [--port P] [--data-dir DIR] [--config FILE]`: run the broker in the foreground."""

from __future__ import annotations

import argparse

from amqpd import config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="amqpd", description="A lightweight AMQP 0-9-1 broker.")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 5672; 0 picks a free port)")
    p.add_argument("--data-dir", help="directory for durable storage (default: $XDG_DATA_HOME/amqpd)")
    p.add_argument("--in-memory", action="store_true", help="keep nothing on disk (for tests and benchmarks)")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--fsync", choices=["always-batched", "none"], help="store fsync policy")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.in_memory:
        args.data_dir = ""
    settings = config.load(
        args.config, host=args.host, port=args.port, data_dir=args.data_dir, fsync=args.fsync,
        log_level=args.log_level,
    )
    from amqpd.server.listener import run

    run(settings)
