"""Every Docker engine call of the container lane (the SDK), except the BuildKit build itself.

Containers run least-privileged: as the invoking uid:gid, no network, no --privileged, the suite
mounted read-only and only the cell's results directory writable; the container is always
removed, and all it printed lands in log.txt even when it dies.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from docker.types import DeviceRequest

from convmatrix.errors import BadInput
from convmatrix.images import LABEL_HASH, Plan

SUITE_MOUNT = "/suite"
RESULTS_MOUNT = "/results"
SHM_SIZE = "2g"  # xdist workers and DataLoader-style code share tensors through /dev/shm


class EngineError(BadInput):
    """The Docker engine failed (not reachable, image missing, no GPU runtime): an infrastructure
    failure of the cell, never a finding about its stack."""


def unix_socket_problem() -> str | None:
    """Why the engine's unix socket does not answer, checked with a socket we close ourselves:
    the SDK leaks its socket when a connect fails (docker 7.x, UnixHTTPConnection.connect)."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None  # tcp/ssh engines: the SDK reports those itself
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as probe:
        probe.settimeout(10)
        try:
            probe.connect(host.removeprefix("unix://"))
        except OSError as exc:
            return f"{host}: {exc.strerror or exc}"
    return None


@contextlib.contextmanager
def client() -> Iterator[Any]:
    """A connection to the engine, closed however the block ends (no socket left to the GC)."""
    problem = unix_socket_problem()
    if problem:
        raise EngineError(f"docker: the engine is not reachable ({problem}); start dockerd or set DOCKER_HOST")
    try:
        engine = docker.from_env(timeout=300)
    except DockerException as exc:
        raise EngineError(f"docker: the engine is not reachable ({first_line(exc)}); start dockerd "
                          "or set DOCKER_HOST") from None
    with contextlib.closing(engine):
        try:
            engine.ping()
        except DockerException as exc:
            raise EngineError(f"docker: the engine is not reachable ({first_line(exc)}); start dockerd "
                              "or set DOCKER_HOST") from None
        yield engine


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def image_id(engine: Any, reference: str) -> str:
    """The local image id of a reference, or "" when it is not here."""
    try:
        return str(engine.images.get(reference).id)
    except ImageNotFound:
        return ""
    except APIError as exc:
        raise EngineError(f"docker: cannot inspect {reference}: {first_line(exc)}") from None


def built_digests(engine: Any) -> set[str]:
    """The content hashes of every cell image already built (one engine call for all cells)."""
    try:
        images = engine.images.list(filters={"label": LABEL_HASH})
    except APIError as exc:
        raise EngineError(f"docker: cannot list images: {first_line(exc)}") from None
    return {str(img.labels.get(LABEL_HASH)) for img in images}


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What one container run gets: the image, the command, and where results go."""

    image: str
    command: list[str]
    results_dir: Path
    suite_dir: Path
    gpu_index: int | None  # None: no GPU requested (a CPU runner)
    environment: dict[str, str]


def run_kwargs(spec: RunSpec) -> dict[str, Any]:
    """The engine arguments of a run (unit-tested: this is what a GPU runner is sent)."""
    device_requests = (
        [DeviceRequest(device_ids=[str(spec.gpu_index)], capabilities=[["gpu"]])]
        if spec.gpu_index is not None else []
    )
    return {
        "image": spec.image,
        "command": spec.command,
        "detach": True,
        "user": f"{os.getuid()}:{os.getgid()}",
        "network_mode": "none",
        "privileged": False,
        "shm_size": SHM_SIZE,
        "working_dir": "/tmp",
        "environment": {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **spec.environment},
        "volumes": {
            str(spec.suite_dir): {"bind": SUITE_MOUNT, "mode": "ro"},
            str(spec.results_dir.resolve()): {"bind": RESULTS_MOUNT, "mode": "rw"},
        },
        "device_requests": device_requests,
    }


@contextlib.contextmanager
def started(engine: Any, spec: RunSpec) -> Iterator[Any]:
    """A running container that is removed however the block ends."""
    try:
        container = engine.containers.run(**run_kwargs(spec))
    except ImageNotFound:
        raise EngineError(f"docker: image {spec.image} is missing; run `nox -s build`") from None
    except APIError as exc:
        # "could not select device driver" is a GPU runner without the NVIDIA container runtime.
        raise EngineError(f"docker: cannot start the container: {first_line(exc)}") from None
    try:
        yield container
    finally:
        with contextlib.suppress(DockerException):
            container.remove(force=True)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    exit_code: int
    oom_killed: bool


def run(engine: Any, spec: RunSpec, log: Path) -> Outcome:
    """Run the suite in a container, appending all it prints to log; its exit status."""
    with started(engine, spec) as container, log.open("ab") as out:
        out.write(f"$ docker run {spec.image} {' '.join(spec.command)}\n".encode())
        try:
            for chunk in container.logs(stream=True, follow=True):
                out.write(chunk)
                out.flush()
            status = container.wait()
            container.reload()  # for State.OOMKilled, known only once it has exited
            state = container.attrs
        except DockerException as exc:
            out.write(f"convmatrix: lost the container: {first_line(exc)}\n".encode())
            raise EngineError(f"docker: lost the container of {spec.image}: {first_line(exc)}") from None
    oom = bool(state.get("State", {}).get("OOMKilled"))
    return Outcome(exit_code=int(status.get("StatusCode", 1)), oom_killed=oom)


def describe(engine: Any, p: Plan) -> dict[str, str]:
    """What cell.json records of the image: its id, tag and content hash (and the base's id)."""
    return {"image": p.tag, "image_id": image_id(engine, p.tag), "image_hash": p.digest,
            "base": p.cell.base, "base_id": image_id(engine, p.cell.base)}
