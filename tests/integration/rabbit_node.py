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
        log = open(self.base / "server.out", "ab")  # noqa: SIM115 - the server's, closed with it
        self.server = subprocess.Popen([SERVER], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.server.poll() is not None or time.monotonic() > deadline:
                output = (self.base / "server.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"RabbitMQ node {self.name} did not start:\n{output}")
            time.sleep(0.2)
        self.beam_pid = int((self.base / "pid").read_text())
        return self

    def _answers(self) -> bool:
        try:
            pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1")).close()
        except pika.exceptions.AMQPError:
            return False
        return True

    def kill(self) -> None:
        """kill -9 of this node's beam process, the broker itself."""
        assert self.beam_pid is not None and self.server is not None
        os.kill(self.beam_pid, signal.SIGKILL)
        self.server.wait(timeout=30)
        self.beam_pid = None

    def close(self) -> None:
        if self.beam_pid is not None:
            os.kill(self.beam_pid, signal.SIGTERM)  # RabbitMQ stops cleanly on SIGTERM
            assert self.server is not None
            try:
                self.server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.beam_pid, signal.SIGKILL)
                self.server.wait(timeout=30)
            self.beam_pid = None
