"""RabbitMQ's own rabbitmqadmin (from Debian's rabbitmq-server package, the management plugin's
priv/www/cli/rabbitmqadmin) run unchanged against amqpd: list, declare, publish, get, export and import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from amqpd.testing import BrokerProcess

CANDIDATES = [
    "/usr/bin/rabbitmqadmin",
    *sorted(
        str(p)
        for p in Path("/usr/lib/rabbitmq/lib").glob(
            "rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin"
        )
    ),
]

pytestmark = pytest.mark.amqpd_only


def rabbitmqadmin_path() -> str:
    for path in [shutil.which("rabbitmqadmin"), *CANDIDATES]:
        if path and Path(path).exists():
            return path
    pytest.fail("rabbitmqadmin not found: install Debian's rabbitmq-server (scripts/ensure-rabbitmq.sh)")


Admin = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def admin() -> Iterator[Admin]:
    tool = rabbitmqadmin_path()
    with BrokerProcess(management=True) as broker:
        port = str(broker.http_ports["management"])

        def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
            done = subprocess.run(
                [sys.executable, tool, "-H", "127.0.0.1", "-P", port, "-u", "guest", "-p", "guest", *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if ok:
                assert done.returncode == 0, (args, done.stdout, done.stderr)
            return done

        yield run


def tsv(done: subprocess.CompletedProcess[str]) -> list[list[str]]:
    return [line.split("\t") for line in done.stdout.strip().splitlines()]


def test_declare_publish_get_and_list(admin: Admin) -> None:
    assert "queue declared" in admin("declare", "queue", "name=adm-q", "durable=true").stdout
    admin("declare", "exchange", "name=adm-x", "type=topic")
    admin("declare", "binding", "source=adm-x", "destination=adm-q", "routing_key=a.#")
    assert "Message published" in admin("publish", "exchange=adm-x", "routing_key=a.b", "payload=hello").stdout
    rows = tsv(admin("-f", "tsv", "list", "queues", "name", "messages"))
    assert ["adm-q", "1"] in rows
    assert ["adm-x", "adm-q", "a.#"] in tsv(
        admin("-f", "tsv", "list", "bindings", "source", "destination", "routing_key")
    )
    assert ["adm-x", "topic"] in tsv(admin("-f", "tsv", "list", "exchanges", "name", "type"))
    got = tsv(admin("-f", "tsv", "get", "queue=adm-q", "ackmode=ack_requeue_false"))
    header, row = got[0], got[1]
    assert dict(zip(header, row, strict=True))["payload"] == "hello"
    assert ["adm-q", "0"] in tsv(admin("-f", "tsv", "list", "queues", "name", "messages"))
    admin("delete", "queue", "name=adm-q")
    assert ["adm-q", "0"] not in tsv(admin("-f", "tsv", "list", "queues", "name", "messages"))


def test_export_and_import_definitions(admin: Admin, tmp_path: Path) -> None:
    admin("declare", "queue", "name=adm-export", "durable=true")
    admin("declare", "policy", "name=adm-pol", "pattern=^adm-", 'definition={"max-length": 5}', "apply-to=queues")
    path = tmp_path / "defs.json"
    admin("export", str(path))
    text = path.read_text()
    assert '"adm-export"' in text and '"adm-pol"' in text
    admin("delete", "queue", "name=adm-export")
    admin("delete", "policy", "name=adm-pol")
    admin("import", str(path))
    assert ["adm-export"] in tsv(admin("-f", "tsv", "list", "queues", "name"))
    policies = tsv(admin("-f", "tsv", "list", "policies", "name", "pattern"))
    assert ["adm-pol", "^adm-"] in policies


def test_users_permissions_and_errors(admin: Admin) -> None:
    admin("declare", "user", "name=adm-bob", "password=pw", "tags=monitoring")
    admin("declare", "permission", "vhost=/", "user=adm-bob", "configure=.*", "write=.*", "read=.*")
    assert ["adm-bob", "monitoring"] in tsv(admin("-f", "tsv", "list", "users", "name", "tags"))
    missing = admin("purge", "queue", "name=adm-nope", ok=False)
    assert missing.returncode != 0 and "Not found" in missing.stderr
    admin("delete", "user", "name=adm-bob")
