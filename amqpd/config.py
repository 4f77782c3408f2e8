"""Every setting and limit in one place: defaults, overridden by a TOML file, then env, then flags."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 5672
    # Durable storage lives here; "" keeps everything in memory (durable entities then die with the process).
    data_dir: str = field(default_factory=lambda: default_data_dir())
    mgmt_port: int | None = None  # HTTP management API; None: off
    # Handshake and connection limits, as RabbitMQ 3.10 negotiates them.
    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    handshake_timeout: float = 10.0
    max_message_size: int = 128 * 1024 * 1024
    max_queue_name_length: int = 255
    max_table_depth: int = 64  # nested field tables deeper than this are refused (502) instead of recursing
    # Flow control: stop reading a connection while its socket output exceeds this many bytes.
    write_buffer_high: int = 4 * 1024 * 1024
    write_buffer_low: int = 1 * 1024 * 1024
    # Resource alarms (RabbitMQ's memory and disk alarms): publishers are blocked (connection.blocked)
    # while the process uses more memory than this (a fraction of RAM when <= 1, else bytes) or the data
    # dir's disk has less free space than disk_free_limit bytes. Checked every alarm_interval seconds.
    memory_high_watermark: float = 0.4
    disk_free_limit: int = 50 * 1024 * 1024
    alarm_interval: float = 1.0
    # A delivery left unacked this long (ms) closes its channel with 406, as RabbitMQ 3.10 does; 0: never.
    consumer_timeout: int = 1_800_000
    # Users: name -> password; vhosts that exist.
    users: dict[str, str] = field(default_factory=lambda: {"guest": "guest"})
    vhosts: list[str] = field(default_factory=lambda: ["/"])
    # Store (see store/FORMAT.md).
    segment_size: int = 1024 * 1024 * 1024
    fsync: str = "always-batched"  # or "none" (tests/bench only)
    log_level: str = "INFO"


ENV_PREFIX = "AMQPD_"


def default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "amqpd")


def _coerce(value: str, current: Any) -> Any:
    if isinstance(current, bool):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(current, int):
        return int(value)
    if isinstance(current, float):
        return float(value)
    return value


def load(config_file: str | None = None, **overrides: Any) -> Settings:
    """Build Settings from defaults, a TOML file, AMQPD_* environment variables and explicit overrides."""
    settings = Settings()
    if config_file:
        data = tomllib.loads(Path(config_file).read_text())
        for key, value in data.get("amqpd", data).items():
            key = key.replace("-", "_")
            if not hasattr(settings, key):
                raise ValueError(f"unknown setting {key!r} in {config_file}")
            setattr(settings, key, value)
    for f in fields(settings):
        env = os.environ.get(ENV_PREFIX + f.name.upper())
        current = getattr(settings, f.name)
        if env is None or isinstance(current, (dict, list)):
            continue
        if current is None:  # optional settings: a number when it looks like one (mgmt_port)
            setattr(settings, f.name, int(env) if env.isdigit() else env)
        else:
            setattr(settings, f.name, _coerce(env, current))
    for key, value in overrides.items():
        if value is not None:
            setattr(settings, key, value)
    return settings
