"""Fixtures for the container tests: podman ready, the image built, containers run and removed.
podman_harness.py says what this machine needs and how it is provided."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from podman_harness import (
    ROOT,
    Container,
    Podman,
    RunContainer,
    base_image_name,
    ensure_packages,
    free_port,
    import_debian_base,
    pip_config_dir,
)


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    ensure_packages()
    workdir = tmp_path_factory.mktemp("podman")
    conf = workdir / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    return Podman(conf)


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image built from the repository's Dockerfile; removed at the end (the base stays, as a cache)."""
    workdir = tmp_path_factory.mktemp("image")
    base = base_image_name()
    if podman("image", "exists", base, check=False).returncode != 0:
        import_debian_base(podman, base, workdir)
    tag = f"localhost/amqpd-test:{uuid.uuid4().hex[:12]}"
    mount = f"{pip_config_dir(workdir)}:/etc/xdg/pip:ro"
    # --layers=false: no intermediate images are left behind once the image is removed.
    build = ("build", "--pull=never", "--format", "docker", "--layers=false", "-v", mount, "-t", tag, str(ROOT))
    podman(*build, timeout=600)
    yield tag
    podman("rmi", "--force", tag, check=False)


@pytest.fixture
def run_container(podman: Podman, image: str) -> Iterator[RunContainer]:
    """Starts containers of the image with each EXPOSEd port published on a free host port; every container
    and every volume named through it are removed at the end of the test."""
    names: list[str] = []
    volumes: list[str] = []

    def run(*, volume: str | None = None, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Container:
        name = f"amqpd-test-{uuid.uuid4().hex[:12]}"
        names.append(name)
        ports = {port: free_port() for port in (5672, 5671, 15672, 15692)}
        command = ["run", "-d", "--name", name]
        command += [f"-p127.0.0.1:{host}:{inside}" for inside, host in ports.items()]
        if volume is not None:
            volumes.append(volume)
            command += ["-v", f"{volume}:/var/lib/amqpd"]
        command += [f"-e{key}={value}" for key, value in (env or {}).items()]
        podman(*command, *args, image)
        return Container(podman, name, ports).wait_ready()

    yield run
    for name in names:
        podman("rm", "--force", "--volumes", "--time", "0", name, check=False)  # anonymous volumes too
    for volume in set(volumes):
        podman("volume", "rm", "--force", volume, check=False)


@pytest.fixture
def volume_name() -> str:
    return f"amqpd-test-{uuid.uuid4().hex[:12]}"
