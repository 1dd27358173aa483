"""The slot pool, prepare-ahead, results reuse and concurrent cells (issue 12), with lanes of
the test's own: no suite runs."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from convmatrix import gpus, interrupts
from convmatrix.cli import main as cli
from convmatrix.errors import BadInput
from convmatrix.gpus import Gpu
from convmatrix.matrix import Matrix, load
from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import ahead, lanes, options, orchestrate, pool, reuse
from convmatrix.run.lanes import Log, Prepared, SuiteRun
from convmatrix.run.runner import Target
from testkit import H200_SLICES, SLICE_UUIDS, ran, results_in

H100 = [Gpu(index=i, name="NVIDIA H100", capability="9.0") for i in range(2)]
MIXED = [*H100, Gpu(index=2, name="NVIDIA A100", capability="8.0")]
SLICES = gpus.parse_smi(*H200_SLICES)  # one H200 in MIG mode: two 3g.71gb slices
WHOLE_AND_SLICES = [*H100, *SLICES]

MATRIX = """
name = "t"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["bundled", "9.5.1.17", "9.10.2.21"]
python = ["3.11"]
[control]
cudnn = "bundled"
"""


def test_identical_gpus_are_one_pool_mixed_ones_one_pool_each() -> None:
    (h100,) = pool.specs(H100, every_gpu=False, jobs=1)
    assert h100.key == "h100-sm90" and [s.name for s in h100.slots] == ["gpu0", "gpu1"]
    assert [s.key for s in pool.specs(MIXED, every_gpu=False, jobs=1)] == ["h100-sm90", "a100-sm80"]
    every = pool.specs(H100, every_gpu=True, jobs=1)
    assert [s.key for s in every] == ["h100-sm90-gpu0", "h100-sm90-gpu1"] and all(s.per_device for s in every)


def test_slices_of_one_profile_are_one_pool_beside_the_whole_gpus() -> None:
    """Issue 37: a pool may mix whole GPUs and slices; identical slices are one pool of their own
    key, as identical GPUs are, with a slot per slice; --every-gpu a pool per slice."""
    h100, h200 = pool.specs(WHOLE_AND_SLICES, every_gpu=False, jobs=1)
    assert (h100.key, [s.name for s in h100.slots]) == ("h100-sm90", ["gpu0", "gpu1"])
    assert (h200.key, [s.name for s in h200.slots]) == ("h200-sm90-mig3g-71gb", ["gpu0-mig0", "gpu0-mig1"])
    every = pool.specs(WHOLE_AND_SLICES, every_gpu=True, jobs=1)
    assert [s.key for s in every] == ["h100-sm90-gpu0", "h100-sm90-gpu1", "h200-sm90-mig3g-71gb-gpu0-mig0",
                                      "h200-sm90-mig3g-71gb-gpu0-mig1"]


def test_jobs_are_cpu_slots() -> None:
    (cpu,) = pool.specs([], every_gpu=False, jobs=3)
    assert cpu.key == "cpu" and len(cpu.slots) == 3 and all(s.gpu is None for s in cpu.slots)
    assert pool.threads_per_slot(1) is None and pool.threads_per_slot(2) == max(1, (os.cpu_count() or 1) // 2)


def test_run_options_for_speed() -> None:
    opts = options.parse(["--jobs", "4", "--prepare-ahead", "0", "--prepare-disk", "2.5", "--reuse-results"])
    assert (opts.jobs, opts.prepare_ahead, opts.prepare_disk_gb, opts.reuse_results) == (4, 0, 2.5, True)
    assert (options.parse([]).jobs, options.parse([]).prepare_ahead) == (1, 1)
    for bad in (["--jobs", "0"], ["--jobs", "x"], ["--prepare-ahead", "-1"], ["--prepare-disk", "lots"]):
        with pytest.raises(BadInput, match="run options"):
            options.parse(bad)


def test_a_reuse_key_changes_with_what_decides_a_result(tmp_path: Path) -> None:
    target = Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)

    def key(lock: str = "lock", driver: str = "550", args: tuple[str, ...] = ("-k", "x")) -> str | None:
        return reuse.key(target, lock, driver=driver, suite_args=args, blocking=False)

    first = key()
    assert first and first == key()
    assert key(lock="") is None
    assert first not in (key(lock="other"), key(driver="560"), key(args=()))


def test_a_venvs_lock_is_asked_again_only_when_its_site_packages_changed(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    asked: list[str] = []
    listing = iter(["a==1", "a==1\nb==2", "c==3"])

    def environment_lock(python: str) -> str:
        asked.append(python)
        return hashlib.sha256(next(listing).encode()).hexdigest()

    monkeypatch.setattr(reuse, "environment_lock", environment_lock)
    first = reuse.venv_lock(tmp_path / "venv", "py")
    assert first and reuse.venv_lock(tmp_path / "venv", "py") == first and asked == ["py"]
    (site / "b-2.dist-info").mkdir()  # what an install does
    os.utime(site, ns=(site.stat().st_atime_ns, site.stat().st_mtime_ns + 1))  # a coarse clock still moves
    second = reuse.venv_lock(tmp_path / "venv", "py")
    assert second != first and asked == ["py", "py"] and reuse.venv_lock(tmp_path / "venv", "py") == second
    assert reuse.venv_lock(tmp_path / "no-venv", "py") != second and len(asked) == 3  # nothing to key on: asked


def test_cells_of_one_torch_are_prepared_one_after_another() -> None:
    """Nothing downloaded twice: a second build of the same torch waits for the first."""
    preparer = ahead.Preparer(ahead.Limits(builds=2, disk_gb=None), lambda: True, lambda line: None)
    inside: list[str] = []
    overlap = threading.Event()

    def prepare(name: str) -> Callable[[], str]:
        def go() -> str:
            inside.append(name)
            if len(inside) > 1:
                overlap.set()
            time.sleep(0.2)
            inside.remove(name)
            return name
        return go

    same = [Cell(lane="baremetal", cudnn=c) for c in ("bundled", "9.5.1.17")]
    futures = [preparer.submit(c, prepare(c.cudnn)) for c in same]
    assert [f.result() for f in futures] == ["bundled", "9.5.1.17"] and not overlap.is_set()
    other = [Cell(lane="baremetal", torch=t) for t in ("2.5.1", "2.6.0")]
    futures = [preparer.submit(c, prepare(c.torch)) for c in other]
    for future in futures:
        future.result()
    assert overlap.is_set()  # different wheels: side by side
    preparer.shutdown()


class ConcurrentLane:
    """Each run waits (up to 5 s) until `together` runs are in flight at once; `peak` is the most
    there were: proof of concurrency."""

    def __init__(self, together: int, *, interrupt: bool = False) -> None:
        self.together = together
        self.active = self.peak = 0
        self.guard = threading.Lock()
        self.reached = threading.Event()
        self.interrupt = interrupt
        self.runs: list[SuiteRun] = []
        self.prepared: list[str] = []

    def problem(self, cell: Cell) -> str | None:
        return None

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        self.prepared.append(cell.id)
        return Prepared(python="py", lock=f"lock-{cell.id}")

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        self.runs.append(run)
        run.out.mkdir(parents=True, exist_ok=True)
        rundir.write_json(run.out / rundir.ENV_JSON, {"schema": 1, "cell_id": run.target.cell.id, "gpus": [],
                                                      "knobs": {}, "argv": [], "isolation": {},
                                                      "ended": rundir.records.now()})
        rundir.write_json(run.out / "running-gw0.json", {"case": "a", "nodeid": "n"})
        with self.guard:
            self.active += 1
            self.peak = max(self.peak, self.active)
            if self.peak >= self.together:
                self.reached.set()
        self.reached.wait(5)
        with self.guard:
            self.active -= 1
        if self.interrupt:
            if run.target.gpu is None or run.target.gpu.index == 0:
                os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):
                interrupts.raise_if_stopped()
                time.sleep(0.1)
        (run.out / "running-gw0.json").unlink()
        rundir.append_result(run.out, {"schema": 1, "case": "a", "status": "passed", "message": None,
                                       "nodeid": "n"})
        return 0


@pytest.fixture
def matrix(write_matrix: Callable[[str], Path]) -> Matrix:
    return load(write_matrix(MATRIX))


def go(monkeypatch: pytest.MonkeyPatch, matrix: Matrix, lane: ConcurrentLane, out: Path, *args: str,
       found: list[Gpu] | None = None) -> list[str]:
    monkeypatch.setattr(gpus, "discover", lambda: list(found or []))
    monkeypatch.setattr(gpus, "driver", lambda: "550")
    monkeypatch.setattr(lanes, "lane", lambda name: lane)
    lines: list[str] = []
    orchestrate.run(matrix, matrix.cells, options.parse(["--out", str(out), *args]), lines.append, strict=True)
    return lines


def results(run: Path) -> list[str]:
    """The result directories' names in a run directory."""
    return [p.name for p in results_in(run)]


def test_a_two_gpu_pool_runs_two_cells_at_once_one_result_per_cell(monkeypatch: pytest.MonkeyPatch, matrix: Matrix,
                                                                   tmp_path: Path) -> None:
    lane = ConcurrentLane(2)
    lines = go(monkeypatch, matrix, lane, tmp_path / "run", found=H100)
    assert sorted(results(tmp_path / "run")) == sorted(ran(tmp_path / "run", c.id, "h100-sm90").name for c in matrix.cells)
    assert len(lane.runs) == 3 and lane.peak == 2
    assert {r.target.gpu.index for r in lane.runs if r.target.gpu is not None} == {0, 1}
    assert all(r.env.get("OMP_NUM_THREADS") for r in lane.runs)  # the CPU shared out between the two
    assert any(line.startswith("[3/3] ") for line in lines)


def test_jobs_run_cells_at_once_on_the_cpu(monkeypatch: pytest.MonkeyPatch, matrix: Matrix, tmp_path: Path) -> None:
    lane = ConcurrentLane(2)
    go(monkeypatch, matrix, lane, tmp_path / "run", "--jobs", "2")
    assert len(lane.runs) == 3 and lane.peak == 2 and all(rundir.is_complete(ran(tmp_path / "run", c.id)) for c in matrix.cells)


def test_every_gpu_keeps_one_run_per_device(monkeypatch: pytest.MonkeyPatch, matrix: Matrix, tmp_path: Path) -> None:
    lane = ConcurrentLane(2)
    go(monkeypatch, matrix, lane, tmp_path / "run", "--every-gpu", found=H100)
    names = {name.split("@")[1] for name in results(tmp_path / "run")}
    assert names == {"h100-sm90-gpu0", "h100-sm90-gpu1"} and len(lane.runs) == 6


def test_a_mixed_runner_runs_every_cell_once_per_generation(monkeypatch: pytest.MonkeyPatch, matrix: Matrix,
                                                             tmp_path: Path) -> None:
    lane = ConcurrentLane(3)
    go(monkeypatch, matrix, lane, tmp_path / "run", found=MIXED)
    assert lane.peak == 3  # both H100s and the A100 at once
    keys = sorted(name.split("@")[1] for name in results(tmp_path / "run"))
    assert keys == ["a100-sm80"] * 3 + ["h100-sm90"] * 3


def test_two_slices_of_one_gpu_run_two_cells_at_once_each_pinned_by_its_uuid(
    monkeypatch: pytest.MonkeyPatch, matrix: Matrix, tmp_path: Path
) -> None:
    lane = ConcurrentLane(2)
    go(monkeypatch, matrix, lane, tmp_path / "run", found=SLICES)
    assert lane.peak == 2 and len(lane.runs) == 3
    assert sorted(results(tmp_path / "run")) == sorted(ran(tmp_path / "run", c.id, "h200-sm90-mig3g-71gb").name
                                                       for c in matrix.cells)
    pins = {r.target.gpu.pin for r in lane.runs if r.target.gpu is not None}
    assert pins == set(SLICE_UUIDS)  # both slices used, each run on one of them
    for cell in matrix.cells:
        meta = json.loads((ran(tmp_path / "run", cell.id, "h200-sm90-mig3g-71gb") / rundir.CELL_JSON).read_text())
        assert meta["gpu"]["uuid"] in SLICE_UUIDS and meta["gpu"]["mig_profile"] == "3g.71gb"


def test_a_gpu_whose_mig_mode_is_pending_a_reset_is_said_once(monkeypatch: pytest.MonkeyPatch, matrix: Matrix,
                                                              tmp_path: Path) -> None:
    pending = [replace(g, note="GPU 0 (NVIDIA H100): MIG mode is disabled, enabled after its next reset; taken as "
                               "it is now") for g in H100]
    lines = go(monkeypatch, matrix, ConcurrentLane(2), tmp_path / "run", found=pending)
    assert sum("enabled after its next reset" in line for line in lines) == 1


def test_reuse_results_copies_a_stored_result_instead_of_running(monkeypatch: pytest.MonkeyPatch, matrix: Matrix,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("CONVMATRIX_RESULTS_STORE", str(tmp_path / "store"))
    go(monkeypatch, matrix, ConcurrentLane(1), tmp_path / "first")
    again = ConcurrentLane(1)
    go(monkeypatch, matrix, again, tmp_path / "second")
    assert len(again.runs) == 3  # not asked to reuse: run again
    reused = ConcurrentLane(1)
    lines = go(monkeypatch, matrix, reused, tmp_path / "third", "--reuse-results")
    assert reused.runs == [] and sum("reused" in line for line in lines) == 3
    for cell in matrix.cells:
        meta = json.loads((ran(tmp_path / "third", cell.id) / rundir.CELL_JSON).read_text())
        assert meta["reused"]["key"] and rundir.is_complete(ran(tmp_path / "third", cell.id))


def test_sigterm_stops_every_running_cell_and_records_each(monkeypatch: pytest.MonkeyPatch,
                                                           write_matrix: Callable[[str], Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gpus, "discover", lambda: list(H100))
    monkeypatch.setattr(gpus, "driver", lambda: "550")
    monkeypatch.setattr(interrupts, "die_with_parent", lambda: None)
    lane = ConcurrentLane(2, interrupt=True)
    monkeypatch.setattr(lanes, "lane", lambda name: lane)
    out = tmp_path / "run"
    code = cli.main(["run", "-m", str(write_matrix(MATRIX)), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 143
    assert err.count("\n") == 1 and "their 2 runs are recorded as incomplete" in err, err
    partials = sorted(out.glob("*.partial"))
    assert len(partials) == 2 and not [p for p in results_in(out) if not rundir.is_staging(p)]
    for partial in partials:
        records = [json.loads(line) for line in (partial / rundir.RESULTS).read_text().splitlines()]
        assert [(r["case"], r["status"]) for r in records] == [("a", "crashed")]
        assert json.loads((partial / rundir.CELL_JSON).read_text())["exit_code"] == -signal.SIGTERM


def test_a_driver_too_old_for_the_stacks_cuda_is_unsupported_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, matrix: Matrix, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, item 4: a driver the CUDA 12 wheels cannot use is a fact about the runner, decided
    before running when the driver is known; the report lists it and exits 0."""
    lane = ConcurrentLane(2)
    monkeypatch.setattr(gpus, "discover", lambda: list(H100))
    monkeypatch.setattr(gpus, "driver", lambda: "470.82.01")
    monkeypatch.setattr(lanes, "lane", lambda name: lane)
    out = tmp_path / "run"
    orchestrate.run(matrix, matrix.cells, options.parse(["--out", str(out)]), print, strict=True)
    assert lane.runs == []
    meta = json.loads((ran(out, matrix.cells[0].id, "h100-sm90") / rundir.CELL_JSON).read_text())
    assert meta["unsupported"] == "driver 470.82.01 < 525.60.13 for cu124"
    capsys.readouterr()
    assert matrix.control is not None
    assert cli.main(["report", str(out), "--format", "json"]) == 3  # the control cannot run here either
    data = json.loads(capsys.readouterr().out)
    assert {c["verdict"] for c in data["cells"] if c["cell"] != matrix.control.id} == {"unsupported"}
    assert any(a.startswith("UNSUPPORTED on this runner:") for a in data["control"]["alerts"])
