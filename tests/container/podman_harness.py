"""Building and running the container image with podman, as a user's `docker build` / `docker run` would.

What this machine needs, and what the fixtures therefore do (issue #25):
- podman, runc and debootstrap from Debian's packages, installed with apt-get when missing (root required);
- a Debian 12 base made with `debootstrap --variant=minbase bookworm` and `podman import`, tagged with the
  Dockerfile's FROM name so that the build runs with --pull=never; kept between runs (the only thing left
  behind);
- `--runtime runc --cgroup-manager=cgroupfs` (crun refuses this machine's hybrid cgroups) and a
  containers.conf with `default_ulimits = []` (setrlimit is refused here), through CONTAINERS_CONF;
- pip inside the build trusts the machine's CA bundle: a directory holding a copy of it and a pip.conf naming
  it is mounted at pip's system-wide config location (/etc/xdg/pip) for the build only;
- `--format docker`, since podman's own format drops HEALTHCHECK.
Every container, volume and the built image are removed at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_FLAGS = ("--runtime", "runc", "--cgroup-manager=cgroupfs")
PACKAGES = ("podman", "runc", "debootstrap")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
READY_LINE = "amqpd listening on 0.0.0.0:5672"


class Podman:
    """Runs podman with this machine's flags and a containers.conf of the test's own."""

    def __init__(self, containers_conf: Path) -> None:
        self.env = dict(os.environ, CONTAINERS_CONF=str(containers_conf))

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *RUNTIME_FLAGS, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done


def tool(name: str) -> str | None:
    """Where a command is, /usr/sbin included (debootstrap lives there; a non-login PATH may lack it)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def ensure_packages() -> None:
    missing = [p for p in PACKAGES if tool(p) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.fail(f"{', '.join(missing)} missing and not root: apt-get install {' '.join(PACKAGES)}")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run_checked([*apt, "update"], timeout=300, env=env)
    run_checked([*apt, "install", "-y", *PACKAGES], timeout=600, env=env)


def run_checked(command: list[str], timeout: float, env: dict[str, str] | None = None) -> None:
    """Runs a setup command; its failure says what it printed."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")


def base_image_name() -> str:
    """The Dockerfile's first FROM, fully qualified as podman stores a pulled image of that name."""
    match = re.search(r"^FROM\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile has no FROM line"
    name = match[1]
    return name if "/" in name else f"docker.io/library/{name}"


def import_debian_base(podman: Podman, tag: str, workdir: Path) -> None:
    """Debian 12 from Debian's own packages, as debian:bookworm-slim is (minus its doc and locale trimming)."""
    rootfs = workdir / "rootfs"
    try:
        debootstrap = tool("debootstrap") or "debootstrap"
        run_checked([debootstrap, "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR], timeout=600)
        for leftovers in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftovers).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["podman", *RUNTIME_FLAGS, "import", "--change", 'CMD ["bash"]', "-", tag],
            stdin=tar.stdout,
            env=podman.env,
            capture_output=True,
            timeout=300,
        )
        assert tar.wait(60) == 0 and imported.returncode == 0, imported.stderr.decode()[-2000:]
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def pip_config_dir(workdir: Path) -> Path:
    """What the build mounts at /etc/xdg/pip: the CA bundle pip uses on this machine, and a pip.conf naming it."""
    bundle = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    directory = workdir / "pip"
    directory.mkdir()
    if bundle.is_file():
        shutil.copy(bundle, directory / "ca-bundle.crt")
        (directory / "pip.conf").write_text("[global]\ncert = /etc/xdg/pip/ca-bundle.crt\n")
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Container:
    podman: Podman
    name: str
    ports: dict[int, int]  # container port -> host port

    def logs(self) -> str:
        done = self.podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def inspect(self, template: str) -> str:
        return self.podman("inspect", "--format", template, self.name).stdout.strip()

    def wait_ready(self, timeout: float = 90) -> Container:
        """Until amqpd says it listens (the port mappings are in place before the container starts)."""
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.logs():
            if self.inspect("{{.State.Running}}") != "true":
                raise AssertionError(f"container {self.name} exited:\n{self.logs()[-3000:]}")
            assert time.monotonic() < deadline, f"amqpd in {self.name} not ready:\n{self.logs()[-3000:]}"
            time.sleep(0.2)
        return self


RunContainer = Callable[..., Container]
