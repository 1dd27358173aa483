"""The container lane for real: a base image from Debian packages, an air-gapped cell image
from a wheelhouse, the suite in a container beside a baremetal cell, and the engine's failures."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from containerkit import assert_no_root_shell, inspect_cell_container
from convmatrix.results import rundir
from convmatrix.run.lanes import base_image, containers
from convmatrix.run.lanes.images import LABEL_CELL, docker_cli
from suiterun import PLUGINS
from testkit import REPO, ran

pytestmark = pytest.mark.usefixtures("docker_engine")
CONTAINER = "container-torch2.13.0-cpu-cudnnbundled-py3.11"
BAREMETAL = "baremetal-torch2.13.0-cpu-cudnnbundled-py3.11"
MATRIX = """
name = "container-and-baremetal"
wheelhouse = "{wheelhouse}"
[axes]
lane = ["container", "baremetal"]
torch = ["2.13.0"]
cuda = ["cpu"]
cudnn = ["bundled"]
python = ["3.11"]
[control]
lane = "baremetal"
[container]
base = "convmatrix/base:bookworm"
"""


PROD_CASES = """
[[case]]
name = "vae_t"
op = "conv_transpose3d"
input = [1, 8, 4, 6, 6]
out_channels = 4
kernel = 3
stride = 2
output_padding = 1
layout = "nhwc_strided"
direction = "double_backward"
sources = ["https://github.com/pytorch/pytorch/issues/4344"]

[[case]]
name = "nhwc"
op = "conv2d"
input = [2, 8, 12, 10]
out_channels = 16
kernel = 3
dtype = "bfloat16"
direction = "backward_weight"
"""


@pytest.fixture(scope="module")
def base() -> str:
    return base_image.ensure()


def nox(session: str, matrix: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", session, "--", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600, check=False,
                          env={**os.environ, "CONVMATRIX_MATRIX": str(matrix), **(env or {})})


def convmatrix(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], capture_output=True, text=True,
                          timeout=3600, check=False, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path, base: str) -> tuple[Path, Path]:
    """Both lanes into one run directory, through the README's sessions."""
    tmp = tmp_path_factory.mktemp("lanes")
    matrix = tmp / "m.toml"
    # A user case file beside the catalog: the container lane mounts it read-only (issue 22).
    (tmp / "prod.toml").write_text(PROD_CASES)
    matrix.write_text(MATRIX.format(wheelhouse=wheelhouse).replace("[axes]", 'cases = ["prod.toml"]\n[axes]', 1))
    out = tmp / "run"
    for session in ("container", "baremetal"):
        done = nox(session, matrix, "--out", str(out))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return matrix, out


def test_container_and_baremetal_cells_report_side_by_side(run: tuple[Path, Path]) -> None:
    _, out = run
    report = convmatrix("report", str(out), "--format", "json")
    assert report.returncode == 0, report.stderr
    cells = {c["cell"]: c for c in json.loads(report.stdout)["cells"]}
    assert set(cells) == {CONTAINER, BAREMETAL}
    assert cells[CONTAINER]["observed"]["torch"] == cells[BAREMETAL]["observed"]["torch"] == "2.13.0+cpu"
    assert (cells[BAREMETAL]["verdict"], cells[CONTAINER]["verdict"]) == ("control", "ok")
    assert cells[CONTAINER]["lane"] == "container"
    meta = json.loads((ran(out, CONTAINER) / "cell.json").read_text())
    assert meta["image_id"].startswith("sha256:") and meta["image"].startswith("convmatrix/cell:")
    assert json.loads((ran(out, CONTAINER) / "env.json").read_text())["image_id"] == meta["image_id"]


def test_a_case_file_runs_in_the_container_as_on_bare_metal(run: tuple[Path, Path]) -> None:
    _, out = run
    ran_cases = {}
    for cell in (CONTAINER, BAREMETAL):
        lines = [json.loads(line) for line in (ran(out, cell) / "results.jsonl").read_text().splitlines()]
        ran_cases[cell] = {r["case"]: r for r in lines if r["case"].startswith("prod-")}
        recorded = json.loads((ran(out, cell) / "cell.json").read_text())["cases"]
        assert [(c["stem"], c["cases"]) for c in recorded] == [("prod", 2)]
    assert set(ran_cases[CONTAINER]) == set(ran_cases[BAREMETAL]) == {
        "prod-conv_transpose3d-fp32-k3-s2-op1-nhwc_strided-double_bwd-vae_t",
        "prod-conv2d-bf16-k3-bwd_weight-nhwc"}
    for record in ran_cases[CONTAINER].values():
        assert record["status"] == "passed", record["message"]
        assert record["params"]["prefix"] == "prod"
    vae = ran_cases[CONTAINER]["prod-conv_transpose3d-fp32-k3-s2-op1-nhwc_strided-double_bwd-vae_t"]
    assert vae["sources"] == ["https://github.com/pytorch/pytorch/issues/4344"]


def test_no_container_is_left_behind(run: tuple[Path, Path]) -> None:
    listed = subprocess.run([docker_cli(), "ps", "-a", "-q", "--filter", "ancestor=convmatrix/cell"],
                            capture_output=True, text=True, check=True)
    leftovers = [line for line in listed.stdout.splitlines() if line.strip()]
    assert leftovers == []


def test_second_run_does_not_rebuild(run: tuple[Path, Path], tmp_path: Path) -> None:
    matrix, _ = run
    dry = convmatrix("build", "-m", str(matrix), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{CONTAINER} -> convmatrix/cell:" in dry.stdout and "up to date" in dry.stdout
    again = nox("container", matrix, "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "building convmatrix/cell" not in again.stdout + again.stderr


def test_secrets_never_reach_a_layer(run: tuple[Path, Path], tmp_path: Path, wheelhouse: Path) -> None:
    """Build a fresh image with a CA bundle and a pip.conf as secrets: no byte of either may be
    in the saved image, nor in its history."""
    marker = f"CONVMATRIX-SECRET-{uuid.uuid4().hex}"
    (tmp_path / "ca.pem").write_text(f"# {marker}\n")
    (tmp_path / "pip.conf").write_text(f"# {marker}\n[global]\n")
    fresh = tmp_path / "wheels"  # a changed wheelhouse listing: a new image, built now
    shutil.copytree(wheelhouse, fresh, copy_function=os.link)
    (fresh / f"{uuid.uuid4().hex}.txt").write_text("forces a new image hash\n")
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.format(wheelhouse=fresh))
    secrets = {"CONVMATRIX_CA_BUNDLE": str(tmp_path / "ca.pem"), "CONVMATRIX_PIP_CONF": str(tmp_path / "pip.conf")}
    built = convmatrix("build", "-m", str(matrix), env=secrets)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr
    tag = next(line.split(" -> ")[1].split(":", 2)[:2] for line in built.stdout.splitlines() if " -> " in line)
    image = ":".join(tag)
    history = subprocess.run([docker_cli(), "history", "--no-trunc", image], capture_output=True, text=True, check=True)
    assert "--mount=type=secret,id=ca" in built.stdout  # the RUN steps mounted them ...
    assert marker not in history.stdout  # ... but nothing of them was kept
    saved = subprocess.run([docker_cli(), "save", image], capture_output=True, check=True).stdout
    assert marker.encode() not in saved
    subprocess.run([docker_cli(), "rmi", "-f", image], capture_output=True, check=False)


def test_unreachable_engine_fails_the_lane_in_one_line_and_keeps_other_results(run: tuple[Path, Path],
                                                                               tmp_path: Path) -> None:
    _, out = run
    copy = tmp_path / "run"
    shutil.copytree(ran(out, BAREMETAL), ran(copy, BAREMETAL))
    before = (ran(copy, BAREMETAL) / "results.jsonl").read_bytes()
    matrix = run[0]
    dead = nox("container", matrix, "--out", str(copy), env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert dead.returncode != 0
    lines = [line for line in (dead.stdout + dead.stderr).splitlines() if "could not run here" in line]
    assert len(lines) == 1 and "the docker engine is not reachable" in lines[0]
    assert (ran(copy, BAREMETAL) / "results.jsonl").read_bytes() == before
    report = convmatrix("report", str(copy), "--format", "json")
    cells = {c["cell"]: c for c in json.loads(report.stdout)["cells"]}
    assert cells[CONTAINER]["verdict"] == "invalid"
    assert any("docker engine is not reachable" in p for p in cells[CONTAINER]["problems"])
    assert cells[CONTAINER]["signature"] is False
    assert cells[BAREMETAL]["verdict"] == "control"


def test_a_cell_the_engine_cannot_run_is_not_run_in_the_report_and_fails_it(run: tuple[Path, Path],
                                                                             tmp_path: Path) -> None:
    """Issue 19, item 1: `convmatrix run` over both lanes (not --strict) with the engine down exits
    0 as before, but records the container cell, and the report shows it NOT RUN (engine down) and
    exits 4: the infrastructure is all that failed (issue 33)."""
    matrix, _ = run
    out = tmp_path / "run"
    dead = convmatrix("run", "-m", str(matrix), "--out", str(out), env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert dead.returncode == 0, dead.stdout[-3000:] + dead.stderr[-3000:]
    assert f"{CONTAINER}: not run here: the docker engine is not reachable" in dead.stdout
    assert json.loads((ran(out, CONTAINER) / "cell.json").read_text())["not_run"].startswith(
        "the docker engine is not reachable")
    report = convmatrix("report", str(out), "--format", "json")
    assert report.returncode == 4, report.stderr
    cells = {c["cell"]: c for c in json.loads(report.stdout)["cells"]}
    assert cells[CONTAINER]["verdict"] == "not-run" and "docker engine" in cells[CONTAINER]["not_run"]
    assert cells[CONTAINER]["cause"]["cause"] == "engine down"
    assert cells[BAREMETAL]["verdict"] == "control"
    text = convmatrix("report", str(out))
    assert text.returncode == 4 and "NOT RUN engine" in text.stdout
    assert "did not run, for the infrastructure alone" in text.stderr


# --- an interrupted lane (issue 8, item 10) ------------------------------------------------------

# `convmatrix run --cell CELL`, with the tests' fault plugin mounted into its container: the
# only change to what `nox -s <container cell>` runs.
FAULTY_LANE = """
import sys
from convmatrix.cli import main as cli
from convmatrix.run.lanes import containers

plugins = sys.argv[1]
run_kwargs = containers.run_kwargs


def with_faults(spec, *engine):
    kwargs = run_kwargs(spec, *engine)
    kwargs["volumes"] = {**kwargs["volumes"], plugins: {"bind": "/plugins", "mode": "ro"}}
    kwargs["environment"] = {**kwargs["environment"], "PYTHONPATH": "/plugins",
                             "CONVMATRIX_FAULTS": "/plugins/faults.json"}
    return kwargs


containers.run_kwargs = with_faults
sys.exit(cli.main(["run", "--cell", *sys.argv[2:]]))
"""
HANGS = "conv2d-fp32-k3-p1"
PASSES = "conv1d-fp32-k3-p1"


def containers_of(results_dir: Path, cell: str | None = CONTAINER) -> list[str]:
    """The containers, running or stopped, that mount this results directory (of the cell, by
    its image's label, unless None): this test's, whatever else the engine runs meanwhile."""
    selection = ["--filter", f"label={LABEL_CELL}={cell}"] if cell else []
    listed = subprocess.run([docker_cli(), "ps", "-a", "-q", "--no-trunc", *selection],
                            capture_output=True, text=True, check=True).stdout.split()
    mine = []
    for container in listed:
        mounts = subprocess.run([docker_cli(), "inspect", "--format", "{{range .Mounts}}{{.Source}} {{end}}", container],
                                capture_output=True, text=True, check=False).stdout.split()
        # The container writes a scratch directory beside the results (the lane copies its files back).
        scratch = str(results_dir.resolve().parent / f".{results_dir.name}.scratch-")
        if str(results_dir.resolve()) in mounts or any(m.startswith(scratch) for m in mounts):
            mine.append(container)
    return mine


# Run by a parent that only waits: nox, as far as the lane can tell.
PARENT = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


Started = list[tuple[subprocess.Popen[str], Path]]


@pytest.fixture
def lanes_started(tmp_path: Path) -> Iterator[Started]:
    """What start_lane started; whatever a failed test left of it is ended afterwards: the
    processes (their own session) and their containers."""
    started: Started = []
    yield started
    for lane, results in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(lane.pid, signal.SIGKILL)
        lane.communicate()
        for container in containers_of(results):
            subprocess.run([docker_cli(), "rm", "-f", container], capture_output=True, check=False)


def start_lane(tmp_path: Path, wheelhouse: Path, started: Started, *,
               parent: bool = False) -> tuple[subprocess.Popen[str], Path]:
    """The lane of the container cell, its suite hanging in its second case; once that case runs."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(PLUGINS / "convmatrix_faults.py", plugins)
    (plugins / "faults.json").write_text(json.dumps({"hang": {HANGS: 3600}}))
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.format(wheelhouse=wheelhouse))
    out = tmp_path / "run"
    results = rundir.staging_dir(ran(out, CONTAINER))  # where a run writes until it ends
    command = [sys.executable, "-c", FAULTY_LANE, str(plugins), CONTAINER, "--out", str(out),
               "--", "-p", "convmatrix_faults", "-k", f"[{PASSES}] or [{HANGS}]"]
    lane = subprocess.Popen([sys.executable, "-c", PARENT, *command] if parent else command,
                            cwd=REPO, env={**os.environ, "CONVMATRIX_MATRIX": str(matrix)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    started.append((lane, results))
    deadline = time.monotonic() + 1800  # the image is built first where it is missing
    def marker_says_it_hangs() -> bool:
        # The suite runs in-process (runner.suite_command) and writes into its scratch directory.
        for marker in results.parent.glob(f".{results.name}.scratch-*/running-main.json"):
            with contextlib.suppress(OSError):
                if HANGS in marker.read_text():
                    return True
        return False

    while not marker_says_it_hangs():
        assert lane.poll() is None, lane.communicate()
        assert time.monotonic() < deadline, "the hanging case never started"
        time.sleep(0.2)
    return lane, results


def interrupt(lane: subprocess.Popen[str], signum: int) -> tuple[str, str, float]:
    """Signal the process, then wait for the lane's output to end (its own end, where the process
    signalled is its parent); stdout, stderr and how long it took."""
    sent = time.monotonic()
    lane.send_signal(signum)
    stdout, stderr = lane.communicate(timeout=60)
    return stdout, stderr, time.monotonic() - sent


def assert_interrupted_cleanly(results: Path, running: str, stderr: str, signum: int) -> None:
    name = signal.Signals(signum).name
    assert stderr.strip().splitlines()[-1] == (
        f"convmatrix: {CONTAINER}: interrupted by {name}; the container was killed and removed; "
        f"its run is recorded as incomplete in {results} (run it again, or --resume)"), stderr[-3000:]
    assert "Traceback" not in stderr
    # Nothing of it stays with the engine, running or stopped.
    assert containers_of(results) == []
    gone = subprocess.run([docker_cli(), "inspect", running], capture_output=True, text=True, check=False)
    assert gone.returncode != 0
    # The case in flight is `crashed`, naming the signal; the one before it passed; nothing twice.
    records = [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines()]
    assert [(r["case"], r["status"]) for r in records] == [(PASSES, "passed"), (HANGS, "crashed")], records
    assert name in records[1]["message"], records[1]
    assert list(results.glob("running-*.json")) == []
    # The run is recorded as ended by the signal, so neither the report nor --resume trusts it.
    assert json.loads((results / "cell.json").read_text())["exit_code"] == -signum
    assert json.loads((results / "env.json").read_text())["ended"] is None
    assert f"convmatrix: interrupted by {name}: the container was killed" in (results / "log.txt").read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_lane_leaves_no_container_and_records_the_case_in_flight(
    tmp_path: Path, wheelhouse: Path, base: str, lanes_started: Started, signum: signal.Signals
) -> None:
    lane, results = start_lane(tmp_path, wheelhouse, lanes_started)
    (running,) = containers_of(results)
    stdout, stderr, took = interrupt(lane, signum)
    assert lane.returncode == 128 + signum, stdout[-3000:] + stderr[-3000:]
    assert took < 20, f"the lane took {took:.1f} s to end after {signal.Signals(signum).name}"
    assert_interrupted_cleanly(results, running, stderr, signum)


def test_a_lane_whose_nox_is_killed_alone_stops_too(tmp_path: Path, wheelhouse: Path, base: str,
                                                    lanes_started: Started) -> None:
    """SIGTERM to nox's process only (kill PID, `timeout`): the lane gets SIGTERM as its parent
    dies, instead of running the suite to its end unattended."""
    parent, results = start_lane(tmp_path, wheelhouse, lanes_started, parent=True)
    (running,) = containers_of(results)
    _, stderr, took = interrupt(parent, signal.SIGTERM)
    assert parent.returncode == -signal.SIGTERM  # the parent itself just died
    assert took < 20, f"the lane took {took:.1f} s to end after its parent died"
    assert_interrupted_cleanly(results, running, stderr, signal.SIGTERM)


def test_exit_status_and_oom_are_read_although_the_engine_removes_the_container(base: str, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With auto_remove the container and its state may be gone the moment it exits: its exit
    status and an OOM kill still reach the outcome, and nothing is left."""
    limited = containers.run_kwargs
    monkeypatch.setattr(containers, "run_kwargs",
                        lambda spec, *engine: {**limited(spec, *engine), "mem_limit": "64m", "memswap_limit": "64m"})
    (tmp_path / "results").mkdir()
    (tmp_path / "suite").mkdir()

    def spec(*command: str) -> containers.RunSpec:
        return containers.RunSpec(image=base, command=list(command), results_dir=tmp_path / "results",
                                  suite_dir=tmp_path / "suite", gpu=None, environment={})

    log = tmp_path / "log.txt"
    with containers.client() as engine:
        quick = containers.run(engine, spec("true"), log)
        failed = containers.run(engine, spec("python3", "-c", "print('to the log'); raise SystemExit(3)"), log)
        oom = containers.run(engine, spec("python3", "-c", "x = bytearray(512 << 20)"), log)
        child = containers.run(engine, spec("sh", "-c", "python3 -c 'x = bytearray(512 << 20)'; echo child=$?"), log)
    assert quick == containers.Outcome(exit_code=0, oom_killed=False)
    assert failed == containers.Outcome(exit_code=3, oom_killed=False)
    assert oom == containers.Outcome(exit_code=137, oom_killed=True)
    assert child == containers.Outcome(exit_code=0, oom_killed=True)  # a worker killed, PID 1 lived on
    assert containers_of(tmp_path / "results", cell=None) == []
    text = log.read_text()
    assert "to the log\n" in text and "child=137\n" in text


# --- hardened cell containers (issue 21, item 1) -------------------------------------------------

def test_a_cell_container_cannot_plant_a_root_shell(base: str, tmp_path: Path) -> None:
    """A suite step that copied a shell into /results with the setuid bit left a root shell on the
    host. Now: not root, no capability, no new privileges, a read-only root, and only the suite's
    own files leave its scratch directory, as plain files without setuid bits."""
    assert_no_root_shell("docker", base, tmp_path)


def test_every_limit_applies_under_this_engine(base: str, tmp_path: Path) -> None:
    """docker inspect of a created cell container: what run_kwargs asks for is what the engine set."""
    info = inspect_cell_container("docker", base, tmp_path)
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True and host["PidsLimit"] == containers.PIDS_LIMIT
    assert set(host["Tmpfs"]) == {"/tmp"} and host["NetworkMode"] == "none" and host["Privileged"] is False
    assert info["Config"]["User"] == ("65534:65534" if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}")
    binds = sorted(host["Binds"])
    assert binds == sorted([f"{tmp_path / 'suite'}:/suite:ro", f"{(tmp_path / 'results').resolve()}:/results:rw"])
