"""HTTPS for the management API and the Prometheus listener (RabbitMQ's management.ssl.* and prometheus.ssl.*),
with certificates made here: httpx, amqpctl and Debian's rabbitmqadmin over HTTPS, client certificates checked
against the CA when mgmt_tls_verify_peer is on (a wrong or missing one refused at the handshake), and a
certificate replaced without a restart (SIGHUP)."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_rabbitmqadmin import rabbitmqadmin_path
from test_tls import Certs
from tls_certs import CA, write_pair

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only  # brokers of their own, configured for HTTPS

GUEST = ("guest", "guest")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("mgmt-tls"))


def https_broker(certs: Certs, directory: Path, extra_args: list[str] | None = None, **extra: Any) -> BrokerProcess:
    """Management and Prometheus over HTTPS on free ports, client certificates asked for (verify_peer) but
    not required unless a test says so. BrokerProcess(management=True) also names the plain ports (0), so
    both HTTP and HTTPS are served, as on RabbitMQ when management.tcp.* and management.ssl.* are both set."""
    settings: dict[str, Any] = {}
    for prefix in ("mgmt_tls", "prometheus_tls"):
        settings |= {
            f"{prefix}_port": 0,
            f"{prefix}_cert_file": str(certs.server_cert),
            f"{prefix}_key_file": str(certs.server_key),
            f"{prefix}_ca_file": str(certs.ca_file),
            f"{prefix}_verify_peer": True,
        }
    settings |= extra
    config = directory / "amqpd.toml"
    config.write_text("[amqpd]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    return BrokerProcess(management=True, extra_args=["--config", str(config), "--in-memory", *(extra_args or [])])


@pytest.fixture(scope="module")
def broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with https_broker(certs, tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture(scope="module")
def strict(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Client certificates required (mgmt_tls_fail_if_no_peer_cert), and no plain HTTP management port."""
    with https_broker(
        certs, tmp_path_factory.mktemp("strict"), ["--management-port", "off"], mgmt_tls_fail_if_no_peer_cert=True
    ) as b:
        yield b


def test_the_api_and_metrics_are_served_over_https_next_to_http(broker: BrokerProcess, certs: Certs) -> None:
    with httpx.Client(verify=certs.client_context(), auth=GUEST, timeout=10) as client:
        overview = client.get(broker.mgmt_tls_url + "/api/overview").json()
        protocols = {entry["protocol"]: entry["port"] for entry in overview["listeners"]}
        assert protocols["https"] == broker.http_ports["management-tls"]
        assert protocols["https/prometheus"] == broker.http_ports["prometheus-tls"]
        assert protocols["http"] == broker.http_ports["management"]
        metrics = client.get(f"https://127.0.0.1:{broker.http_ports['prometheus-tls']}/metrics")
        assert "rabbitmq_queues" in metrics.text
        assert client.get(broker.mgmt_tls_url + "/api/whoami", auth=("guest", "wrong")).status_code == 401
    assert httpx.get(broker.mgmt_url + "/api/whoami", auth=GUEST, timeout=10).json()["name"] == "guest"


def test_a_client_that_does_not_trust_the_ca_is_refused(broker: BrokerProcess) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(broker.mgmt_tls_url + "/api/overview", auth=GUEST, timeout=10)


def test_a_client_certificate_from_another_ca_is_refused_while_the_ca_s_own_is_accepted(
    broker: BrokerProcess, certs: Certs
) -> None:
    with pytest.raises(httpx.TransportError):  # the handshake fails (TLS 1.3: at the first read)
        httpx.get(
            broker.mgmt_tls_url + "/api/overview", auth=GUEST, timeout=10, verify=certs.client_context(certs.rogue)
        )
    ok = httpx.get(
        broker.mgmt_tls_url + "/api/overview", auth=GUEST, timeout=10, verify=certs.client_context(certs.client)
    )
    assert ok.status_code == 200
    anonymous = httpx.get(broker.mgmt_tls_url + "/api/overview", auth=GUEST, timeout=10, verify=certs.client_context())
    assert anonymous.status_code == 200  # verify_peer without fail_if_no_peer_cert: no certificate is fine


def test_fail_if_no_peer_cert_refuses_clients_without_one(strict: BrokerProcess, certs: Certs) -> None:
    assert "management" not in strict.http_ports  # --management-port off: HTTPS only
    with pytest.raises(httpx.TransportError):
        httpx.get(strict.mgmt_tls_url + "/api/overview", auth=GUEST, timeout=10, verify=certs.client_context())
    ok = httpx.get(
        strict.mgmt_tls_url + "/api/overview", auth=GUEST, timeout=10, verify=certs.client_context(certs.client)
    )
    assert ok.json()["management_version"]


def amqpctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqpd.mgmt.amqpctl", *args], capture_output=True, text=True, timeout=60
    )


def test_amqpctl_over_https_with_a_ca_and_a_client_certificate(strict: BrokerProcess, certs: Certs) -> None:
    cert, key = certs.client
    done = amqpctl(
        "--url",
        strict.mgmt_tls_url,
        "--ssl-ca-cert-file",
        str(certs.ca_file),
        "--ssl-cert-file",
        str(cert),
        "--ssl-key-file",
        str(key),
        "--formatter",
        "json",
        "list_vhosts",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"name": "/"}]
    no_cert = amqpctl("--url", strict.mgmt_tls_url, "--cacert", str(certs.ca_file), "list_vhosts")
    assert no_cert.returncode == 69  # unreachable: the handshake failed
    assert len(no_cert.stderr.strip().splitlines()) == 1
    untrusted = amqpctl("--url", strict.mgmt_tls_url, "list_vhosts")
    assert untrusted.returncode == 69 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_rabbitmqadmin_over_https(strict: BrokerProcess, certs: Certs) -> None:
    cert, key = certs.client
    port = str(strict.http_ports["management-tls"])
    base = [
        sys.executable,
        rabbitmqadmin_path(),
        "-H",
        "127.0.0.1",
        "-P",
        port,
        "-u",
        "guest",
        "-p",
        "guest",
        "--ssl",
        "--ssl-ca-cert-file",
        str(certs.ca_file),
    ]
    with_cert = ["--ssl-cert-file", str(cert), "--ssl-key-file", str(key)]
    declared = subprocess.run(
        [*base, *with_cert, "declare", "queue", "name=over-https"], capture_output=True, text=True, timeout=60
    )
    assert declared.returncode == 0, declared.stderr
    listed = subprocess.run(
        [*base, *with_cert, "-f", "tsv", "list", "queues", "name"], capture_output=True, text=True, timeout=60
    )
    assert "over-https" in listed.stdout.split()
    refused = subprocess.run([*base, "list", "queues"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0  # no client certificate


def test_sighup_replaces_the_https_certificate_without_a_restart(certs: Certs, tmp_path: Path) -> None:
    directory = tmp_path
    first_ca = CA("first CA")
    second_ca = CA("second CA")
    server_cert, server_key = write_pair(*first_ca.issue("localhost", server=True), directory, "server")
    first_file, second_file = first_ca.write(directory / "first.crt"), second_ca.write(directory / "second.crt")
    files = {
        "mgmt_tls_cert_file": str(server_cert),
        "mgmt_tls_key_file": str(server_key),
        "mgmt_tls_ca_file": "",
        "mgmt_tls_verify_peer": False,
    }
    with https_broker(certs, directory, **files) as b:
        trusting = {
            name: ssl.create_default_context(cafile=str(path))
            for name, path in (("first", first_file), ("second", second_file))
        }
        assert httpx.get(b.mgmt_tls_url + "/api/whoami", auth=GUEST, verify=trusting["first"]).status_code == 200
        write_pair(*second_ca.issue("localhost", server=True), directory, "server")  # same paths, new CA
        assert b.proc is not None
        b.proc.send_signal(signal.SIGHUP)

        def reloaded() -> bool:
            return any("TLS certificate reloaded" in line and "mgmt_tls" in line for line in b.stderr_lines)

        deadline = time.monotonic() + 10
        while not reloaded():
            assert time.monotonic() < deadline, "no reload logged after SIGHUP"
            time.sleep(0.05)
        assert httpx.get(b.mgmt_tls_url + "/api/whoami", auth=GUEST, verify=trusting["second"]).status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(b.mgmt_tls_url + "/api/whoami", auth=GUEST, verify=trusting["first"])


def test_an_unusable_management_certificate_leaves_that_listener_out_not_the_broker(
    certs: Certs, tmp_path: Path
) -> None:
    with https_broker(certs, tmp_path, mgmt_tls_cert_file=str(tmp_path / "missing.crt")) as b:
        assert "management-tls" not in b.http_ports and "prometheus-tls" in b.http_ports
        assert httpx.get(b.mgmt_url + "/api/whoami", auth=GUEST, timeout=10).status_code == 200
        deadline = time.monotonic() + 10  # stderr is read by its own thread
        while not any("https listener not started" in line and "missing.crt" in line for line in b.stderr_lines):
            assert time.monotonic() < deadline, b.stderr_lines
            time.sleep(0.05)


def test_the_web_ui_is_served_over_https_with_its_policy(broker: BrokerProcess, certs: Certs) -> None:
    with httpx.Client(verify=certs.client_context(), timeout=10) as client:
        page = client.get(broker.mgmt_tls_url + "/")
        assert page.status_code == 200 and 'src="/ui/app.js"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert client.get(broker.mgmt_tls_url + "/ui/app.js").status_code == 200
