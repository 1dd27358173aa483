"""Every Docker engine call (the SDK), except the BuildKit build itself: the container lane's, and
the few of `convmatrix gc` (images by label, their removal) and of --prepare-disk (the engine's
data root).

Containers run least-privileged: never as root (the invoking uid:gid, or nobody's when the harness
is root), every capability dropped, no-new-privileges, a read-only root file system with a tmpfs
/tmp, a pids limit, a memory limit when $CONVMATRIX_CONTAINER_MEMORY asks for one (a default
would turn large cases into false regressions), no network, GPUs only through the engine's device
request, the suite mounted read-only and a scratch directory the only writable mount (the lane
copies the plain files it expects out of it); the container is always removed, and all it
printed lands in log.txt even when it dies.

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
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest

from convmatrix import interrupts, popen
from convmatrix.errors import InfrastructureError
from convmatrix.interrupts import Interrupted, signals_deferred
from convmatrix.run.lanes.images import LABEL_HASH, Plan

SUITE_MOUNT = "/suite"
CASES_MOUNT = "/cases"  # the run's case files: /cases/<n>/<stem>.json
RESULTS_MOUNT = "/results"
SHM_SIZE = "2g"  # xdist workers and DataLoader-style code share tensors through /dev/shm
NOBODY = (65534, 65534)  # the uid:gid a cell runs as when the harness is root
PIDS_LIMIT = 16384  # threads count: torch starts one per core (and xdist a process per worker)
TMPFS = {"/tmp": "rw,nosuid,nodev,size=4g"}  # HOME and the working directory: the only scratch besides /results


def cell_user() -> tuple[int, int]:
    """The uid:gid a cell container runs as: the harness's own, except that root's is nobody's."""
    return NOBODY if os.getuid() == 0 else (os.getuid(), os.getgid())
EVENT_WAIT = 30.0  # seconds: for the engine's `die` after the output ended, and for `destroy`


class EngineError(InfrastructureError):
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
        raise EngineError(f"docker: cannot list images: {first_line(exc)}") from None
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


def remove_image(engine: Any, image: LabelledImage) -> str | None:
    """Remove an image (its tags, and with the last one the image); None when it is gone, else
    why not in one line. Never forced: the engine refuses an image a container uses (409)."""
    for reference in image.tags or (image.id,):
        try:
            engine.images.remove(image=reference, force=False, noprune=False)
        except ImageNotFound:
            continue
        except APIError as exc:
            if exc.status_code == 409:
                return f"in use ({first_line(exc)})"
            return f"docker: cannot remove {reference}: {first_line(exc)}"
        except (DockerException, OSError) as exc:
            return f"docker: cannot remove {reference}: {first_line(exc)}"
    return None


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What one container run gets: the image, the command, and where results go."""

    image: str
    command: list[str]
    results_dir: Path
    suite_dir: Path
    gpu_index: int | None  # None: no GPU requested (a CPU runner)
    environment: dict[str, str]
    readonly: dict[str, str] = field(default_factory=dict)  # more host folders -> where they are mounted, read-only


def run_kwargs(spec: RunSpec) -> dict[str, Any]:
    """The engine arguments of a run, for containers.create (unit-tested: this is what a GPU
    runner is sent)."""
    device_requests = (
        [DeviceRequest(device_ids=[str(spec.gpu_index)], capabilities=[["gpu"]])]
        if spec.gpu_index is not None else []
    )
    uid, gid = cell_user()
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
        "device_requests": device_requests,
    }


class Watch:
    """The engine's events about one container, read on a thread of their own: how it ended
    (`die`, with its exit code), whether the kernel OOM-killed a process in it (`oom`), and its
    removal (`destroy`). Events, not an inspect after the end: with auto_remove the engine may
    remove the container, and its state, the moment it exits."""

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
                elif action == "destroy":
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

    def __init__(self, container: Any, output: Any, watch: Watch) -> None:
        self.container = container
        self.output = output
        self.watch = watch

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
                raise EngineError(f"docker: the container {self.container.short_id} was removed "
                                  "before its exit status was known") from None
            except (DockerException, OSError) as exc:
                raise EngineError(f"docker: lost the container {self.container.short_id}: "
                                  f"{first_line(exc)}") from None
        return Outcome(exit_code=code, oom_killed=self.watch.oom_killed)


@contextlib.contextmanager
def started(engine: Any, spec: RunSpec, log: BinaryIO) -> Iterator[Running]:
    """A running container, attached to and watched from before its start, which the engine
    removes when it exits; ended early (an exception, Interrupted among them) it is killed,
    and removed here where the engine has not confirmed its removal in time."""
    container = output = watch = None
    running = False  # auto_remove applies only to a container that started
    interrupt: Interrupted | None = None
    try:
        with signals_deferred():
            try:
                container = engine.containers.create(**run_kwargs(spec))
            except ImageNotFound:
                raise EngineError(f"docker: image {spec.image} is missing; run `nox -s build`") from None
            except (DockerException, OSError) as exc:
                raise EngineError(f"docker: cannot create the container: {first_line(exc)}") from None
            try:
                watch = Watch(engine, container.id, since=int(time.time()) - 60)
                output = container.attach(stdout=True, stderr=True, stream=True, logs=False)
                container.start()
                running = True
            except (DockerException, OSError) as exc:
                # "could not select device driver" is a GPU runner without the NVIDIA container runtime.
                raise EngineError(f"docker: cannot start the container: {first_line(exc)}") from None
        yield Running(container, output, watch)
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
    with log.open("ab") as out:
        out.write(f"$ docker run {spec.image} {' '.join(spec.command)}\n".encode())
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
                    raise EngineError(f"docker: lost the container of {spec.image}: {first_line(exc)}") from None
            interrupts.raise_if_stopped()
            return running.outcome()


def kill(container: Any) -> None:
    with contextlib.suppress(DockerException, OSError):
        container.kill()


def describe(engine: Any, p: Plan) -> dict[str, str]:
    """What cell.json records of the image: its id, tag and content hash (and the base's id)."""
    return {"image": p.tag, "image_id": image_id(engine, p.tag), "image_hash": p.digest,
            "base": p.cell.base, "base_id": image_id(engine, p.cell.base)}
