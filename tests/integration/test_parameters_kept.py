"""Runtime parameters set with amqpctl (rabbitmqctl's commands) are kept across a restart, exported and
imported with the definitions; a shovel, being one, resumes after the restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pika
import pytest
from waiting import wait_for

from amqpd.testing import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.amqpd_only


def ctl(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from amqpd.mgmt.amqpctl import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, "--url", broker.mgmt_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )


def publish(broker: BrokerProcess, queue: str, n: int) -> None:
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        for i in range(n):
            ch.basic_publish("", queue, str(i).encode(), pika.BasicProperties(delivery_mode=2))


def depth(broker: BrokerProcess, queue: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        return conn.channel().queue_declare(queue, durable=True).method.message_count


SHOVEL = {"src-uri": "amqp://", "src-queue": "kept-src", "dest-uri": "amqp://", "dest-queue": "kept-dest"}


def test_parameters_and_limits_survive_a_restart_and_the_shovel_resumes(tmp_path: Path) -> None:
    broker = BrokerProcess(data_dir=str(tmp_path), management=True).start()
    try:
        ctl(broker, "set_parameter", "shovel", "kept", json.dumps(SHOVEL))
        ctl(broker, "set_global_parameter", "cluster_tag", '{"site": "edge-1"}')
        ctl(broker, "set_vhost_limits", '{"max-connections": 64, "max-queues": 10}')
        listed = ctl(broker, "list_parameters", "--formatter", "json").stdout
        assert json.loads(listed)[0]["value"] == SHOVEL
        broker.stop()
        broker = BrokerProcess(data_dir=str(tmp_path), management=True).start()
        api = httpx.Client(base_url=broker.mgmt_url, auth=("guest", "guest"))
        assert api.get("/api/parameters/shovel/%2F/kept").json()["value"] == SHOVEL
        assert api.get("/api/global-parameters/cluster_tag").json()["value"] == {"site": "edge-1"}
        assert json.loads(ctl(broker, "list_vhost_limits").stdout) == {"max-connections": 64, "max-queues": 10}
        publish(broker, "kept-src", 50)
        wait_for(lambda: depth(broker, "kept-dest") == 50, "the recovered shovel moving", timeout=30.0)
        status = json.loads(ctl(broker, "shovel_status", "--formatter", "json").stdout)
        assert [(s["name"], s["state"], s["messages_moved"]) for s in status] == [("kept", "running", 50)]
        ctl(broker, "clear_vhost_limits")
        assert json.loads(ctl(broker, "list_vhost_limits").stdout) == {}
        ctl(broker, "delete_shovel", "kept")
        assert api.get("/api/shovels").json() == []
        assert api.get("/api/parameters").json() == []
    finally:
        broker.close()


def test_exported_parameters_import_into_another_broker_and_run(tmp_path: Path) -> None:
    with BrokerProcess(management=True) as first, BrokerProcess(management=True) as second:
        ctl(first, "set_parameter", "shovel", "moved", json.dumps(SHOVEL))
        ctl(first, "set_global_parameter", "cluster_tag", '"edge"')
        exported = tmp_path / "defs.json"
        ctl(first, "export_definitions", str(exported))
        doc = json.loads(exported.read_text())
        assert {"vhost": "/", "component": "shovel", "name": "moved", "value": SHOVEL} in doc["parameters"]
        assert {"name": "cluster_tag", "value": "edge"} in doc["global_parameters"]
        ctl(second, "import_definitions", str(exported))
        publish(second, "kept-src", 20)
        wait_for(lambda: depth(second, "kept-dest") == 20, "the imported shovel moving", timeout=30.0)
        ctl(second, "restart_shovel", "moved")
        api = httpx.Client(base_url=second.mgmt_url, auth=("guest", "guest"))
        assert api.get("/api/global-parameters/cluster_tag").json()["value"] == "edge"


def test_an_unknown_component_in_definitions_is_refused_naming_it(tmp_path: Path) -> None:
    with BrokerProcess(management=True) as broker:
        doc = {"parameters": [{"vhost": "/", "component": "federation-upstream", "name": "up", "value": {}}]}
        r = httpx.post(broker.mgmt_url + "/api/definitions", json=doc, auth=("guest", "guest"))
        assert r.status_code == 400
        assert "component federation-upstream not found" in r.json()["reason"]
