"""Every setting and limit in one place: defaults, overridden by a TOML file, then env, then flags."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_HOSTS = ("127.0.0.1", "::1")


@dataclass
class Settings:
    # Addresses to listen on, all with the same port: both loopbacks by default (clients resolving localhost
    # to ::1, as Node does, must get in). "0.0.0.0" is every IPv4 interface, "::" every IPv6 one.
    host: list[str] = field(default_factory=lambda: list(DEFAULT_HOSTS))
    port: int = 5672
    # Durable storage lives here; "" keeps everything in memory (durable entities then die with the process).
    data_dir: str = field(default_factory=lambda: default_data_dir())
    # The management HTTP API and the Prometheus /metrics listener, on mgmt_host: 0 picks a free port
    # (printed as "amqpd management listening on HOST:PORT"); None ("off" in a file, env or flag): not served.
    mgmt_host: str = "127.0.0.1"
    mgmt_port: int | None = 15672
    prometheus_port: int | None = 15692
    # How often message counters are sampled into rates (RabbitMQ's collect_statistics_interval, 5 s).
    stats_interval: float = 5.0
    # Largest HTTP request body the management API reads (RabbitMQ's management.http_max_body_size); 413 above.
    mgmt_max_body: int = 20 * 1024 * 1024
    # TLS: an amqps listener on tls_port (0 picks a free one) when tls_cert_file is set. verify_peer asks the
    # client for a certificate signed by tls_ca_file; fail_if_no_peer_cert refuses clients without one.
    # A verified client certificate may log in with EXTERNAL as the user named by its tls_cert_login_from
    # (common_name, subject_alternative_name or distinguished_name). SIGHUP re-reads the files.
    tls_port: int = 5671
    tls_cert_file: str = ""
    tls_key_file: str = ""  # "" : the key is in tls_cert_file
    tls_ca_file: str = ""
    tls_verify_peer: bool = False
    tls_fail_if_no_peer_cert: bool = False
    tls_min_version: str = "TLSv1.2"
    tls_ciphers: str = ""  # OpenSSL cipher list for TLS 1.2; "" : Python's defaults
    tls_cert_login_from: str = "common_name"
    # HTTPS for the management API and the Prometheus listener (RabbitMQ's management.ssl.* and
    # prometheus.ssl.*), on mgmt_host when its cert_file is set; each set means what the tls_* one does. As on
    # RabbitMQ, HTTPS then replaces HTTP on that listener unless its plain port (mgmt_port, prometheus_port)
    # is also set in the file, the environment or a flag: then both are served. SIGHUP re-reads the files.
    mgmt_tls_port: int = 15671
    mgmt_tls_cert_file: str = ""
    mgmt_tls_key_file: str = ""
    mgmt_tls_ca_file: str = ""
    mgmt_tls_verify_peer: bool = False
    mgmt_tls_fail_if_no_peer_cert: bool = False
    mgmt_tls_min_version: str = "TLSv1.2"
    mgmt_tls_ciphers: str = ""
    prometheus_tls_port: int = 15691
    prometheus_tls_cert_file: str = ""
    prometheus_tls_key_file: str = ""
    prometheus_tls_ca_file: str = ""
    prometheus_tls_verify_peer: bool = False
    prometheus_tls_fail_if_no_peer_cert: bool = False
    prometheus_tls_min_version: str = "TLSv1.2"
    prometheus_tls_ciphers: str = ""
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
    # The users (name -> password, administrators with full permissions on every vhost) and vhosts a fresh
    # data dir starts with; after that the catalogue holds them (broker.access), as RabbitMQ's default user.
    users: dict[str, str] = field(default_factory=lambda: {"guest": "guest"})
    vhosts: list[str] = field(default_factory=lambda: ["/"])
    # RabbitMQ's default_user / default_pass / default_vhost (RABBITMQ_DEFAULT_USER in its image): when set,
    # a fresh data dir starts with this administrator instead of `users`, and with this vhost instead of
    # `vhosts`; "" : unset. Like `users`, read only until the data dir has been seeded.
    default_user: str = ""
    default_pass: str = ""
    default_vhost: str = ""
    # These users may only connect from a loopback address (RabbitMQ's loopback_users); [] allows guest anywhere.
    loopback_users: list[str] = field(default_factory=lambda: ["guest"])
    # Connections open at once: in total and per user (0: no limit). Beyond them connection.open gets 530.
    max_connections: int = 0
    max_connections_per_user: int = 0
    # Publishes a connection may have awaiting their confirm (the fsync); beyond this, reading from it
    # pauses until half are confirmed. 0: no limit.
    max_unconfirmed_publishes: int = 100_000
    # A RabbitMQ definitions file (JSON) whose users, vhosts, permissions and limits are imported at every
    # boot, as RabbitMQ's load_definitions; "" : none.
    load_definitions: str = ""
    # Store (see store/FORMAT.md).
    segment_size: int = 1024 * 1024 * 1024
    fsync: str = "always-batched"  # or "none" (tests/bench only)
    # Backpressure from the disk: past this many bytes appended to the store and not yet written, reading
    # from publishers pauses until half of them are written.
    max_unwritten_bytes: int = 64 * 1024 * 1024
    # Retention (store/FORMAT.md, "Retention"): keep log segments that no queue needs any more, for log
    # readers, until older than this many ms and/or while the log is under this many bytes. Both None: delete
    # them as soon as no queue needs them. A file or env value may carry a unit: "7d", "10GiB".
    retention_max_age_ms: int | None = None
    retention_max_bytes: int | None = None
    log_level: str = "INFO"

    def seed_users(self) -> dict[str, str]:
        """The users a fresh data dir starts with (name -> password)."""
        return {self.default_user: self.default_pass} if self.default_user else self.users

    def seed_vhosts(self) -> list[str]:
        """The vhosts a fresh data dir starts with."""
        return [self.default_vhost] if self.default_vhost else self.vhosts


ENV_PREFIX = "AMQPD_"


def parse_hosts(value: str | list[str]) -> list[str]:
    """Listen addresses from a list, or a string of them separated by commas or spaces (env, TOML)."""
    items = value if isinstance(value, list) else re.split(r"[,\s]+", value)
    hosts = [str(h).strip() for h in items if str(h).strip()]
    if not hosts:
        raise ValueError("no address to listen on")
    return hosts


DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
SIZE_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_duration_ms(value: str | int) -> int:
    """Milliseconds from "500ms", "30s", "15m", "12h", "7d" or a plain number of milliseconds."""
    return _with_unit(value, DURATION_UNITS_MS, "ms", "a duration like 7d, 12h, 30m, 45s or 500ms")


def parse_size(value: str | int) -> int:
    """Bytes from "10GiB", "512MiB", "1GB", "4096" (binary units are powers of 1024, decimal of 1000)."""
    return _with_unit(value, SIZE_UNITS, "b", "a size like 10GiB, 512MiB, 1GB or a number of bytes")


def _with_unit(value: str | int, units: dict[str, int], default: str, expected: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, default
    else:
        match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
        if match is None or (match[2] or default).lower() not in units:
            raise ValueError(f"{value!r} is not {expected}")
        number, unit = int(match[1]), (match[2] or default).lower()
    if number <= 0:
        raise ValueError(f"{value!r} must be positive")
    return number * units[unit]


def parse_port(value: str | int | None) -> int | None:
    """A listener's port: a number (0 picks a free one), or "off" / "none" / "" for no listener."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("off", "none", "")):
        return None
    port = int(value)
    if not 0 <= port <= 65535:
        raise ValueError(f"{value!r} is not a port number (0-65535) or 'off'")
    return port


# Settings whose value may carry a unit, whatever its source; each ends up a plain int (or None).
UNIT_SETTINGS = {"retention_max_age_ms": parse_duration_ms, "retention_max_bytes": parse_size}
PORT_SETTINGS = ("mgmt_port", "prometheus_port")
# HTTP listeners and the prefix of their HTTPS settings: with a certificate and no explicit plain port, only
# HTTPS is served (RabbitMQ's rabbit_mgmt_app and rabbit_prometheus_app: TLS config alone means TLS only).
HTTPS_SETTINGS = {"mgmt_port": "mgmt_tls", "prometheus_port": "prometheus_tls"}


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
    given: set[str] = set()  # the settings a file, the environment or a flag set
    if config_file:
        data = tomllib.loads(Path(config_file).read_text())
        for key, value in data.get("amqpd", data).items():
            key = key.replace("-", "_")
            if not hasattr(settings, key):
                raise ValueError(f"unknown setting {key!r} in {config_file}")
            setattr(settings, key, value)
            given.add(key)
    for f in fields(settings):
        env = os.environ.get(ENV_PREFIX + f.name.upper())
        current = getattr(settings, f.name)
        if env is not None:
            given.add(f.name)
        if env is not None and f.name == "host":
            settings.host = parse_hosts(env)
            continue
        if env is not None and isinstance(current, list):  # comma-separated; "" is the empty list
            setattr(settings, f.name, [item for item in re.split(r"[,\s]+", env) if item])
            continue
        if env is None or isinstance(current, dict):
            continue
        if f.name in UNIT_SETTINGS or f.name in PORT_SETTINGS:
            setattr(settings, f.name, env)  # parsed below, with the file's and the flags' values
        elif current is None:  # optional settings: a number when it looks like one (mgmt_port)
            setattr(settings, f.name, int(env) if env.isdigit() else env)
        else:
            setattr(settings, f.name, _coerce(env, current))
    for key, value in overrides.items():
        if value is not None:
            setattr(settings, key, value)
            given.add(key)
    for plain, tls in HTTPS_SETTINGS.items():
        if getattr(settings, f"{tls}_cert_file") and plain not in given:
            setattr(settings, plain, None)
    for name in PORT_SETTINGS:
        setattr(settings, name, parse_port(getattr(settings, name)))
    settings.host = parse_hosts(settings.host)
    for name, parse in UNIT_SETTINGS.items():
        value = getattr(settings, name)
        if value is not None:
            setattr(settings, name, parse(value))
    if settings.default_user and not settings.default_pass:
        raise ValueError(f"default_user {settings.default_user!r} needs a default_pass")
    if not 1 <= settings.max_queue_name_length <= 255:
        # A queue name travels as an AMQP shortstr: 255 bytes is the protocol's own limit.
        raise ValueError(f"max_queue_name_length must be 1..255, not {settings.max_queue_name_length}")
    return settings
