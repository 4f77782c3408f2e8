"""A RabbitMQ node of the test's own, beside the reference: the same installed rabbitmq-server with its own
node name, ports, data and log directories and no plugins, so that a test may kill -9 it (by the pid of its
beam process, which only this node has) and start it again on the same data. The reference is never touched."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pika

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # the script itself: the packaged wrapper would switch user


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RabbitNode:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.name = f"amqpd-test-{uuid.uuid4().hex[:8]}@localhost"
        self.port, self.dist_port = _free_port(), _free_port()
        (base / "enabled_plugins").write_text("[].\n")
        self.server: subprocess.Popen[bytes] | None = None
        self.beam_pid: int | None = None
        self.held: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self, timeout: float = 120.0) -> RabbitNode:
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.base / "plugins-expand"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq"),  # none: the defaults
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / "advanced.config"),
        }
        (self.base / "pid").unlink(missing_ok=True)
        self._release_ports()
        log = open(self.base / "server.out", "ab")  # noqa: SIM115 - the server's, closed with it
        self.server = subprocess.Popen([SERVER], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.beam_pid is None and (self.base / "pid").exists():
                self.beam_pid = int((self.base / "pid").read_text() or 0) or None  # close() needs it
            if self.server.poll() is not None or time.monotonic() > deadline:
                output = (self.base / "server.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"RabbitMQ node {self.name} did not start:\n{output}")
            time.sleep(0.2)
        self.beam_pid = int((self.base / "pid").read_text())
        return self

    def _answers(self) -> bool:
        """Our node answers: RabbitMQ names its cluster after its node (another broker may have taken the port
        while this one was down, and must not pass for it)."""
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1"))
        except pika.exceptions.AMQPError:
            return False
        cluster = connection._impl.server_properties.get("cluster_name")
        connection.close()
        if not isinstance(cluster, str) or cluster.split("@")[0] != self.name.split("@")[0]:
            raise RuntimeError(f"port {self.port} answers as {cluster!r}, not as the node {self.name}")
        return True

    def _hold_ports(self) -> None:
        """While the node is down its ports stay ours (bound, not listening: a connection is refused), so that
        no other process of the machine takes them before it starts again on them."""
        for port in (self.port, self.dist_port):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            self.held.append(s)

    def _release_ports(self) -> None:
        for s in self.held:
            s.close()
        self.held.clear()

    def kill(self) -> None:
        """kill -9 of this node's beam process, the broker itself."""
        assert self.beam_pid is not None and self.server is not None
        os.kill(self.beam_pid, signal.SIGKILL)
        self.server.wait(timeout=30)
        self.beam_pid = None
        self._hold_ports()

    def stop(self) -> None:
        """A clean stop that keeps the node's data: what it wrote is on disk when it comes back."""
        self._stop()
        self._hold_ports()

    def close(self) -> None:
        self._release_ports()
        self._stop()

    def _stop(self) -> None:
        if self.beam_pid is not None:
            os.kill(self.beam_pid, signal.SIGTERM)  # RabbitMQ stops cleanly on SIGTERM
            assert self.server is not None
            try:
                self.server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.beam_pid, signal.SIGKILL)
                self.server.wait(timeout=30)
            self.beam_pid = None
