"""amqpctl through its console entry point (the function pyproject.toml names), against a running amqpd:
rabbitmqctl's commands and columns, the three formatters, exit codes and one-line errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest

from amqpd.testing import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.amqpd_only


def entry_point() -> tuple[str, str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["amqpctl"].partition(":")
    return module, function


Ctl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(management=True, env={"AMQPD_STATS_INTERVAL": "0.2"}) as b:
        yield b


@pytest.fixture
def ctl(broker: BrokerProcess) -> Ctl:
    module, function = entry_point()
    code = f"import sys; from {module} import {function}; sys.exit({function}())"

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        import os

        environment = dict(os.environ, AMQPCTL_URL=broker.mgmt_url, **(env or {}))
        return subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=ROOT, env=environment
        )

    return run


@pytest.fixture
def channel(broker: BrokerProcess) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    yield ch
    conn.close()


def test_list_queues_with_rabbitmqctl_columns_in_each_format(
    ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    channel.queue_declare("ctl-orders")
    for _ in range(3):
        channel.basic_publish("", "ctl-orders", b"x")
    table = ctl("list_queues", "name", "messages", "consumers", "-q")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["name", "messages", "consumers"]
    assert ["ctl-orders", "3", "0"] in [line.split() for line in lines[1:]]
    as_json = json.loads(ctl("list_queues", "name", "messages", "--formatter", "json").stdout)
    assert {"name": "ctl-orders", "messages": 3} in as_json
    rows = list(csv.reader(io.StringIO(ctl("--formatter", "csv", "list_queues").stdout)))
    assert rows[0] == ["name", "messages"] and ["ctl-orders", "3"] in rows


def test_filter_and_watch(ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel) -> None:
    channel.queue_declare("ctl-keep-1")
    channel.queue_declare("ctl-other")
    names = [r["name"] for r in json.loads(ctl("list_queues", "--filter", "^ctl-keep", "--formatter", "json").stdout)]
    assert names == ["ctl-keep-1"]
    watched = ctl("list_queues", "--watch", "0.1", "--watch-count", "2", "--filter", "^ctl-keep")
    assert watched.returncode == 0
    assert watched.stdout.count("publish_rate") == 2  # the watch view shows live rates, refreshed


def test_other_lists_use_rabbitmqctl_default_columns(
    ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    channel.queue_declare("ctl-bound")
    channel.queue_bind("ctl-bound", "amq.topic", "a.*")
    channel.basic_consume("ctl-bound", lambda *a: None, consumer_tag="ctl-tag")
    expected = {
        "list_exchanges": ["name", "type"],
        "list_bindings": [
            "source_name",
            "source_kind",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
        ],
        "list_connections": ["user", "peer_host", "peer_port", "state"],
        "list_consumers": [
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "prefetch_count",
            "active",
            "arguments",
        ],
        "list_users": ["user", "tags"],
        "list_vhosts": ["name"],
        "list_permissions": ["user", "configure", "write", "read"],
    }
    for command, columns in expected.items():
        done = ctl(command, "--formatter", "csv")
        assert done.returncode == 0, (command, done.stderr)
        assert next(csv.reader(io.StringIO(done.stdout))) == columns, command
    bindings = list(csv.DictReader(io.StringIO(ctl("list_bindings", "--formatter", "csv").stdout)))
    assert {
        "source_name": "amq.topic",
        "source_kind": "exchange",
        "destination_name": "ctl-bound",
        "destination_kind": "queue",
        "routing_key": "a.*",
        "arguments": "{}",
    } in bindings
    consumers = json.loads(ctl("list_consumers", "--formatter", "json").stdout)
    assert any(c["consumer_tag"] == "ctl-tag" and c["queue_name"] == "ctl-bound" for c in consumers)


def test_purge_delete_and_exit_codes(ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel) -> None:
    channel.queue_declare("ctl-purge")
    channel.basic_publish("", "ctl-purge", b"x")
    refused = ctl("delete_queue", "ctl-purge", "--if-empty")
    assert refused.returncode == 65
    assert refused.stderr.strip().splitlines() == [
        "Error: queue 'ctl-purge' in vhost '/' not empty (400 DELETE /api/queues/%2F/ctl-purge)"
    ]
    assert ctl("purge_queue", "ctl-purge").returncode == 0
    assert channel.queue_declare("ctl-purge", passive=True).method.message_count == 0
    assert ctl("delete_queue", "ctl-purge", "--if-empty").returncode == 0
    assert ctl("delete_queue", "ctl-purge").returncode == 65  # gone
    assert ctl("list_queues", env={"AMQPCTL_PASSWORD": "wrong"}).returncode == 77
    assert ctl("list_queues", "--url", "http://127.0.0.1:1").returncode == 69
    assert ctl("no_such_command").returncode == 64


def test_users_vhosts_permissions_and_policies(ctl: Ctl, broker: BrokerProcess) -> None:
    assert ctl("add_user", "ctl-alice", "secret").returncode == 0
    assert ctl("set_user_tags", "ctl-alice", "monitoring", "policymaker").returncode == 0
    assert ctl("add_vhost", "ctl-v").returncode == 0
    assert ctl("-p", "ctl-v", "set_permissions", "ctl-alice", ".*", ".*", ".*").returncode == 0
    users = json.loads(ctl("list_users", "--formatter", "json").stdout)
    assert {"user": "ctl-alice", "tags": "monitoring,policymaker"} in users
    perms = json.loads(ctl("-p", "ctl-v", "list_permissions", "--formatter", "json").stdout)
    assert perms == [
        {"user": "ctl-alice", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "guest", "configure": ".*", "write": ".*", "read": ".*"},
    ]  # add_vhost's user too
    assert ctl("change_password", "ctl-alice", "newer").returncode == 0
    params = pika.URLParameters(broker.url.replace("%2F", "ctl-v"))
    params.credentials = pika.PlainCredentials("ctl-alice", "newer")
    pika.BlockingConnection(params).close()
    policy = ctl(
        "-p", "ctl-v", "set_policy", "lim", "^q", '{"max-length": 3}', "--apply-to", "queues", "--priority", "2"
    )
    assert policy.returncode == 0, policy.stderr
    listed = json.loads(ctl("-p", "ctl-v", "list_policies", "--formatter", "json").stdout)
    assert listed == [
        {
            "vhost": "ctl-v",
            "name": "lim",
            "pattern": "^q",
            "apply-to": "queues",
            "definition": {"max-length": 3},
            "priority": 2,
        }
    ]
    assert ctl("-p", "ctl-v", "clear_policy", "lim").returncode == 0
    assert ctl("-p", "ctl-v", "clear_permissions", "ctl-alice").returncode == 0
    assert ctl("delete_vhost", "ctl-v").returncode == 0
    assert ctl("delete_user", "ctl-alice").returncode == 0
    assert "ctl-v" not in ctl("list_vhosts").stdout


def test_export_and_import_definitions(
    ctl: Ctl, tmp_path: Path, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    channel.queue_declare("ctl-exported", durable=True)
    path = tmp_path / "defs.json"
    assert ctl("export_definitions", str(path)).returncode == 0
    doc = json.loads(path.read_text())
    assert any(q["name"] == "ctl-exported" for q in doc["queues"])
    channel.queue_delete("ctl-exported")
    assert ctl("import_definitions", str(path)).returncode == 0
    channel.queue_declare("ctl-exported", durable=True, passive=True)
    path.write_text('{"queues": [{"name": "q", "vhost": "nowhere"}]}')
    bad = ctl("import_definitions", str(path))
    assert bad.returncode == 65 and "queues[0] 'q' in vhost 'nowhere': vhost 'nowhere' does not exist" in bad.stderr


def test_close_connection_and_status(ctl: Ctl, broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    name = next(c for c in json.loads(ctl("list_connections", "name", "--formatter", "json").stdout))["name"]
    assert ctl("close_connection", name, "go away").returncode == 0
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(50):
            conn.process_data_events(0.1)
    assert closed.value.reply_code == 320 and "go away" in closed.value.reply_text
    status = ctl("status")
    assert status.returncode == 0 and "protocol: amqp" in status.stdout
    assert ctl("await_startup").returncode == 0


def test_peek_shows_messages_and_leaves_them(
    ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    channel.queue_declare("ctl-peek")
    for i in range(4):
        channel.basic_publish("", "ctl-peek", b"m%d" % i)
    shown = json.loads(ctl("peek_queue", "ctl-peek", "-n", "2", "--from", "1", "--formatter", "json").stdout)
    assert [(m["payload"], m["redelivered"]) for m in shown] == [("m1", False), ("m2", False)]
    bodies = [channel.basic_get("ctl-peek", auto_ack=True) for _ in range(4)]
    assert [(b[2], b[0].redelivered) for b in bodies] == [(b"m%d" % i, False) for i in range(4)]


def test_move_messages_keeps_order_and_properties(
    ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    channel.queue_declare("ctl-src", durable=True)
    channel.queue_declare("ctl-dst", durable=True)
    for i in range(5):
        channel.basic_publish("", "ctl-src", b"m%d" % i, pika.BasicProperties(delivery_mode=2, message_id=str(i)))
    done = ctl("move_messages", "ctl-src", "ctl-dst", "-n", "3")
    assert done.returncode == 0 and "Moved 3 messages" in done.stdout
    assert channel.queue_declare("ctl-src", durable=True, passive=True).method.message_count == 2
    moved = [channel.basic_get("ctl-dst", auto_ack=True) for _ in range(3)]
    assert [(m[2], m[1].message_id, m[1].delivery_mode) for m in moved] == [
        (b"m0", "0", 2),
        (b"m1", "1", 2),
        (b"m2", "2", 2),
    ]
    missing = ctl("move_messages", "ctl-src", "ctl-nowhere")
    assert missing.returncode == 65
    assert channel.queue_declare("ctl-src", durable=True, passive=True).method.message_count == 2  # none lost


def test_replay_dead_letters_republishes_where_each_came_from(
    ctl: Ctl, channel: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    channel.queue_declare("ctl-dlq")
    channel.queue_declare("ctl-work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "ctl-dlq"})
    channel.exchange_declare("ctl-in", "direct")
    channel.queue_bind("ctl-work", "ctl-in", "job")
    for i in range(3):
        channel.basic_publish("ctl-in", "job", b"j%d" % i)
    for _ in range(3):
        method, _props, _body = channel.basic_get("ctl-work")
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert channel.queue_declare("ctl-dlq", passive=True).method.message_count == 3
    done = ctl("replay_dead_letters", "ctl-dlq")
    assert done.returncode == 0 and "Replayed 3 messages" in done.stdout
    assert channel.queue_declare("ctl-dlq", passive=True).method.message_count == 0
    back = [channel.basic_get("ctl-work", auto_ack=True) for _ in range(3)]
    assert [(m[0].exchange, m[0].routing_key, m[2]) for m in back] == [("ctl-in", "job", b"j%d" % i) for i in range(3)]
