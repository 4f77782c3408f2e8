"""The image as a user of RabbitMQ's official one would use it: `docker run -d -p 5672:5672 -p 15672:15672`,
guest/guest from the host, the management API on the published port, data kept in the volume across a
`docker stop` and a new container, AMQPD_DEFAULT_USER, config from a mounted file and the environment, a
health check. Built and run with podman (conftest.py says how and why)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
from pathlib import Path

import httpx
import pika
import pika.exceptions as pex
import pytest
from pika import BlockingConnection as Connection
from podman_harness import Container, Podman, RunContainer

pytestmark = pytest.mark.timeout(900)  # the first run installs podman, builds the base and the image

MESSAGES = 500


def connect(container: Container, user: str = "guest", password: str = "guest", vhost: str = "/") -> Connection:
    credentials = pika.PlainCredentials(user, password)
    port = container.ports[5672]
    params = pika.ConnectionParameters("127.0.0.1", port, vhost, credentials, connection_attempts=1, socket_timeout=10)
    return pika.BlockingConnection(params)


def management(container: Container, path: str, auth: tuple[str, str] = ("guest", "guest")) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{container.ports[15672]}{path}", auth=auth, timeout=10)


def test_the_image_declares_its_ports_volume_user_and_health_check(podman: Podman, image: str) -> None:
    inspected = json.loads(podman("image", "inspect", image).stdout)[0]
    config = inspected["Config"]
    assert {"5671/tcp", "5672/tcp", "15671/tcp", "15672/tcp", "15691/tcp", "15692/tcp"} <= set(config["ExposedPorts"])
    assert "/var/lib/amqpd" in config["Volumes"]
    assert config["User"] == "amqpd"
    assert inspected["Healthcheck"]["Test"][0] == "CMD"  # podman's inspect keeps it beside Config


def test_guest_logs_in_from_the_host_and_every_http_listener_answers(run_container: RunContainer) -> None:
    container = run_container()
    conn = connect(container)
    conn.channel().queue_declare("from-the-host")
    overview = management(container, "/api/overview")
    assert overview.status_code == 200
    assert overview.json()["object_totals"]["queues"] == 1
    conn.close()
    metrics = httpx.get(f"http://127.0.0.1:{container.ports[15692]}/metrics", timeout=10)
    assert metrics.status_code == 200 and "rabbitmq_" in metrics.text
    # The broker itself runs as the image's user, not root.
    uid = container.podman("exec", container.name, "awk", "/^Uid:/ {print $2}", "/proc/1/status").stdout.strip()
    assert uid != "0" and uid == container.podman("exec", container.name, "id", "-u", "amqpd").stdout.strip()


def publish_confirmed(container: Container, queue: str, count: int) -> None:
    conn = connect(container)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(count):
        ch.basic_publish("", queue, f"message {i}".encode(), persistent, mandatory=True)  # raises unless confirmed
    conn.close()


def consume_all(container: Container, queue: str) -> list[bytes]:
    conn = connect(container)
    ch = conn.channel()
    bodies = []
    while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    conn.close()
    return bodies


def test_confirmed_messages_survive_docker_stop_and_a_new_container_on_the_volume(
    run_container: RunContainer, volume_name: str
) -> None:
    first = run_container(volume=volume_name)
    publish_confirmed(first, "kept", MESSAGES)
    # podman stop sends SIGTERM and SIGKILLs after 10 s: exit code 0 means amqpd stopped by itself, in time.
    first.podman("stop", "--time", "10", first.name, timeout=60)
    assert first.inspect("{{.State.ExitCode}}") == "0", first.logs()[-3000:]
    first.podman("rm", first.name)
    second = run_container(volume=volume_name)
    assert consume_all(second, "kept") == [f"message {i}".encode() for i in range(MESSAGES)]


def test_the_default_user_and_vhost_replace_guest_on_a_fresh_volume(
    run_container: RunContainer, volume_name: str
) -> None:
    env = {"AMQPD_DEFAULT_USER": "app", "AMQPD_DEFAULT_PASS": "app-secret", "AMQPD_DEFAULT_VHOST": "apps"}
    container = run_container(volume=volume_name, env=env)
    conn = connect(container, "app", "app-secret", "apps")
    conn.channel().queue_declare("app-queue", durable=True)
    conn.close()
    with pytest.raises(pex.ProbableAuthenticationError):
        connect(container, "guest", "guest")
    assert management(container, "/api/whoami", ("app", "app-secret")).json()["tags"] == ["administrator"]


def test_config_from_a_mounted_file_and_from_the_environment(run_container: RunContainer, tmp_path: Path) -> None:
    config = tmp_path / "amqpd.toml"
    config.write_text("[amqpd]\nloopback_users = []\nchannel_max = 11\nheartbeat = 30\n")
    config.chmod(0o644)
    mount = ("-v", f"{config}:/etc/amqpd/amqpd.toml:ro")
    container = run_container(env={"AMQPD_HEARTBEAT": "13"}, args=mount)  # the environment wins over the file
    conn = connect(container)
    [connection] = management(container, "/api/connections").json()
    assert (connection["channel_max"], connection["timeout"]) == (11, 13)
    conn.close()


def test_a_mounted_file_of_ones_own_keeps_guest_to_the_container_unless_it_says_otherwise(
    run_container: RunContainer, tmp_path: Path
) -> None:
    config = tmp_path / "amqpd.toml"
    config.write_text("[amqpd]\nheartbeat = 30\n")
    config.chmod(0o644)
    container = run_container(args=("-v", f"{config}:/etc/amqpd/amqpd.toml:ro"))
    with pytest.raises(pex.ProbableAuthenticationError):
        connect(container)
    opened = run_container(args=("-v", f"{config}:/etc/amqpd/amqpd.toml:ro"), env={"AMQPD_LOOPBACK_USERS": ""})
    connect(opened).close()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(mode=0o755)
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    key.chmod(0o644)  # the image's user reads it through the mount
    return cert, key


def test_amqps_answers_on_its_published_port_with_a_mounted_certificate(
    run_container: RunContainer, tmp_path: Path
) -> None:
    cert, _ = self_signed_certificate(tmp_path / "certs")
    env = {"AMQPD_TLS_CERT_FILE": "/etc/amqpd/certs/server.crt", "AMQPD_TLS_KEY_FILE": "/etc/amqpd/certs/server.key"}
    container = run_container(env=env, args=("-v", f"{cert.parent}:/etc/amqpd/certs:ro"))
    context = ssl.create_default_context(cafile=str(cert))
    params = pika.ConnectionParameters(
        "127.0.0.1",
        container.ports[5671],
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(context, "127.0.0.1"),
        connection_attempts=1,
        socket_timeout=10,
    )
    conn = pika.BlockingConnection(params)
    assert conn.channel().queue_declare("over-tls").method.queue == "over-tls"
    conn.close()


def test_the_health_check_follows_the_broker(run_container: RunContainer) -> None:
    container = run_container()
    assert container.podman("healthcheck", "run", container.name, check=False).returncode == 0
    assert container.inspect("{{.State.Health.Status}}") == "healthy"
    # A broker that no longer answers (stopped, not dead: its port still accepts) is reported unhealthy. The
    # signal comes from the host: inside its PID namespace, amqpd (PID 1) ignores SIGSTOP.
    pid = int(container.inspect("{{.State.Pid}}"))
    os.kill(pid, signal.SIGSTOP)
    try:
        assert container.podman("healthcheck", "run", container.name, check=False, timeout=60).returncode != 0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert container.podman("healthcheck", "run", container.name, check=False).returncode == 0
