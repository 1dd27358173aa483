"""What the container lane sends the engine, and how a run reads and ends its container: unit
tests, against a fake engine where one is needed (the real engine: test_container_lane.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Generic, TypeVar

import pytest
from docker.errors import APIError, NotFound

from convmatrix import interrupts
from convmatrix.gpus import Gpu, Mig
from convmatrix.run.lanes import containers


def spec(tmp_path: Path, gpu: int | Gpu | None) -> containers.RunSpec:
    """A run on GPU `gpu` (an index: a whole H100 of that index)."""
    device = Gpu(index=gpu, name="NVIDIA H100", capability="9.0") if isinstance(gpu, int) else gpu
    return containers.RunSpec(image="sha256:img", command=["python", "-m", "pytest", "/suite"],
                              results_dir=tmp_path / "r", suite_dir=tmp_path / "suites", gpu=device,
                              environment={"CONVMATRIX_LANE": "container"})


def test_gpu_run_requests_that_gpu_only(tmp_path: Path) -> None:
    kwargs = containers.run_kwargs(spec(tmp_path, 3))
    (request,) = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["3"]
    assert request["Capabilities"] == [["gpu"]]


def test_cpu_run_requests_no_device(tmp_path: Path) -> None:
    assert containers.run_kwargs(spec(tmp_path, None))["device_requests"] == []


def test_least_privilege(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(os, "getgid", lambda: 1000)
    kwargs = containers.run_kwargs(spec(tmp_path, 0))
    assert kwargs["user"] == "1000:1000"
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["security_opt"] == ["no-new-privileges"]
    assert kwargs["read_only"] is True and set(kwargs["tmpfs"]) == {"/tmp"} and "nosuid" in kwargs["tmpfs"]["/tmp"]
    assert kwargs["pids_limit"] == containers.PIDS_LIMIT and "mem_limit" not in kwargs
    assert kwargs["network_mode"] == "none"
    assert kwargs["privileged"] is False
    assert kwargs["volumes"][str(tmp_path / "suites")] == {"bind": "/suite", "mode": "ro"}
    assert kwargs["volumes"][str((tmp_path / "r").resolve())] == {"bind": "/results", "mode": "rw"}
    assert len(kwargs["volumes"]) == 2
    assert kwargs["shm_size"] == containers.SHM_SIZE
    assert kwargs["environment"]["CONVMATRIX_LANE"] == "container"
    assert kwargs["environment"]["HOME"] == "/tmp"


def test_a_root_harness_runs_its_cells_as_nobody_and_a_memory_limit_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21, item 1: the harness's own uid (root on a runner) let a cell plant a setuid shell."""
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setattr(os, "getgid", lambda: 0)
    monkeypatch.setenv("CONVMATRIX_CONTAINER_MEMORY", "64g")
    kwargs = containers.run_kwargs(spec(tmp_path, None))
    assert kwargs["user"] == "65534:65534"
    assert (kwargs["mem_limit"], kwargs["memswap_limit"]) == ("64g", "64g")


def test_unreachable_engine_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(containers.EngineError) as err, containers.client():
        pass
    assert str(err.value).startswith("docker: the engine is not reachable (")
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 4  # infrastructure, not bad input


def test_the_engine_removes_the_container_when_it_exits(tmp_path: Path) -> None:
    """auto_remove: nothing stays behind even when the lane itself is killed (issue 8, item 10)."""
    kwargs = containers.run_kwargs(spec(tmp_path, None))
    assert kwargs["auto_remove"] is True
    assert "detach" not in kwargs  # create() then start(): attached before it runs


# --- a run against a fake engine: what is read, and what is removed, when ---------------------

T = TypeVar("T")
Event = dict[str, Any]  # as the docker SDK decodes one: nested JSON


class FakeStream(Generic[T]):
    def __init__(self, items: Iterable[T]) -> None:
        self.items = list(items)
        self.closed = False

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def close(self) -> None:
        self.closed = True


class FakeContainer:
    id = "c0ffee" * 10
    short_id = "c0ffee"

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def attach(self, **kwargs: Any) -> FakeStream[bytes]:
        assert kwargs["stream"] is True
        self.engine.calls.append("attach")
        self.engine.output = FakeStream(self.engine.chunks)
        return self.engine.output

    def start(self) -> None:
        self.engine.calls.append("start")
        if self.engine.start_error is not None:
            raise self.engine.start_error

    def wait(self, **kwargs: Any) -> dict[str, int]:
        self.engine.calls.append("wait")
        return {"StatusCode": self.engine.wait_status}

    def kill(self) -> None:
        self.engine.calls.append("kill")

    def remove(self, force: bool = False) -> None:
        self.engine.calls.append(f"remove(force={force})")

    def reload(self) -> None:
        raise NotFound("gone")


class FakeEngine:
    output: FakeStream[bytes]
    event_stream: FakeStream[Event]
    kwargs: dict[str, Any]

    def __init__(self, events: Sequence[Event] = (), chunks: Sequence[bytes] = (b"out\n",),
                 start_error: Exception | None = None, wait_status: int = 1) -> None:
        self.events_given = events
        self.chunks = chunks
        self.start_error = start_error
        self.wait_status = wait_status
        self.calls: list[str] = []
        self.containers = SimpleNamespace(create=self.create)

    def create(self, **kwargs: Any) -> FakeContainer:
        self.calls.append("create")
        self.kwargs = kwargs
        return FakeContainer(self)

    def events(self, **kwargs: Any) -> FakeStream[Event]:
        self.calls.append("events")
        assert kwargs["filters"]["container"] == FakeContainer.id
        self.event_stream = FakeStream(self.events_given)
        return self.event_stream


def event(action: str, **attributes: str) -> Event:
    return {"Type": "container", "Action": action, "Actor": {"ID": FakeContainer.id, "Attributes": attributes}}


def test_the_exit_status_and_oom_come_from_the_engines_events(tmp_path: Path) -> None:
    engine = FakeEngine(events=[event("create"), event("start"), event("oom"), event("die", exitCode="137"),
                                event("destroy")])
    outcome = containers.run(engine, spec(tmp_path, None), tmp_path / "log.txt")
    assert outcome == containers.Outcome(exit_code=137, oom_killed=True)
    # Watched and attached before it starts; never inspected, killed or removed by us after.
    assert engine.calls == ["create", "events", "attach", "start"]
    assert engine.kwargs["auto_remove"] is True
    assert (tmp_path / "log.txt").read_bytes().endswith(b"out\n")
    assert engine.output.closed and engine.event_stream.closed


def test_lost_events_fall_back_to_wait_and_remove(tmp_path: Path) -> None:
    engine = FakeEngine(events=[], wait_status=5)
    outcome = containers.run(engine, spec(tmp_path, None), tmp_path / "log.txt")
    assert outcome == containers.Outcome(exit_code=5, oom_killed=False)
    assert engine.calls[-2:] == ["wait", "remove(force=True)"]


def test_a_container_that_never_started_is_removed_at_once(tmp_path: Path) -> None:
    engine = FakeEngine(start_error=APIError("could not select device driver \"\" with capabilities: [[gpu]]"))
    began = time.monotonic()
    with pytest.raises(containers.EngineError, match="cannot start the container: could not select device driver"):
        containers.run(engine, spec(tmp_path, 0), tmp_path / "log.txt")
    assert time.monotonic() - began < 5  # no wait for an auto-removal that cannot come
    assert engine.calls[-2:] == ["kill", "remove(force=True)"]


def test_an_interrupt_kills_the_container_and_says_so(tmp_path: Path) -> None:
    class Interrupting(FakeStream[bytes]):
        def __iter__(self) -> Iterator[bytes]:
            yield b"first line\n"
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
            yield b"never\n"

    engine = FakeEngine(events=[event("die", exitCode="137"), event("destroy")])
    engine.chunks = ()
    original = FakeContainer.attach

    def attach(self: FakeContainer, **kwargs: Any) -> FakeStream[bytes]:
        original(self, **kwargs)
        engine.output = Interrupting(())
        return engine.output

    def lane() -> None:
        with interrupts.interruptible():
            containers.run(engine, spec(tmp_path, None), tmp_path / "log.txt")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FakeContainer, "attach", attach)
        with pytest.raises(interrupts.Interrupted) as err:
            lane()
    assert err.value.detail == "the container was killed and removed"
    assert "kill" in engine.calls and "remove(force=True)" not in engine.calls  # the engine removed it
    log = (tmp_path / "log.txt").read_text()
    assert log.endswith("first line\n\nconvmatrix: interrupted by SIGTERM: the container was killed\n")


def test_only_the_suites_plain_files_leave_the_scratch_directory(tmp_path: Path) -> None:
    """What a container writes lands in a scratch directory; the suite's own files are copied
    back as plain files, everything else (a setuid shell, a symlink, a FIFO, other files) stays
    behind and goes with the scratch."""
    from convmatrix.run.lanes import container

    out = tmp_path / "run" / "c@cpu@h"
    out.mkdir(parents=True)
    (out / "results.jsonl").write_text('{"case": "earlier"}\n')  # a --continue-run reads it
    (tmp_path / "host-file").write_text("host")
    with container.scratch(out) as place:
        assert (place / "results.jsonl").read_text() == '{"case": "earlier"}\n'
        with (place / "results.jsonl").open("a") as fh:
            fh.write('{"case": "later"}\n')
        (place / "env.json").write_text("{}")
        (place / "running-main.json").write_text('{"case": "x"}')
        (place / "rootsh").write_bytes(b"\x7fELF")
        (place / "rootsh").chmod(0o4755)
        (place / "log.txt").symlink_to(tmp_path / "host-file")
        os.mkfifo(place / "pipe")
    assert sorted(p.name for p in out.iterdir()) == ["env.json", "results.jsonl", "running-main.json"]
    assert (out / "results.jsonl").read_text().splitlines()[-1] == '{"case": "later"}'
    assert not [p for p in (tmp_path / "run").iterdir() if "scratch" in p.name]


def test_a_scratch_file_the_suite_made_a_symlink_is_not_copied(tmp_path: Path) -> None:
    from convmatrix.run.lanes import container

    out = tmp_path / "c"
    out.mkdir()
    (tmp_path / "secret").write_text("secret")
    with container.scratch(out) as place:
        (place / "results.jsonl").symlink_to(tmp_path / "secret")
    assert not (out / "results.jsonl").exists()


def test_case_files_are_mounted_read_only_beside_the_suite(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "cases" / "ab12"
    given = containers.RunSpec(image="sha256:img", command=["python"], results_dir=tmp_path / "r",
                               suite_dir=tmp_path / "suites", gpu=None, environment={},
                               readonly={str(folder): f"{containers.CASES_MOUNT}/0"})
    volumes = containers.run_kwargs(given)["volumes"]
    assert volumes[str(folder)] == {"bind": "/cases/0", "mode": "ro"}
    assert [v["mode"] for v in volumes.values()].count("rw") == 1  # the results scratch alone


# --- Podman through the same SDK (issue 26, item 1) ---------------------------------------------

PODMAN = containers.EngineKind("podman", (5, 4, 2))


def test_podman_gets_the_gpu_as_a_cdi_device_request(tmp_path: Path) -> None:
    (request,) = containers.run_kwargs(spec(tmp_path, 1), PODMAN)["device_requests"]
    assert request["Driver"] == "cdi" and request["DeviceIDs"] == ["nvidia.com/gpu=1"]
    assert containers.run_kwargs(spec(tmp_path, None), PODMAN)["device_requests"] == []
    # The command line log.txt opens with says the same, as each engine's CLI takes it.
    assert containers.cli_line(spec(tmp_path, 1), PODMAN).startswith("podman run --rm --device nvidia.com/gpu=1 sha256:img")
    assert containers.cli_line(spec(tmp_path, 1), containers.EngineKind("docker")).startswith(
        "docker run --rm --gpus device=1 sha256:img")


SLICE = Gpu(index=0, name="NVIDIA H200", capability="9.0", uuid="MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23",
            mig=Mig(profile="3g.71gb", device=1, parent_uuid="GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39"))


def test_a_mig_slice_is_requested_by_its_uuid_from_docker_and_by_gpu_and_device_from_podman(tmp_path: Path) -> None:
    """Issue 37: a slice is no GPU index; the engine must attach that slice, not its whole GPU."""
    (docker,) = containers.run_kwargs(spec(tmp_path, SLICE))["device_requests"]
    assert docker["DeviceIDs"] == [SLICE.uuid] and docker["Capabilities"] == [["gpu"]]
    (podman,) = containers.run_kwargs(spec(tmp_path, SLICE), PODMAN)["device_requests"]
    assert podman["Driver"] == "cdi" and podman["DeviceIDs"] == ["nvidia.com/gpu=0:1"]
    assert containers.cli_line(spec(tmp_path, SLICE), PODMAN).startswith("podman run --rm --device nvidia.com/gpu=0:1 ")
    assert containers.cli_line(spec(tmp_path, SLICE), containers.EngineKind("docker")).startswith(
        f"docker run --rm --gpus device={SLICE.uuid} ")


def test_a_podman_whose_api_drops_device_requests_is_one_clear_error(tmp_path: Path) -> None:
    old = containers.EngineKind("podman", (4, 3, 1))
    with pytest.raises(containers.EngineError, match=r"podman 4\.3\.1: .*podman 5\.4 or later.*--engine docker"):
        containers.run_kwargs(spec(tmp_path, 0), old)
    assert containers.run_kwargs(spec(tmp_path, None), old)["device_requests"] == []  # a CPU run is fine


def test_podman_cells_get_the_harness_open_file_limit_and_podmans_own_process_limit(tmp_path: Path) -> None:
    """Seen (a review): the process limit was the pids limit, 16384, an RLIMIT_NPROC that every
    concurrent cell of one uid shares (threads count). Seen here too: the harness's own (96368) is
    refused by a Podman service whose own is 32768 ("error setting rlimit type 6")."""
    import resource

    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in containers.run_kwargs(spec(tmp_path, None), PODMAN)["ulimits"]}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert limits["nofile"][1] <= (hard if hard != resource.RLIM_INFINITY else soft)
    soft, hard = (containers.PODMAN_NPROC if n == resource.RLIM_INFINITY else n
                  for n in resource.getrlimit(resource.RLIMIT_NPROC))
    assert limits["nproc"] == (min(soft, hard, containers.PODMAN_NPROC), min(hard, containers.PODMAN_NPROC))
    assert limits["nproc"][1] > containers.PIDS_LIMIT or hard <= containers.PIDS_LIMIT
    assert "ulimits" not in containers.run_kwargs(spec(tmp_path, None))  # Docker sets none: left alone
    # Every other isolation argument is the same on both engines.
    docker_kwargs = containers.run_kwargs(spec(tmp_path, None))
    podman_kwargs = containers.run_kwargs(spec(tmp_path, None), PODMAN)
    del podman_kwargs["ulimits"]
    assert podman_kwargs == docker_kwargs


@pytest.mark.parametrize(("version", "kind"), [
    ({"Version": "20.10.24+dfsg1", "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"}]},
     containers.EngineKind("docker", (20, 10, 24))),
    ({"Version": "4.3.1", "Components": [{"Name": "Podman Engine", "Version": "4.3.1"},
                                          {"Name": "Conmon", "Version": "2.1.6"}]},
     containers.EngineKind("podman", (4, 3, 1))),
    ({"Version": "5.4.0-dev", "Components": [{"Name": "Podman Engine", "Version": "5.4.0-dev"}]},
     containers.EngineKind("podman", (5, 4, 0))),
    ({}, containers.EngineKind("docker", ())),
    ({"Components": "not a list"}, containers.EngineKind("docker", ())),
])
def test_the_engine_is_told_by_its_version_answer(version: dict[str, Any], kind: containers.EngineKind) -> None:
    assert containers.identify(version) == kind


def test_podmans_socket_is_its_own_variable_else_roots_else_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTAINER_HOST", "unix:///somewhere/podman.sock")
    assert containers.podman_host() == "unix:///somewhere/podman.sock"
    monkeypatch.delenv("CONTAINER_HOST")
    monkeypatch.setattr(os, "getuid", lambda: 0)
    assert containers.podman_host() == "unix:///run/podman/podman.sock"
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert containers.podman_host() == "unix:///run/user/1000/podman/podman.sock"


def test_an_unknown_engine_or_a_podman_that_cannot_start_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    with pytest.raises(containers.EngineError, match="unknown container engine 'lxc'"), containers.client("lxc"):
        pass
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/none/podman.sock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman to start a service with
    with pytest.raises(containers.EngineError) as caught, containers.client("podman"):
        pass
    assert str(caught.value) == ("podman: the engine is not reachable (no podman on PATH); start `podman system "
                                 "service` or set CONTAINER_HOST")


def test_a_podman_cell_that_cannot_run_names_podman(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What a cell records as not run: the engine by name, as Docker's says 'the docker engine'."""
    for name in ("podman", "setsid"):  # a podman whose service never comes up
        fake = tmp_path / name
        fake.write_text("#!/bin/sh\nexit 1\n")
        fake.chmod(0o755)
    monkeypatch.setattr(containers, "PODMAN_START", 0.5)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/none/podman.sock")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert (containers.podman_problem() or "").startswith("the podman engine is not reachable (")


def test_podmans_removal_event_is_the_end_of_the_watch(tmp_path: Path) -> None:
    """Podman 4.3 says `remove` where Docker says `destroy` (seen on Debian 12's podman)."""
    engine = FakeEngine(events=[event("create"), event("start"), event("die", exitCode="3"), event("remove")])
    engine.convmatrix_engine = PODMAN  # type: ignore[attr-defined]
    outcome = containers.run(engine, spec(tmp_path, None), tmp_path / "log.txt")
    assert outcome == containers.Outcome(exit_code=3, oom_killed=False)
    assert engine.calls == ["create", "events", "attach", "start"]  # the engine removed it: nothing more
    assert "ulimits" in engine.kwargs
    assert (tmp_path / "log.txt").read_text().startswith("$ podman run --rm sha256:img python -m pytest /suite")


def test_rootless_podman_runs_the_cell_as_its_root_which_is_the_user(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Rootless Podman maps the container's uid 0 to the invoking user and every other uid into the
    user's subordinate range, where the user's own uid would not own the scratch directory (seen:
    "cannot create /results/results.jsonl: Permission denied" as pmtest, uid 1001)."""
    monkeypatch.setattr(os, "getuid", lambda: 1001)
    monkeypatch.setattr(os, "getgid", lambda: 1001)
    rootless = containers.run_kwargs(spec(tmp_path, None), PODMAN)
    assert rootless["user"] == "0:0" and rootless["cap_drop"] == ["ALL"]
    assert rootless["security_opt"] == ["no-new-privileges"]
    assert containers.run_kwargs(spec(tmp_path, None))["user"] == "1001:1001"  # Docker: the user's own uid
    monkeypatch.setattr(os, "getuid", lambda: 0)
    assert containers.run_kwargs(spec(tmp_path, None), PODMAN)["user"] == "65534:65534"  # rootful: nobody


def test_a_podman_service_started_here_is_left_to_no_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen: the first start of the service left a running Popen to the garbage collector, whose
    ResourceWarning ("subprocess N is still running") failed the calling test. A stand-in
    `podman` that listens on the socket it is given for a few seconds."""
    import gc
    import sys
    import warnings

    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(f"""#!{sys.executable}
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[-1].removeprefix("unix://"))
s.listen()
time.sleep(3)
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    host = f"unix://{tmp_path}/run/podman.sock"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert containers.start_podman_service(host) is None
        gc.collect()
    assert containers.unix_socket_problem(host) is None


@pytest.mark.parametrize("host", ["unix://{tmp}/$(touch {tmp}/pwned)/p.sock", "unix://{tmp}/a b;touch {tmp}/pwned"])
def test_a_hostile_container_host_reaches_podman_as_one_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 host: str) -> None:
    """$CONTAINER_HOST goes to podman as one argv element, never through a shell; a service that
    never answers is one line (PODMAN_START shortened here)."""
    import sys

    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(tmp_path / 'argv')!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(containers, "PODMAN_START", 1.0)
    given = host.format(tmp=tmp_path)
    monkeypatch.setenv("CONTAINER_HOST", given)
    with pytest.raises(containers.EngineError) as caught, containers.client("podman"):
        pass
    assert len(str(caught.value).splitlines()) == 1 and str(caught.value).startswith("podman: the engine is not reachable")
    import json
    import time
    deadline = time.monotonic() + 5
    while not (tmp_path / "argv").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads((tmp_path / "argv").read_text())[-1] == given
    assert not (tmp_path / "pwned").exists()
