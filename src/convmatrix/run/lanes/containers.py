"""Every container engine call (the docker SDK), except the image build itself: the container
lane's, and the few of `convmatrix gc` (images by label, their removal) and of --prepare-disk (the
engine's data root).

Two engines answer the same SDK: Docker, and Podman through its Docker-compatible API
(`podman system service`, started here on its socket when none answers; it exits by itself once
idle). What differs is kept here, in run_kwargs and client: the socket, GPUs (Docker's NVIDIA
device request; on Podman a CDI device request naming `nvidia.com/gpu=<index>`, or
`nvidia.com/gpu=<index>:<MIG device>` for a MIG slice, which Podman's compatible API honours from
5.4.0), Podman's explicit resource limits (below), and the name of its
removal event (`remove`, Docker's `destroy`). docs/container-lane.md says how Apptainer or enroot would
plug into the same seam.

Containers run least-privileged: never as the host's root (the invoking uid:gid, or nobody's when
the harness is root; under rootless Podman the container's root, which its user namespace maps to
the invoking user, run_kwargs says why), every capability dropped, no-new-privileges, a read-only
root file system with a tmpfs /tmp, a pids limit, a memory limit when $CONVMATRIX_CONTAINER_MEMORY
asks for one (a default would turn large cases into false regressions), no network, GPUs only
through the engine's device request, the suite mounted read-only and a scratch directory the only
writable mount (the lane copies the plain files it expects out of it); the container is always
removed, and all it printed lands in log.txt even when it dies.

How a run ends, and why the engine removes the container (auto_remove): whoever ends it, the
engine removes the container as soon as it exits, even when this process is gone (SIGKILLed:
nox escalates an interrupt to SIGKILL after 0.5 s). Since the engine may remove it the moment it
exits, and its state and log file with it, nothing is read from the container after its end: its
output comes through an attach made before it starts (not from its log file), and its exit status
and an OOM kill from the engine's events (`die` with the exit code, `oom`), subscribed to before
it starts; `destroy` then confirms the removal. A SIGTERM or SIGINT of the lane (interruptible())
raises Interrupted in the main thread, wherever it waits; the container is then killed (SIGKILL:
the suite is PID 1 there, which ignores SIGTERM) and the engine removes it. Where no removal is
confirmed in time, the container is removed here.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import re
import resource
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest, Ulimit

from convmatrix import interrupts, popen, tree
from convmatrix.errors import InfrastructureError
from convmatrix.gpus import Gpu
from convmatrix.interrupts import Interrupted, signals_deferred
from convmatrix.matrix.cells import ENGINES
from convmatrix.run.lanes.images import LABEL_HASH, Plan

SUITE_MOUNT = "/suite"
CASES_MOUNT = "/cases"  # the run's case files: /cases/<n>/<stem>.json
RESULTS_MOUNT = "/results"
SHM_SIZE = "2g"  # xdist workers and DataLoader-style code share tensors through /dev/shm
NOBODY = (65534, 65534)  # the uid:gid a cell runs as when the harness is root
PIDS_LIMIT = 16384  # threads count: torch starts one per core (and xdist a process per worker)
TMPFS = {"/tmp": "rw,nosuid,nodev,size=4g"}  # HOME and the working directory: the only scratch besides /results


# The CDI name nvidia-ctk gives a GPU by its NVML (nvidia-smi) index, and a MIG device by
# <GPU index>:<MIG device index> (`nvidia-ctk cdi list`: nvidia.com/gpu=0, nvidia.com/gpu=0:1).
CDI_GPU = "nvidia.com/gpu={}"
PODMAN_CDI_API = (5, 4)  # Podman's compatible API honours a CDI device request from 5.4.0 (containers/podman#25171)
PODMAN_IDLE = 300  # seconds a `podman system service` started here waits, idle, before it exits
PODMAN_START = 15.0  # seconds for that service's socket to answer
_SERVICES: list[subprocess.Popen[bytes]] = []  # services started without setsid: held, never collected running


def cell_user() -> tuple[int, int]:
    """The uid:gid a cell container runs as: the harness's own, except that root's is nobody's."""
    return NOBODY if os.getuid() == 0 else (os.getuid(), os.getgid())
EVENT_WAIT = 30.0  # seconds: for the engine's `die` after the output ended, and for `destroy`


class EngineError(InfrastructureError):
    """The Docker engine failed (not reachable, image missing, no GPU runtime): an infrastructure
    failure of the cell, never a finding about its stack."""


def unix_socket_problem(host: str | None = None) -> str | None:
    """Why the engine's unix socket does not answer, checked with a socket we close ourselves:
    the SDK leaks its socket when a connect fails (docker 7.x, UnixHTTPConnection.connect)."""
    host = host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None  # tcp/ssh engines: the SDK reports those itself
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as probe:
        probe.settimeout(10)
        try:
            probe.connect(host.removeprefix("unix://"))
        except OSError as exc:
            return f"{host}: {exc.strerror or exc}"
    return None


def podman_host() -> str:
    """Podman's API socket: $CONTAINER_HOST (Podman's own variable), else root's
    /run/podman/podman.sock, else the user's $XDG_RUNTIME_DIR/podman/podman.sock (rootless)."""
    if given := os.environ.get("CONTAINER_HOST"):
        return given
    if os.getuid() == 0:
        return "unix:///run/podman/podman.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix://{runtime}/podman/podman.sock"


def start_podman_service(host: str) -> str | None:
    """Start `podman system service` on a unix socket that does not answer, detached (its own
    session, so that the run's interrupt does not end it under another run) and ending by itself
    after PODMAN_IDLE idle seconds; None once the socket answers, else why not."""
    podman = shutil.which("podman")
    if podman is None:
        return "no podman on PATH"
    if not host.startswith("unix://"):
        return f"{host}: not a unix socket this machine can start a service on"
    path = Path(host.removeprefix("unix://"))
    command = [podman, "system", "service", f"--time={PODMAN_IDLE}", host]
    quiet: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if setsid := shutil.which("setsid"):
            # setsid --fork: the service is not our child, so nothing of it is left to reap or to
            # outlive (a Popen of a process that is still running warns when it is collected).
            subprocess.run([setsid, "--fork", *command], check=False, timeout=30, **quiet)
        else:
            _SERVICES.append(subprocess.Popen(command, start_new_session=True, **quiet))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot start `podman system service`: {getattr(exc, 'strerror', None) or exc}"
    deadline = time.monotonic() + PODMAN_START
    while (problem := unix_socket_problem(host)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return problem


def docker_problem() -> str | None:
    """Why containers cannot run here (no client, or no engine answering), or None."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker client on this machine"
    try:
        answer = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                                text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "the docker engine did not answer within 60 s"
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["?"])[-1]
        return f"the docker engine is not reachable ({last})"
    return None


def podman_problem() -> str | None:
    """Why Podman cannot run containers here (no podman, or its API does not answer and cannot
    be started), or None."""
    if shutil.which("podman") is None:
        return "no podman on this machine"
    try:
        with client("podman"):
            return None
    except EngineError as exc:
        return str(exc).removeprefix("podman: ").replace("the engine is", "the podman engine is", 1)


def engine_problem(engine: str) -> str | None:
    """Why cells of that engine cannot run here, or None."""
    return podman_problem() if engine == "podman" else docker_problem()


@contextlib.contextmanager
def client(engine: str = "docker") -> Iterator[Any]:
    """A connection to the engine, closed however the block ends (no socket left to the GC)."""
    if engine not in ENGINES:
        raise EngineError(f"unknown container engine {engine!r}: one of {', '.join(ENGINES)}")
    if engine == "podman":
        host = podman_host()
        if unix_socket_problem(host) and (problem := start_podman_service(host)):
            raise EngineError(f"podman: the engine is not reachable ({problem}); start `podman system service` "
                              "or set CONTAINER_HOST")
        base_url: str | None = host
        hint = "start `podman system service` or set CONTAINER_HOST"
    else:
        if problem := unix_socket_problem():
            raise EngineError(f"docker: the engine is not reachable ({problem}); start dockerd or set DOCKER_HOST")
        base_url = None  # DOCKER_HOST, DOCKER_TLS_VERIFY, ... as the docker CLI reads them
        hint = "start dockerd or set DOCKER_HOST"
    try:
        sdk = docker.DockerClient(base_url=base_url, timeout=300) if base_url else docker.from_env(timeout=300)
    except DockerException as exc:
        raise EngineError(f"{engine}: the engine is not reachable ({first_line(exc)}); {hint}") from None
    with contextlib.closing(sdk):
        try:
            sdk.ping()
            sdk.convmatrix_engine = identify(sdk.version())
        except DockerException as exc:
            raise EngineError(f"{engine}: the engine is not reachable ({first_line(exc)}); {hint}") from None
        if sdk.convmatrix_engine.name != engine:
            raise EngineError(f"{engine}: the socket answers as {sdk.convmatrix_engine}, not {engine}")
        yield sdk


@dataclass(frozen=True)
class EngineKind:
    """Which engine answered, and its version (a tuple, for the features that need one)."""

    name: str  # docker | podman
    version: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.name} {'.'.join(map(str, self.version))}" if self.version else self.name


def identify(version: dict[str, Any]) -> EngineKind:
    """The engine of a /version answer: Podman lists a component named "Podman Engine"."""
    components = version.get("Components") if isinstance(version, dict) else None
    named = {str(c.get("Name")): str(c.get("Version", "")) for c in components or [] if isinstance(c, dict)}
    podman = named.get("Podman Engine")
    text = podman if podman is not None else str(version.get("Version", "")) if isinstance(version, dict) else ""
    numbers = tuple(int(n) for n in re.findall(r"\d+", text.split("-")[0])[:3])
    return EngineKind("podman" if podman is not None else "docker", numbers)


def kind_of(engine: Any) -> EngineKind:
    """What client() found the engine to be (Docker for an engine made elsewhere, a test's fake)."""
    found = getattr(engine, "convmatrix_engine", None)
    return found if isinstance(found, EngineKind) else EngineKind("docker")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def image_id(engine: Any, reference: str) -> str:
    """The local image id of a reference, or "" when it is not here."""
    try:
        return str(engine.images.get(reference).id)
    except ImageNotFound:
        return ""
    except APIError as exc:
        raise EngineError(f"{kind_of(engine).name}: cannot inspect {reference}: {first_line(exc)}") from None


def built_digests(engine: Any) -> set[str]:
    """The content hashes of every cell image already built (one engine call for all cells)."""
    try:
        images = engine.images.list(filters={"label": LABEL_HASH})
    except APIError as exc:
        raise EngineError(f"{kind_of(engine).name}: cannot list images: {first_line(exc)}") from None
    return {str(img.labels.get(LABEL_HASH)) for img in images}


def engine_root(engine: Any) -> Path | None:
    """Where the engine keeps its data (`docker info`'s DockerRootDir: /var/lib/docker, or a
    rootless engine's ~/.local/share/docker, or wherever data-root moved it); None when it does
    not say."""
    try:
        root = engine.info().get("DockerRootDir")
    except (DockerException, OSError, AttributeError):
        return None
    return Path(root) if isinstance(root, str) and root.startswith("/") else None


@dataclass(frozen=True, kw_only=True)
class LabelledImage:
    """A local image carrying a label, as gc weighs it."""

    id: str
    tags: tuple[str, ...]
    labels: dict[str, str]
    created: float  # seconds since the epoch; 0.0 when the engine does not say
    size: int  # bytes only this image holds (its layers shared with other images not counted), where known


def created_seconds(stamp: object) -> float:
    """The engine's `Created` (RFC 3339 with nanoseconds, or seconds since the epoch) in seconds."""
    if isinstance(stamp, (int, float)):
        return float(stamp)
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    text = stamp.strip().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # Python's fromisoformat takes at most microseconds before 3.11
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def labelled_images(engine: Any, label: str) -> list[LabelledImage]:
    """Every local image that has `label`, with when it was made and how much of the disk is its
    own: the engine's disk usage report (`docker system df`) says what a base shares with the
    images on top of it; where it does not, an image's whole size is counted."""
    try:
        images = engine.images.list(filters={"label": label})
    except (DockerException, OSError) as exc:
        raise EngineError(f"{kind_of(engine).name}: cannot list images: {first_line(exc)}") from None
    own: dict[str, int] = {}
    with contextlib.suppress(DockerException, OSError, AttributeError, TypeError, ValueError):
        for entry in engine.df().get("Images") or ():
            size, shared = int(entry.get("Size", -1)), int(entry.get("SharedSize", -1))
            if size >= 0 and shared >= 0:
                own[str(entry.get("Id"))] = max(0, size - shared)
    found = []
    for image in images:
        attrs = getattr(image, "attrs", {}) or {}
        ident = str(image.id)
        found.append(LabelledImage(id=ident, tags=tuple(str(t) for t in (image.tags or ())),
                                   labels={str(k): str(v) for k, v in (image.labels or {}).items()},
                                   created=created_seconds(attrs.get("Created")),
                                   size=own.get(ident, int(attrs.get("Size") or 0))))
    return found


IN_USE = "in use by"  # how remove_image's answer starts when a container uses the image


def remove_image(engine: Any, image: LabelledImage) -> str | None:
    """Remove an image (its tags, and with the last one the image); None when it is gone, else
    why not in one line. Never forced: the engine refuses an image a container uses (409)."""
    for reference in image.tags or (image.id,):
        try:
            engine.images.remove(image=reference, force=False, noprune=False)
        except ImageNotFound:
            continue
        except APIError as exc:
            # Docker: "... (must force) - container 6fbfa8687660 is using its referenced image
            # 0605b8112f74"; Podman: "image is in use by a container". Docker's other 409, "image
            # has dependent child images", is no container's use.
            if exc.status_code == 409 and "container" in str(exc):
                user = re.search(r"container ([0-9a-f]{12,64}) is using", str(exc))
                return f"{IN_USE} container {user[1][:12]}" if user else f"{IN_USE} a container"
            return f"{kind_of(engine).name}: cannot remove {reference}: {first_line(exc)}"
        except (DockerException, OSError) as exc:
            return f"{kind_of(engine).name}: cannot remove {reference}: {first_line(exc)}"
    return None


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What one container run gets: the image, the command, and where results go."""

    image: str
    command: list[str]
    results_dir: Path
    suite_dir: Path
    gpu: Gpu | None  # a whole GPU or a MIG slice; None: no GPU requested (a CPU runner)
    environment: dict[str, str]
    readonly: dict[str, str] = field(default_factory=dict)  # more host folders -> where they are mounted, read-only


def run_kwargs(spec: RunSpec, engine: EngineKind = EngineKind("docker")) -> dict[str, Any]:
    """The engine arguments of a run, for containers.create (unit-tested: this is what a GPU
    runner is sent)."""
    uid, gid = cell_user()
    if engine.name == "podman" and os.getuid() != 0:
        # Rootless Podman maps uid 0 of the container to the invoking user and every other uid into
        # the user's subordinate range (where the harness's uid would not own its scratch
        # directory): the cell runs as that root, which is the user on the host, with no capability.
        uid, gid = 0, 0
    memory = os.environ.get("CONVMATRIX_CONTAINER_MEMORY")
    return {
        "image": spec.image,
        "command": spec.command,
        "auto_remove": True,  # the engine removes it once it exits, even when we are gone
        "user": f"{uid}:{gid}",
        "network_mode": "none",
        "privileged": False,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": dict(TMPFS),
        "pids_limit": PIDS_LIMIT,
        **({"mem_limit": memory, "memswap_limit": memory} if memory else {}),
        "shm_size": SHM_SIZE,
        "working_dir": "/tmp",
        "environment": {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **spec.environment},
        "volumes": {
            str(spec.suite_dir): {"bind": SUITE_MOUNT, "mode": "ro"},
            str(spec.results_dir.resolve()): {"bind": RESULTS_MOUNT, "mode": "rw"},
            **{host: {"bind": inside, "mode": "ro"} for host, inside in spec.readonly.items()},
        },
        "device_requests": gpu_requests(spec.gpu, engine),
        **({"ulimits": podman_ulimits()} if engine.name == "podman" else {}),
    }


def gpu_requests(gpu: Gpu | None, engine: EngineKind) -> list[DeviceRequest]:
    """The GPU as the engine takes it: Docker's NVIDIA device request, or on Podman a CDI device
    request for `nvidia.com/gpu=<index>` (the `--device nvidia.com/gpu=<index>` of `podman run`);
    an older Podman, whose compatible API drops device requests, is one clear error."""
    if gpu is None:
        return []
    if engine.name != "podman":
        return [DeviceRequest(device_ids=[docker_device(gpu)], capabilities=[["gpu"]])]
    if engine.version and engine.version < PODMAN_CDI_API:
        need = ".".join(map(str, PODMAN_CDI_API))
        raise EngineError(f"{engine}: its Docker-compatible API attaches no GPU (CDI device requests need "
                          f"podman {need} or later, containers/podman#25171); upgrade podman, or use --engine docker")
    return [DeviceRequest(driver="cdi", device_ids=[CDI_GPU.format(gpu.selector)])]


def docker_device(gpu: Gpu) -> str:
    """A device id of Docker's NVIDIA device request (NVIDIA_VISIBLE_DEVICES): the GPU's nvidia-smi
    index, or a MIG slice's UUID (the NVIDIA container runtime takes "MIG Device UUID(s) or
    index(es)": github.com/NVIDIA/nvidia-container-toolkit, cmd/nvidia-container-runtime/README.md),
    which still names the slice should its GPU's MIG devices be renumbered since discovery."""
    return gpu.uuid if gpu.mig and gpu.uuid else gpu.selector


# Podman's own process limit for a root container (and for the service itself: seen here, its
# /proc/<pid>/limits read 32768 whatever the harness's was); a cell may not ask for more.
PODMAN_NPROC = 32768


def podman_ulimits() -> list[Ulimit]:
    """Podman, unlike Docker, sets a root container's open-file and process limits itself
    (1048576 files, 32768 processes), and the OCI runtime cannot raise a hard limit past the
    service's own: on a machine whose limits are lower (a CI sandbox) every start fails with
    "error setting rlimits". The cell gets the harness's own open-file limit, as a baremetal cell
    does, and Podman's own process limit, lowered to the harness's where that is lower. Not the
    pids limit (16384) as its process limit: RLIMIT_NPROC counts every process and thread of the
    user (uid 65534 in every rootful cell), so concurrent cells share it, and the pids limit
    already bounds each cell; Docker's cells inherit dockerd's."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = hard if hard != resource.RLIM_INFINITY else soft
    nproc = [PODMAN_NPROC if n == resource.RLIM_INFINITY else min(n, PODMAN_NPROC)
             for n in resource.getrlimit(resource.RLIMIT_NPROC)]
    return [Ulimit(name="nofile", soft=min(soft, hard), hard=hard),
            Ulimit(name="nproc", soft=min(nproc), hard=nproc[1])]


def cli_line(spec: RunSpec, engine: EngineKind) -> str:
    """The same run as one command line (log.txt's first line): what to type to repeat it by hand,
    GPUs as that engine's CLI takes them (`--gpus device=N`, or Podman's `--device nvidia.com/gpu=N`)."""
    gpu: list[str] = []
    if spec.gpu is not None:
        gpu = (["--device", CDI_GPU.format(spec.gpu.selector)] if engine.name == "podman"
               else ["--gpus", f"device={docker_device(spec.gpu)}"])
    return " ".join([engine.name, "run", "--rm", *gpu, spec.image, *spec.command])


class Watch:
    """The engine's events about one container, read on a thread of their own: how it ended
    (`die`, with its exit code), whether the kernel OOM-killed a process in it (`oom`), and its
    removal (Docker's `destroy`, Podman's `remove`). Events, not an inspect after the end: with
    auto_remove the engine may remove the container, and its state, the moment it exits."""

    def __init__(self, engine: Any, container_id: str, since: int) -> None:
        # `since`: the engine subscribes only after it answered, so replay from before the
        # container existed; the filter keeps only this container's events.
        self.stream = engine.events(since=since, decode=True,
                                    filters={"type": "container", "container": container_id})
        self.exit_code: int | None = None
        self.oom_killed = False
        self.removed = False
        self.died = threading.Event()  # set on `die`, and when the stream ends without one
        self.done = threading.Event()  # the stream ended: after `destroy`, or lost
        self.thread = threading.Thread(target=self._read, name=f"events-{container_id[:12]}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                action = str(event.get("Action") or event.get("status") or "")
                if action == "oom":
                    self.oom_killed = True
                elif action == "die":
                    code = str((event.get("Actor") or {}).get("Attributes", {}).get("exitCode", ""))
                    self.exit_code = int(code) if code.lstrip("-").isdigit() else None
                    self.died.set()
                elif action in ("destroy", "remove"):
                    self.removed = True
                    return
        except Exception:  # the stream was closed under us, or the engine went away
            pass
        finally:
            self.died.set()
            self.done.set()

    def close(self) -> None:
        close_stream(self.stream)
        self.thread.join(timeout=5)


def close_stream(stream: Any) -> None:
    """Close an SDK stream and its HTTP response: CancellableStream.close() shuts its socket,
    but the response's file object keeps the descriptor (a ResourceWarning later) until the
    response itself is closed."""
    with contextlib.suppress(Exception):
        stream.close()
    response = getattr(stream, "_response", None)
    if response is not None:
        with contextlib.suppress(Exception):
            response.close()


@dataclass(frozen=True, kw_only=True)
class Outcome:
    exit_code: int
    oom_killed: bool


class Running:
    """A started container: its output as it comes, and how it ended."""

    def __init__(self, container: Any, output: Any, watch: Watch, engine: str = "docker") -> None:
        self.container = container
        self.output = output
        self.watch = watch
        self.engine = engine  # its name, for the messages

    def outcome(self) -> Outcome:
        """Once its output ended: the exit status, after the engine removed it (so that an
        `oom` event that came late is counted too)."""
        self.watch.died.wait(EVENT_WAIT)
        self.watch.done.wait(EVENT_WAIT)
        code = self.watch.exit_code
        if code is None:  # the events were lost: the engine may still hold the container
            try:
                code = int(self.container.wait(timeout=EVENT_WAIT).get("StatusCode", 1))
            except NotFound:
                raise EngineError(f"{self.engine}: the container {self.container.short_id} was removed "
                                  "before its exit status was known") from None
            except (DockerException, OSError) as exc:
                raise EngineError(f"{self.engine}: lost the container {self.container.short_id}: "
                                  f"{first_line(exc)}") from None
        return Outcome(exit_code=code, oom_killed=self.watch.oom_killed)


@contextlib.contextmanager
def started(engine: Any, spec: RunSpec, log: BinaryIO) -> Iterator[Running]:
    """A running container, attached to and watched from before its start, which the engine
    removes when it exits; ended early (an exception, Interrupted among them) it is killed,
    and removed here where the engine has not confirmed its removal in time."""
    container = output = watch = None
    kind = kind_of(engine)
    name = kind.name
    running = False  # auto_remove applies only to a container that started
    interrupt: Interrupted | None = None
    try:
        with signals_deferred():
            try:
                container = engine.containers.create(**run_kwargs(spec, kind))
            except ImageNotFound:
                raise EngineError(f"{name}: image {spec.image} is missing; run `nox -s build`") from None
            except (DockerException, OSError) as exc:
                raise EngineError(f"{name}: cannot create the container: {first_line(exc)}") from None
            try:
                watch = Watch(engine, container.id, since=int(time.time()) - 60)
                output = container.attach(stdout=True, stderr=True, stream=True, logs=False)
                container.start()
                running = True
            except (DockerException, OSError) as exc:
                # "could not select device driver" is a GPU runner without the NVIDIA container runtime.
                raise EngineError(f"{name}: cannot start the container: {first_line(exc)}") from None
        yield Running(container, output, watch, name)
    except BaseException as exc:
        if container is not None:
            with signals_deferred():
                with contextlib.suppress(DockerException, OSError):
                    container.kill()  # already gone: nothing to kill
                if isinstance(exc, Interrupted):
                    interrupt = exc
                    log.write(f"\nconvmatrix: {exc}: the container was killed\n".encode())
                    log.flush()
        raise
    finally:
        if container is not None:
            with signals_deferred():
                gone = remove(container, watch if running else None)
            if output is not None:
                close_stream(output)
            if watch is not None:
                watch.close()
            if interrupt is not None:
                interrupt.detail = ("the container was killed and removed" if gone else
                                    f"the container {container.short_id} was killed but not removed")


def remove(container: Any, watch: Watch | None) -> bool:
    """Whether the container is gone: removed by the engine (auto_remove) within EVENT_WAIT of
    its end, as `watch` saw, or else by us (and at once where there is no watch: a container
    that never started is not the engine's to remove)."""
    if watch is not None and watch.done.wait(EVENT_WAIT) and watch.removed:
        return True
    try:
        container.remove(force=True)
        return True
    except NotFound:
        return True
    except APIError as exc:
        if exc.status_code != 409:  # 409: the engine's own removal is under way
            return False
    except (DockerException, OSError):
        return False
    deadline = time.monotonic() + EVENT_WAIT
    while time.monotonic() < deadline:
        try:
            container.reload()
        except NotFound:
            return True
        except (DockerException, OSError):
            return False
        time.sleep(0.2)
    return False


def run(engine: Any, spec: RunSpec, log: Path) -> Outcome:
    """Run the suite in a container, appending all it prints to log; its exit status."""
    with tree.append_to(log) as out:  # never through a link a suite left at its name
        out.write(f"$ {cli_line(spec, kind_of(engine))}\n".encode())
        out.flush()
        with started(engine, spec, out) as running:
            # Run in a worker thread (concurrent cells), an interrupt reaches it as a kill from the
            # main thread: the output ends, and Interrupted is raised here, inside started(), which
            # records it and removes the container as it does for one raised in the main thread.
            def keep(line: bytes) -> None:
                out.write(line)
                out.flush()

            cutter = popen.LineCutter(keep)  # a 400 MB line is cut in log.txt, not held whole
            with interrupts.stoppable(lambda: kill(running.container)):
                try:
                    for chunk in running.output:
                        cutter.feed(chunk)
                    cutter.close()
                except (DockerException, OSError) as exc:
                    cutter.close()
                    interrupts.raise_if_stopped()
                    out.write(f"convmatrix: lost the container: {first_line(exc)}\n".encode())
                    raise EngineError(f"{running.engine}: lost the container of {spec.image}: "
                                      f"{first_line(exc)}") from None
            interrupts.raise_if_stopped()
            return running.outcome()


def kill(container: Any) -> None:
    with contextlib.suppress(DockerException, OSError):
        container.kill()


def describe(engine: Any, p: Plan) -> dict[str, str]:
    """What cell.json records of the image: its id, tag and content hash (and the base's id)."""
    return {"image": p.tag, "image_id": image_id(engine, p.tag), "image_hash": p.digest,
            "base": p.cell.base, "base_id": image_id(engine, p.cell.base), "engine": str(kind_of(engine))}
