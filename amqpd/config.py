"""Every setting and limit in one place, each declared once with its type, range and default; then overridden
by a TOML file, the environment (AMQPD_<NAME>) and flags, in that order. A value that does not fit its
declaration is a ConfigError naming where it came from, before anything starts (docs/configuration.md)."""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

DEFAULT_HOSTS = ("127.0.0.1", "::1")
PORT = (0, 65535)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Log categories (log_levels' keys), as RabbitMQ's log.<category>.level: each names the loggers it sets.
LOG_CATEGORIES = {
    "connection": ("amqpd.connection", "amqpd.session"),
    "channel": ("amqpd.channel",),
    "broker": ("amqpd.broker", "amqpd.delayed"),
    "store": ("store", "amqpd.recovery"),
    "mgmt": ("amqpd.mgmt", "uvicorn"),
    "tls": ("amqpd.tls",),
    "alarms": ("amqpd.alarms",),
}
INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class Rule:
    """What a setting accepts beyond its type: a range, a set of words, or a parser for values with units."""

    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()  # a table's allowed keys (log_levels)
    parse: Callable[[Any], Any] | None = None  # for values with units or words ("7d", "off"); raises ValueError
    expected: str = ""  # what `parse` accepts, in words


def setting(default: Any, **rule: Any) -> Any:
    """A Settings field: its default, and the Rule its values must follow."""
    meta = {"rule": Rule(**rule)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if callable(default):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


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
    if isinstance(value, bool) or not re.fullmatch(r"\s*-?\d+\s*", str(value)):
        raise ValueError(f"{value!r} is not a port number (0-65535) or 'off'")
    port = int(value)
    if not 0 <= port <= 65535:
        raise ValueError(f"{value!r} is not a port number (0-65535) or 'off'")
    return port


def default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "amqpd")


PORT_OR_OFF = {"parse": parse_port, "expected": 'a port number 0..65535 or "off"'}
DURATION = {"parse": parse_duration_ms, "expected": "a duration like 7d, 12h, 30m, 45s, 500ms or a number of ms"}
SIZE = {"parse": parse_size, "expected": "a size like 10GiB, 512MiB, 1GB or a number of bytes"}
TLS_VERSION = ("TLSv1.2", "TLSv1.3")


@dataclass
class Settings:
    # Addresses to listen on, all with the same port: both loopbacks by default (clients resolving localhost
    # to ::1, as Node does, must get in). "0.0.0.0" is every IPv4 interface, "::" every IPv6 one.
    host: list[str] = setting(list(DEFAULT_HOSTS), parse=parse_hosts, expected="one or more addresses")
    port: int = setting(5672, lo=0, hi=65535)
    # Durable storage lives here; "" keeps everything in memory (durable entities then die with the process).
    data_dir: str = setting(default_data_dir)
    # The management HTTP API and the Prometheus /metrics listener, on mgmt_host: 0 picks a free port
    # (printed as "amqpd management listening on HOST:PORT"); None ("off" in a file, env or flag): not served.
    mgmt_host: str = setting("127.0.0.1")
    mgmt_port: int | None = setting(15672, **PORT_OR_OFF)
    prometheus_port: int | None = setting(15692, **PORT_OR_OFF)
    # How often message counters are sampled into rates (RabbitMQ's collect_statistics_interval, 5 s).
    stats_interval: float = setting(5.0, lo=0.01, hi=3600)
    # Largest HTTP request body the management API reads (RabbitMQ's management.http_max_body_size); 413 above.
    mgmt_max_body: int = setting(20 * 1024 * 1024, lo=1, hi=INT_MAX)
    # Seconds a management request with wrong credentials waits before its 401 (the web UI's login form and
    # the API alike): slows password guessing without holding up anyone else's requests.
    mgmt_login_failure_delay: float = setting(1.0, lo=0, hi=60)
    # TLS: an amqps listener on tls_port (0 picks a free one) when tls_cert_file is set. verify_peer asks the
    # client for a certificate signed by tls_ca_file; fail_if_no_peer_cert refuses clients without one.
    # A verified client certificate may log in with EXTERNAL as the user named by its tls_cert_login_from
    # (common_name, subject_alternative_name or distinguished_name). SIGHUP re-reads the files.
    tls_port: int = setting(5671, lo=0, hi=65535)
    tls_cert_file: str = setting("")
    tls_key_file: str = setting("")  # "" : the key is in tls_cert_file
    tls_ca_file: str = setting("")
    tls_verify_peer: bool = setting(False)
    tls_fail_if_no_peer_cert: bool = setting(False)
    tls_min_version: str = setting("TLSv1.2", choices=TLS_VERSION)
    tls_ciphers: str = setting("")  # OpenSSL cipher list for TLS 1.2; "" : Python's defaults
    tls_cert_login_from: str = setting(
        "common_name", choices=("common_name", "subject_alternative_name", "distinguished_name")
    )
    # HTTPS for the management API and the Prometheus listener (RabbitMQ's management.ssl.* and
    # prometheus.ssl.*), on mgmt_host when its cert_file is set; each set means what the tls_* one does. As on
    # RabbitMQ, HTTPS then replaces HTTP on that listener unless its plain port (mgmt_port, prometheus_port)
    # is also set in the file, the environment or a flag: then both are served. SIGHUP re-reads the files.
    mgmt_tls_port: int = setting(15671, lo=0, hi=65535)
    mgmt_tls_cert_file: str = setting("")
    mgmt_tls_key_file: str = setting("")
    mgmt_tls_ca_file: str = setting("")
    mgmt_tls_verify_peer: bool = setting(False)
    mgmt_tls_fail_if_no_peer_cert: bool = setting(False)
    mgmt_tls_min_version: str = setting("TLSv1.2", choices=TLS_VERSION)
    mgmt_tls_ciphers: str = setting("")
    prometheus_tls_port: int = setting(15691, lo=0, hi=65535)
    prometheus_tls_cert_file: str = setting("")
    prometheus_tls_key_file: str = setting("")
    prometheus_tls_ca_file: str = setting("")
    prometheus_tls_verify_peer: bool = setting(False)
    prometheus_tls_fail_if_no_peer_cert: bool = setting(False)
    prometheus_tls_min_version: str = setting("TLSv1.2", choices=TLS_VERSION)
    prometheus_tls_ciphers: str = setting("")
    # Handshake and connection limits, as RabbitMQ 3.10 negotiates them (frame_max at least AMQP's 4096).
    channel_max: int = setting(2047, lo=1, hi=65535)
    frame_max: int = setting(131072, lo=4096, hi=2**31 - 1)
    heartbeat: int = setting(60, lo=0, hi=65535)
    handshake_timeout: float = setting(10.0, lo=0.1, hi=3600)
    # After close-ok, or a close of the broker's own, the socket's write side is shut and what the client still
    # sends is read and dropped until it hangs up, for at most this many seconds: closing with its frames unread
    # would reset the connection and lose our last frames to it ("lingering close").
    close_linger: float = setting(2.0, lo=0.0, hi=60)
    max_message_size: int = setting(128 * 1024 * 1024, lo=1, hi=512 * 1024 * 1024)
    max_queue_name_length: int = setting(255, lo=1, hi=255)  # a queue name is an AMQP shortstr: 255 bytes at most
    max_table_depth: int = setting(64, lo=1, hi=1000)  # deeper nested field tables are refused (502)
    # Flow control: stop reading a connection while its socket output exceeds this many bytes.
    write_buffer_high: int = setting(4 * 1024 * 1024, lo=1, hi=INT_MAX)
    write_buffer_low: int = setting(1 * 1024 * 1024, lo=0, hi=INT_MAX)
    # glibc malloc's thresholds, set at start (server/malloc_tuning.py): allocations up to the first stay in
    # the heap, and up to the second of freed memory stays at its top, so that the frames of one large message
    # reuse the memory of the last one's instead of faulting fresh pages in (a body the frame reader fills is
    # one allocation of the body's size: up to the largest that stays in the heap). 0 leaves glibc's defaults.
    malloc_mmap_threshold: int = setting(32 * 1024 * 1024, lo=0, hi=32 * 1024 * 1024)
    malloc_trim_threshold: int = setting(128 * 1024 * 1024, lo=0, hi=2**31 - 1)
    # Resource alarms (RabbitMQ's memory and disk alarms): publishers are blocked (connection.blocked)
    # while the process uses more memory than this (a fraction of RAM when <= 1, else bytes) or the data
    # dir's disk has less free space than disk_free_limit bytes. Checked every alarm_interval seconds.
    memory_high_watermark: float = setting(0.4, lo=0.0001, hi=float(INT_MAX))
    disk_free_limit: int = setting(50 * 1024 * 1024, lo=0, hi=INT_MAX)
    # Room kept on the data dir's disk for what frees space (acks, deletions, checkpoints, the clean-stop
    # marker): a file of this many bytes, released when the disk fills (docs/operating.md, "A full disk").
    # New message data also keeps disk_free_limit bytes free, checked at each commit near the limit.
    disk_reserve: int = setting(16 * 1024 * 1024, lo=0, hi=INT_MAX)
    alarm_interval: float = setting(1.0, lo=0.01, hi=3600)
    # A delivery left unacked this long (ms) closes its channel with 406, as RabbitMQ 3.10 does; 0: never.
    consumer_timeout: int = setting(1_800_000, lo=0, hi=INT_MAX)
    # The users (name -> password, administrators with full permissions on every vhost) and vhosts a fresh
    # data dir starts with; after that the catalogue holds them (broker.access), as RabbitMQ's default user.
    users: dict[str, str] = setting({"guest": "guest"})
    vhosts: list[str] = setting(["/"])
    # RabbitMQ's default_user / default_pass / default_vhost (RABBITMQ_DEFAULT_USER...): when set, a fresh
    # data dir starts with this administrator (and vhost) instead of `users` / `vhosts`.
    default_user: str | None = setting(None)
    default_pass: str | None = setting(None)
    default_vhost: str = setting("/")
    # These users may only connect from a loopback address (RabbitMQ's loopback_users); [] allows guest anywhere.
    loopback_users: list[str] = setting(["guest"])
    # Connections open at once: in total and per user (0: no limit). Beyond them connection.open gets 530.
    max_connections: int = setting(0, lo=0, hi=INT_MAX)
    max_connections_per_user: int = setting(0, lo=0, hi=INT_MAX)
    # Publishes a connection may have awaiting their confirm (the fsync); beyond this, reading from it
    # pauses until half are confirmed. 0: no limit.
    max_unconfirmed_publishes: int = setting(100_000, lo=0, hi=INT_MAX)
    # A RabbitMQ definitions file (JSON) whose users, vhosts, permissions and limits are imported at every
    # boot, as RabbitMQ's load_definitions; "" : none.
    load_definitions: str = setting("")
    # Static shovels (docs/shovels.md): name -> a table with a dynamic shovel's keys ("src-uri", "src-queue",
    # ...), started at boot on vhost "/", not kept in the catalogue; each one's keys are checked at startup.
    shovels: dict[str, Any] = setting({}, parse=lambda v: _shovel_tables(v), expected="a table of tables")
    # Store (see store/FORMAT.md).
    segment_size: int = setting(1024 * 1024 * 1024, lo=64 * 1024, hi=INT_MAX)
    fsync: str = setting("always-batched", choices=("always-batched", "none"))  # "none": tests/bench only
    # Backpressure from the disk: past this many bytes appended to the store and not yet written, reading
    # from publishers pauses until half of them are written.
    max_unwritten_bytes: int = setting(64 * 1024 * 1024, lo=1, hi=INT_MAX)
    # Retention (store/FORMAT.md, "Retention"): keep log segments that no queue needs any more, for log
    # readers, until older than this many ms and/or while the log is under this many bytes. Both None: delete
    # them as soon as no queue needs them. A file or env value may carry a unit: "7d", "10GiB".
    retention_max_age_ms: int | None = setting(None, **DURATION)
    retention_max_bytes: int | None = setting(None, **SIZE)
    # Logging (docs/configuration.md, "Logs"): the level of every category, and of some on their own; the
    # file (reopened on SIGUSR1, for logrotate; "" : stderr) and the format ("text", or "json": one object
    # per line).
    log_level: str = setting("INFO", choices=LOG_LEVELS)
    log_levels: dict[str, str] = setting({}, keys=tuple(LOG_CATEGORIES), choices=LOG_LEVELS)
    log_file: str = setting("")
    log_format: str = setting("text", choices=("text", "json"))

    def seed_users(self) -> dict[str, str]:
        """The users a fresh data dir starts with (name -> password): default_user, when set, replaces `users`."""
        return {self.default_user: self.default_pass or ""} if self.default_user else self.users

    def seed_vhosts(self) -> list[str]:
        """The vhosts a fresh data dir starts with: a default_vhost other than "/" replaces `vhosts`."""
        return [self.default_vhost] if self.default_vhost != "/" else self.vhosts


ENV_PREFIX = "AMQPD_"
EX_CONFIG = 78  # sysexits.h: a configuration error
# HTTP listeners and the prefix of their HTTPS settings: with a certificate and no explicit plain port, only
# HTTPS is served (RabbitMQ's rabbit_mgmt_app and rabbit_prometheus_app: TLS config alone means TLS only).
HTTPS_SETTINGS = {"mgmt_port": "mgmt_tls", "prometheus_port": "prometheus_tls"}


class ConfigError(ValueError):
    """A setting that cannot be used; str() is the one line amqpd prints before exiting with EX_CONFIG."""

    def __init__(self, where: str, key: str, expected: str, given: str) -> None:
        self.where, self.key, self.expected, self.given = where, key, expected, given
        key_part = f" {key}:" if key else ""
        super().__init__(f"{where}:{key_part} expected {expected}, got {given}")


@dataclass(frozen=True)
class Spec:
    """One setting as declared: its name, Python type and Rule."""

    name: str
    kind: Any
    rule: Rule
    default: Any

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def expected(self) -> str:
        r = self.rule
        if r.expected:
            return r.expected
        if r.choices and self.kind is not dict:
            return "one of " + ", ".join(r.choices)
        if self.kind is dict:
            keys = f"keys {', '.join(r.keys)}" if r.keys else "names"
            values = ", ".join(r.choices) if r.choices else "strings"
            return f"a table of {keys} to {values}"
        noun = {bool: "true or false", int: "an integer", float: "a number", list: "a list of strings"}
        words = noun.get(self.kind, "a string")
        if r.lo is not None and r.hi is not None:
            lo, hi = _number(r.lo), _number(r.hi)
            words += f" >= {lo}" if r.hi >= INT_MAX else f" {lo}..{hi}"
        return words


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _declared() -> dict[str, Spec]:
    hints = get_type_hints(Settings)
    defaults = Settings()
    specs = {}
    for f in fields(Settings):
        kind = hints[f.name]
        args = [a for a in get_args(kind) if a is not type(None)]
        if get_origin(kind) in (Union, types.UnionType):  # optional: int | None, str | None
            kind = args[0]
        kind = get_origin(kind) or kind
        rule = f.metadata.get("rule", Rule())  # a plain field is still checked against its type
        specs[f.name] = Spec(f.name, kind, rule, getattr(defaults, f.name))
    return specs


SPECS = _declared()


def shown(value: Any) -> str:
    """A value as TOML would write it: strings quoted, lists and tables as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "(none)"
    return json.dumps(value) if isinstance(value, (str, list, dict)) else str(value)


class _Bad(Exception):
    """A value that does not fit its Spec (the caller knows where it came from)."""


def convert(spec: Spec, value: Any, text: bool) -> Any:
    """A value from a file (TOML types) or, when `text`, from the environment or a flag (a string), checked
    against `spec`; _Bad when it does not fit."""
    r = spec.rule
    if r.parse is not None:
        try:
            return r.parse(value)
        except (ValueError, TypeError):
            raise _Bad from None
    if text and isinstance(value, str):
        value = _from_text(spec, value)
    if spec.kind is bool:
        if not isinstance(value, bool):
            raise _Bad
        return value
    if spec.kind in (int, float):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (spec.kind is int and isinstance(value, float))
        ):
            raise _Bad
        if not math.isfinite(value) or (r.lo is not None and value < r.lo) or (r.hi is not None and value > r.hi):
            raise _Bad
        return spec.kind(value)
    if spec.kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _Bad
        return list(value)
    if spec.kind is dict:
        return _table(spec, value)
    if value is None and spec.default is None:
        return None
    if not isinstance(value, str):
        raise _Bad
    return _choice(r.choices, value) if r.choices else value


def _from_text(spec: Spec, value: str) -> Any:
    """An environment variable's or a flag's string as the type the setting holds."""
    if spec.kind is bool:
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
        raise _Bad
    if spec.kind is int:
        if not re.fullmatch(r"\s*[-+]?\d+\s*", value):
            raise _Bad
        return int(value)
    if spec.kind is float:
        try:
            return float(value)
        except ValueError:
            raise _Bad from None
    if spec.kind is list:  # comma-separated ("" is the empty list), or written as in TOML: ["a", "b"], []
        if value.strip().startswith("["):
            return _toml_value(value)
        return [item.strip() for item in value.split(",") if item.strip()]
    if spec.kind is dict:  # name=value,name=value
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        if any(len(p) != 2 for p in pairs):
            raise _Bad
        return {k.strip(): v.strip() for k, v in pairs}
    if value == "" and spec.default is None:
        return None
    return value


def _toml_value(text: str) -> Any:
    import tomllib  # here, not at the top: a broker started from flags alone never parses TOML

    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        raise _Bad from None


def _choice(choices: tuple[str, ...], value: str) -> str:
    """The declared spelling of a word given in any case ("info" is INFO)."""
    for choice in choices:
        if choice.lower() == value.strip().lower():
            return choice
    raise _Bad


def _shovel_tables(value: Any) -> dict[str, dict[str, Any]]:
    if isinstance(value, str):  # from the environment: JSON
        value = json.loads(value)
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError("not a table of tables")
    return {str(k): dict(v) for k, v in value.items()}


def _table(spec: Spec, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _Bad
    r = spec.rule
    if r.keys and any(k not in r.keys for k in value):
        raise _Bad
    return {k: _choice(r.choices, v) if r.choices else v for k, v in value.items()}


# -- where values come from -----------------------------------------------------------------------------------


@dataclass
class Loaded:
    """The settings and, for each, where its value came from: "default", "file PATH:LINE",
    "environment AMQPD_X" or "flag --x"."""

    settings: Settings
    origins: dict[str, str]


def load(config_file: str | None = None, **overrides: Any) -> Settings:
    """Settings from defaults, a TOML file, AMQPD_* environment variables and overrides (flags)."""
    return load_with_origins(config_file, overrides).settings


def load_with_origins(
    config_file: str | None = None, overrides: dict[str, Any] | None = None, flags: dict[str, str] | None = None
) -> Loaded:
    """Every source in order; a value that does not fit is a ConfigError naming its source. `flags` names the
    flag each override came from (for messages); an override given as a string is parsed as the environment's
    values are."""
    base = Settings()  # the defaults, computed now (the data dir's follows XDG_DATA_HOME)
    values: dict[str, Any] = {name: getattr(base, name) for name in SPECS}
    origins = dict.fromkeys(SPECS, "default")
    if config_file:
        for name, value, where in _file_values(config_file):
            values[name] = _checked(SPECS[name], value, where, text=False)
            origins[name] = f"file {where}"
    for name, spec in SPECS.items():
        raw = os.environ.get(spec.env)
        if raw is not None:
            values[name] = _checked(spec, raw, spec.env, text=True)
            origins[name] = f"environment {spec.env}"
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        flag = (flags or {}).get(name, name)
        values[name] = _checked(SPECS[name], value, flag, text=isinstance(value, str))
        origins[name] = f"flag {flag}" if flag.startswith("-") else "override"
    for plain, tls in HTTPS_SETTINGS.items():
        if values[f"{tls}_cert_file"] and origins[plain] == "default":
            values[plain] = None
    settings = Settings(**values)
    _check_together(settings, origins)
    return Loaded(settings, origins)


def _checked(spec: Spec, value: Any, where: str, text: bool) -> Any:
    try:
        return convert(spec, value, text)
    except _Bad:
        raise ConfigError(where, spec.name, spec.expected(), shown(value)) from None


def _file_values(path: str) -> list[tuple[str, Any, str]]:
    """(setting, value, "PATH:LINE") for each key of the file (in its [amqpd] table, if it has one)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(path, "", "a readable TOML file", reason.lower()) from None
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"at line (\d+)", str(exc))
        where = f"{path}:{line[1]}" if line else path
        bad = text.splitlines()[int(line[1]) - 1].strip() if line and int(line[1]) <= len(text.splitlines()) else ""
        raise ConfigError(where, "", f"valid TOML ({str(exc).split(' (at')[0]})", shown(bad)) from None
    table = data
    if isinstance(data.get("amqpd"), dict):
        table = data["amqpd"]
        for key, value in data.items():  # beside an [amqpd] table, a key outside it would be silently unread
            if key != "amqpd":
                where = f"{path}:{_line_of(text, key)}"
                raise ConfigError(where, key, "every setting inside the [amqpd] table", f"{key} = {shown(value)}")
    found = []
    for key, value in table.items():
        name = key.replace("-", "_")
        where = f"{path}:{_line_of(text, key)}"
        if name not in SPECS:
            near = difflib.get_close_matches(name, SPECS, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(where, key, f"a known setting{hint}", f"{key} = {shown(value)}")
        found.append((name, value, where))
    return found


def _line_of(text: str, key: str) -> int:
    """The line where `key` is set (`key = ...` or a `[...key]` table header); 1 when not found."""
    k = re.escape(key)
    pattern = re.compile(rf"^\s*(?:[\"']?{k}[\"']?\s*=|\[\s*(?:amqpd\.)?[\"']?{k}[\"']?\s*\])")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return 1


def _check_together(s: Settings, origins: dict[str, str]) -> None:
    """Rules between settings, and the data dir: it must be a directory, or creatable as one."""
    if s.write_buffer_low > s.write_buffer_high:
        where = _where(origins, "write_buffer_low")
        raise ConfigError(
            where, "write_buffer_low", f"at most write_buffer_high ({s.write_buffer_high})", str(s.write_buffer_low)
        )
    if s.default_user and not s.default_pass:
        where = _where(origins, "default_user")
        raise ConfigError(where, "default_pass", f"a password for default_user {shown(s.default_user)}", "none")
    if s.load_definitions and not os.access(s.load_definitions, os.R_OK):
        where = _where(origins, "load_definitions")
        raise ConfigError(where, "load_definitions", "a readable definitions file", _file_problem(s.load_definitions))
    if s.log_file:
        problem = _log_file_problem(s.log_file)
        if problem:
            raise ConfigError(_where(origins, "log_file"), "log_file", "a file amqpd can append to", problem)
    if s.data_dir:
        problem = _data_dir_problem(s.data_dir)
        if problem:
            raise ConfigError(
                _where(origins, "data_dir"),
                "data_dir",
                "a directory amqpd can write",
                f"{shown(s.data_dir)} ({problem})",
            )


def _where(origins: dict[str, str], name: str) -> str:
    origin = origins[name]
    return origin.split(" ", 1)[1] if " " in origin else origin


def _file_problem(path: str) -> str:
    reason = "not readable" if os.path.exists(path) else "no such file"
    return f"{shown(path)} ({reason})"


def _log_file_problem(path: str) -> str:
    p = Path(path).absolute()
    if p.is_dir():
        return f"{shown(path)} (a directory)"
    if p.exists():
        return "" if os.access(p, os.W_OK) else f"{shown(path)} (not writable)"
    if not p.parent.is_dir():
        return f"{shown(path)} (no directory {p.parent})"
    return "" if os.access(p.parent, os.W_OK | os.X_OK) else f"{shown(path)} (cannot create it in {p.parent})"


def _data_dir_problem(path: str) -> str:
    """Why `path` cannot be (or become) amqpd's data dir; "" when it can. Creates nothing."""
    p = Path(path).absolute()
    if p.exists():
        if not p.is_dir():
            return "a file"
        return "" if os.access(p, os.W_OK | os.X_OK) else "not writable"
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file"
            return "" if os.access(parent, os.W_OK | os.X_OK) else f"cannot create it in {parent}"
    return ""


def describe(loaded: Loaded) -> str:
    """`amqpd --check-config`: every setting as a TOML line, with where its value came from."""
    lines = []
    for name in SPECS:
        value = getattr(loaded.settings, name)
        text = "# unset" if value is None else shown(value)
        lines.append(f"{name} = {text}".ljust(48) + f"  # {loaded.origins[name]}")
    return "\n".join(lines)
