"""More brokers for one test, each with its own settings: TLS with generated certificates, users and
permissions, a durable data dir. Each is a subprocess, so that `restart(kill=True)` is a real crash."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from amqpd.testing.certs import TLSFiles, generate
from amqpd.testing.process import BrokerProcess

# user -> {vhost: (configure, write, read)}; a user given only a password gets every permission on "/"
Permissions = Mapping[str, tuple[str, str, str]]


class ConfiguredBroker(BrokerProcess):
    """A BrokerProcess with the management API on, and for TLS `tls_url` and `tls` (the CA a client trusts)."""

    tls: TLSFiles | None = None

    @property
    def tls_url(self) -> str:
        if not self.tls_port:
            raise AttributeError("this broker has no TLS listener: amqpd_factory(tls=True) makes one")
        return f"amqps://guest:guest@localhost:{self.tls_port}/%2F"


class BrokerFactory:
    """amqpd_factory(tls=True, users={"alice": "secret"}, durable=True, settings={"max_message_size": 1024})
    starts and returns a ConfiguredBroker; every broker it made is stopped by close()."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.brokers: list[ConfiguredBroker] = []

    def __call__(
        self,
        *,
        tls: bool = False,
        users: Mapping[str, str] | None = None,
        permissions: Mapping[str, Permissions] | None = None,
        durable: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> ConfiguredBroker:
        home = self.directory / f"broker{len(self.brokers)}"
        home.mkdir(parents=True)
        env = _settings_env(settings or {})
        args = [] if durable else ["--in-memory"]
        if users:
            args += ["--definitions", str(_write_definitions(home / "definitions.json", users, permissions or {}))]
        tls_files = None
        if tls:
            tls_files = generate(home / "tls")
            env.update(
                AMQPD_TLS_PORT="0",
                AMQPD_TLS_CERT_FILE=str(tls_files.cert_file),
                AMQPD_TLS_KEY_FILE=str(tls_files.key_file),
                AMQPD_TLS_CA_FILE=str(tls_files.ca_file),
            )
        broker = ConfiguredBroker(data_dir=str(home / "data"), extra_args=args, env=env, management=True)
        broker.tls = tls_files
        self.brokers.append(broker)
        return _started(broker)

    def close(self) -> None:
        for broker in self.brokers:
            broker.close()
        self.brokers.clear()


def _started(broker: ConfiguredBroker) -> ConfiguredBroker:
    from amqpd.testing.embedded import BrokerStartError

    try:
        broker.start()
    except RuntimeError as exc:  # the reason in one line, without the traceback under it
        raise BrokerStartError(str(exc)) from None
    return broker


def _settings_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """Each setting as its AMQPD_* variable; an unknown name is refused here, in one line."""
    from amqpd.config import Settings

    known = {f.name for f in fields(Settings)}
    env = {}
    for name, value in settings.items():
        if name not in known:
            raise ValueError(f"unknown amqpd setting {name!r} (see amqpd.config.Settings)")
        env[f"AMQPD_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def _write_definitions(path: Path, users: Mapping[str, str], permissions: Mapping[str, Permissions]) -> Path:
    """A definitions file (imported at every start, so that an in-memory broker has its users after restart)."""
    from amqpd.broker.access.control import hash_password

    vhosts = {"/"} | {v for grants in permissions.values() for v in grants}
    document = {
        "users": [{"name": name, "password_hash": hash_password(pw), "tags": ""} for name, pw in users.items()]
        + [{"name": "guest", "password_hash": hash_password("guest"), "tags": "administrator"}],
        "vhosts": [{"name": v} for v in sorted(vhosts)],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": c, "write": w, "read": r}
            for user in users
            for vhost, (c, w, r) in (permissions.get(user) or {"/": (".*", ".*", ".*")}).items()
        ]
        + [{"user": "guest", "vhost": v, "configure": ".*", "write": ".*", "read": ".*"} for v in sorted(vhosts)],
    }
    path.write_text(json.dumps(document))
    return path
