"""The one orchestration every lane goes through, driven with a lane of the test's own."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol
from xml.etree import ElementTree

import pytest

from convmatrix import gpus, interrupts, results
from convmatrix.cli import main as cli
from convmatrix.errors import BadInput, InfrastructureError
from convmatrix.matrix import Matrix, load
from convmatrix.matrix.cells import Cell
from convmatrix.results import plans, rundir
from convmatrix.run import lanes, options, orchestrate, outages
from convmatrix.run.lanes import Lane, Log, Prepared, SuiteRun
from testkit import HOST, OVERRIDE_MATRIX, TWO_H100, ran, results_in


class FakeLane:
    """Writes what the suite would: env.json and one line per case; can fail where told to."""

    def __init__(self, *, problem: str | None = None, broken: Iterable[str] = (), failing: Iterable[str] = (),
                 cases: Iterable[str] = ("a", "b")) -> None:
        self._problem, self.broken, self.failing, self.cases = problem, set(broken), set(failing), tuple(cases)
        self.runs: list[SuiteRun] = []

    def problem(self, cell: Cell) -> str | None:
        return self._problem

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        if cell.id in self.broken:
            raise InfrastructureError(f"{cell.id}: install failed")
        return Prepared(python="py", record={"venv": f"/v/{cell.id}"})

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        self.runs.append(run)
        run.out.mkdir(parents=True, exist_ok=True)
        env = {"schema": 1, "cell_id": run.target.cell.id, "gpus": [], "knobs": {}, "argv": [], "isolation": {},
               "ended": rundir.records.now()}
        rundir.write_json(run.out / rundir.ENV_JSON, env)
        for case in self.cases if not run.select else [n.split("[", 1)[1][:-1] for n in run.select]:
            status = "failed" if case in self.failing else "passed"
            rundir.append_result(run.out, {"schema": 1, "case": case, "status": status, "message": None,
                                           "nodeid": f"suites/test_conv.py::test_conv[{case}]"})
        return 1 if self.failing else 0


MATRIX = OVERRIDE_MATRIX


class Go(Protocol):
    """orchestrate.run over the matrix's cells with this lane and these `convmatrix run` options."""

    def __call__(self, lane: Lane, *args: str, strict: bool = True) -> orchestrate.Outcome: ...


Setup = tuple[Matrix, Go, list[str], Path]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_matrix: Callable[[str], Path]) -> Setup:
    monkeypatch.setattr(gpus, "discover", list)
    matrix = load(write_matrix(MATRIX))
    lines: list[str] = []

    def go(lane: Lane, *args: str, strict: bool = True) -> orchestrate.Outcome:
        monkeypatch.setattr(lanes, "lane", lambda name: lane)
        opts = options.parse(["--out", str(tmp_path / "run"), *args])
        return orchestrate.run(matrix, matrix.cells, opts, lines.append, strict=strict)

    return matrix, go, lines, tmp_path / "run"


def meta(directory: Path) -> dict[str, Any]:
    fields: dict[str, Any] = json.loads((directory / rundir.CELL_JSON).read_text())
    return fields


def test_every_cell_runs_into_its_own_directory_with_what_the_lane_records(setup: Setup) -> None:
    matrix, go, _, out = setup
    assert matrix.control is not None  # MATRIX names one
    outcome = go(FakeLane())
    assert sorted(outcome.ran) == sorted(c.id for c in matrix.cells)
    control = ran(out, matrix.control.id)
    assert meta(control)["control"] is True and meta(control)["venv"] == f"/v/{matrix.control.id}"
    assert meta(control)["exit_code"] == 0 and rundir.is_complete(control)
    assert not list(out.glob("*.partial"))


def test_a_run_writes_its_plan_and_the_report_holds_it_to_it(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix, go, _, out = setup
    go(FakeLane())
    (path,) = (out / plans.PLANS).glob("*.json")
    assert path.name.startswith(f"{HOST}-")
    expected, _ = plans.read(out, [])
    assert sorted((e.cell, e.gpu_key, e.host) for e in expected) == sorted((c.id, "cpu", HOST) for c in matrix.cells)
    def verdicts() -> dict[str, str]:
        cli.main(["report", str(out), "--format", "json", "--fail-on", "never"])
        return {c["cell"]: c["verdict"] for c in json.loads(capsys.readouterr().out)["cells"]}

    assert "not-run" not in verdicts().values()
    # A planned cell whose result went missing (deleted, never copied back) is red, not absent.
    gone = next(c for c in matrix.cells if c != matrix.control)
    shutil.rmtree(ran(out, gone.id))
    assert verdicts()[gone.id] == "not-run"


def test_a_runner_told_to_expect_a_gpu_that_has_none_exits_4_before_running(setup: Setup) -> None:
    _matrix, go, _, _out = setup
    lane = FakeLane()
    with pytest.raises(InfrastructureError, match="--expect-gpu h100-sm90: this runner has no GPU") as err:
        go(lane, "--expect-gpu", "h100-sm90")
    assert err.value.exit_code == 4 and not lane.runs
    go(lane, "--expect-gpu", "cpu")  # a CPU runner may say it expects the CPU
    assert lane.runs


def test_resume_keeps_complete_cells_and_redoes_the_rest(setup: Setup) -> None:
    matrix, go, _, out = setup
    assert matrix.control is not None  # MATRIX names one
    go(FakeLane())
    control = ran(out, matrix.control.id)
    other = next(p for p in results_in(out) if p != control)
    cell = meta(other)
    cell.pop("ended")  # as if the harness had died before closing it
    rundir.write_json(other / rundir.CELL_JSON, cell)
    lane = FakeLane()
    outcome = go(lane, "--resume")
    assert outcome.kept == [matrix.control.id] and len(lane.runs) == 1
    assert rundir.is_complete(other)


def test_a_cell_that_cannot_run_is_recorded_not_run_or_with_strict_invalid(setup: Setup) -> None:
    matrix, go, _lines, out = setup
    assert go(FakeLane(problem="no Python 3.11"), strict=False).skipped
    recorded = results_in(out)
    assert [d.name for d in recorded] == sorted(ran(out, c.id).name for c in matrix.cells)
    for directory in recorded:  # the reason, for the report: not only a line on the terminal
        assert meta(directory)["not_run"] == "no Python 3.11" and "exit_code" not in meta(directory)
        assert not rundir.is_complete(directory)  # --resume tries it again
    with pytest.raises(InfrastructureError, match="2 cell"):
        go(FakeLane(problem="no Python 3.11"))
    for directory in results_in(out):
        assert meta(directory)["error"] == "not run: no Python 3.11"


def test_a_failed_setup_is_recorded_the_others_still_run_and_the_run_fails(setup: Setup) -> None:
    matrix, go, lines, out = setup
    broken = matrix.cells[0].id
    lane = FakeLane(broken=[broken])
    with pytest.raises(InfrastructureError, match=f"{broken}: install failed") as raised:
        go(lane)
    assert len(lane.runs) == len(matrix.cells) - 1
    assert meta(ran(out, broken))["error"] == f"{broken}: install failed"
    # The lane's message already names its cell: the run's last line and its log say it once.
    assert f"{broken}: {broken}" not in str(raised.value)
    assert not [line for line in lines if f"{broken}: {broken}" in line]


def test_a_failed_retry_never_replaces_a_complete_result(setup: Setup) -> None:
    matrix, go, _, out = setup
    go(FakeLane())
    broken = matrix.cells[0].id
    with pytest.raises(InfrastructureError):
        go(FakeLane(broken=[broken]))
    assert "error" not in meta(ran(out, broken)) and rundir.is_complete(ran(out, broken))


def test_blocking_rerun_selects_the_failing_cases_with_the_variable_set(setup: Setup) -> None:
    matrix, go, _, out = setup
    lane = FakeLane(failing=["b"])
    go(lane, "--rerun-blocking")
    reruns = [r for r in lane.runs if r.select]
    assert len(reruns) == len(matrix.cells)
    assert all(r.select == ("suites/test_conv.py::test_conv[b]",) and r.env == {"CUDA_LAUNCH_BLOCKING": "1"}
               and r.out == r.target.results_dir / rundir.BLOCKING for r in reruns)
    assert all((ran(out, c.id) / rundir.BLOCKING / rundir.RESULTS).exists() for c in matrix.cells)


class PlantingLane(FakeLane):
    """A hostile suite (issue 32, items 1 and 2): its cell's run ends by planting links where the
    harness writes next: explain/ and blocking/ to a folder outside, and the temporary names the
    harness's writer took (`.cell.json.<pid>.tmp`: this process is the harness) to files there."""

    def __init__(self, outside: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outside = outside

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        code = super().run(prepared, run, log)
        if run.out == run.target.results_dir:
            for name in (rundir.EXPLAIN, rundir.BLOCKING):
                (run.out / name).symlink_to(self.outside, target_is_directory=True)
            for name in (rundir.CELL_JSON, rundir.FIRST_CAUSE):
                (run.out / f".{name}.{os.getpid()}.tmp").symlink_to(self.outside / name)
        return code


def test_links_a_suite_plants_for_the_reruns_and_temporary_files_are_never_followed(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix, go, lines, out = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me\n")
    go(PlantingLane(outside, failing=["a"]), "--rerun-blocking", "--explain")
    assert sorted(p.name for p in outside.iterdir()) == ["precious"]  # nothing written, nothing overwritten
    for cell in matrix.cells:
        result = ran(out, cell.id)
        for name in (rundir.EXPLAIN, rundir.BLOCKING):
            assert (result / name).is_dir() and not (result / name).is_symlink()
        assert (result / rundir.EXPLAIN / f"{rundir.explain_name('a')}.json").is_file() and (result / rundir.BLOCKING / rundir.RESULTS).is_file()
        assert not (result / rundir.CELL_JSON).is_symlink() and meta(result)["exit_code"] == 1
    assert any(f"{rundir.EXPLAIN}/ was a symlink" in line for line in lines)
    assert any(f"{rundir.BLOCKING}/ was a symlink" in line for line in lines)


def test_explain_ids_equal_after_a_suffix_or_a_case_fold_never_share_a_name(setup: Setup) -> None:
    """Issue 32, item 7: `zz`'s finding was explain/zz.json, the folder `zz.json`'s re-run needed
    (the cell stopped, exit 4, left .partial); and `Zz` is `zz` on a case-folding file system. Each
    case's files are named by a hash of its id now, and the report reads each case's own."""
    matrix, go, _, out = setup
    failing = ["zz", "zz.json", "Zz", "zz.json.json"]
    go(FakeLane(failing=failing, cases=[*failing, "b"]), "--explain")
    for cell in matrix.cells:
        result = ran(out, cell.id)
        assert rundir.is_complete(result) and meta(result)["exit_code"] == 1
        names = {rundir.explain_name(case) for case in failing}
        assert len(names) == len(failing) and len({n.casefold() for n in names}) == len(failing)
        for case in failing:
            found = json.loads((result / rundir.EXPLAIN / f"{rundir.explain_name(case)}.json").read_text())
            assert found["case"] == case and found["status"] == "failed"
            assert (result / rundir.EXPLAIN / rundir.explain_name(case) / rundir.RESULTS).is_file()
    loaded = results.load([out]).results
    assert all(set(r.explained) == set(failing) for r in loaded)


class CrashingLane(FakeLane):
    """Case "a" kills the first suite process: its marker stays and env.json never ends; a
    continued run (--continue-run) finishes the rest, as the suite does."""

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        self.runs.append(run)
        run.out.mkdir(parents=True, exist_ok=True)
        if "--continue-run" not in run.args:
            rundir.write_json(run.out / rundir.ENV_JSON, {"schema": 1, "gpus": [], "knobs": {}, "argv": [],
                                                          "isolation": {}, "ended": None})
            rundir.write_json(run.out / "running-main.json", {"case": "a", "nodeid": "n-a"})
            return -11
        env = json.loads((run.out / rundir.ENV_JSON).read_text())
        rundir.write_json(run.out / rundir.ENV_JSON, {**env, "ended": rundir.records.now()})
        rundir.append_result(run.out, {"schema": 1, "case": "b", "status": "passed", "nodeid": "n-b"})
        return 1


def test_a_case_that_kills_the_suite_costs_itself_and_the_rest_runs_on(setup: Setup) -> None:
    matrix, go, lines, out = setup
    lane = CrashingLane()
    go(lane)
    assert [("--continue-run" in r.args) for r in lane.runs] == [False, True] * len(matrix.cells)
    for cell in matrix.cells:
        directory = ran(out, cell.id)
        records = [json.loads(line) for line in (directory / rundir.RESULTS).read_text().splitlines()]
        assert [(r["case"], r["status"]) for r in records] == [("a", "crashed"), ("b", "passed")]
        assert rundir.is_complete(directory) and meta(directory)["exit_code"] == 1
    assert sum("ended early (signal 11, SIGSEGV in a)" in line for line in lines) == len(matrix.cells)


def test_shards_split_the_cells_and_each_runs_the_control(setup: Setup) -> None:
    matrix, go, _, _ = setup
    assert matrix.control is not None
    first, second = FakeLane(), FakeLane()
    go(first, "--shard", "1/2")
    go(second, "--shard", "2/2")
    for shard in (first, second):
        assert matrix.control.id in [r.target.cell.id for r in shard.runs]
    others = [r.target.cell.id for r in first.runs + second.runs if r.target.cell != matrix.control]
    assert sorted(others) == sorted(c.id for c in matrix.cells if c != matrix.control)


# --- interrupted: SIGTERM and SIGINT end the run, recorded and said in one line -----------------

class InterruptedLane(FakeLane):
    """Its first case passes; SIGTERM reaches the process while the second one runs (where
    `during` is "run"), or while the cell is being prepared (an image build, an install)."""

    def __init__(self, during: str) -> None:
        super().__init__()
        self.during = during

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        if self.during == "prepare":
            sigterm_now()
        return super().prepare(cell, matrix, log)

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        run.out.mkdir(parents=True, exist_ok=True)
        rundir.write_json(run.out / rundir.ENV_JSON, {"schema": 1, "cell_id": run.target.cell.id, "gpus": [],
                                                      "knobs": {}, "argv": [], "isolation": {}, "ended": None})
        rundir.append_result(run.out, {"schema": 1, "case": "a", "status": "passed", "message": None,
                                       "nodeid": "suites/test_conv.py::test_conv[a]"})
        rundir.write_json(run.out / "running-gw0.json", {"case": "b", "nodeid": "suites/test_conv.py::test_conv[b]",
                                                         "started": rundir.records.now()})
        sigterm_now()
        return 0


def sigterm_now() -> None:
    """As a suite process does: the signal reaches the main thread, which stops the workers'
    blocking calls (interrupts.stop_all); a lane in the main thread has the handler raise here."""
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(300):
        interrupts.raise_if_stopped()
        time.sleep(0.1)


RunCommand = Callable[[Lane], tuple[int, str]]


@pytest.fixture
def run_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_matrix: Callable[[str], Path],
                capsys: pytest.CaptureFixture[str]) -> RunCommand:
    """`convmatrix run` over MATRIX with the given lane, as nox runs it: its exit status and stderr."""
    monkeypatch.setattr(gpus, "discover", list)
    monkeypatch.setattr(interrupts, "die_with_parent", lambda: None)  # not for the test process
    path = write_matrix(MATRIX)

    def go(lane: Lane) -> tuple[int, str]:
        monkeypatch.setattr(lanes, "lane", lambda name: lane)
        code = cli.main(["run", "-m", str(path), "--out", str(tmp_path / "run")])
        return code, capsys.readouterr().err

    return go


def test_sigterm_during_a_run_records_the_case_in_flight_and_ends_in_one_line(
    run_command: RunCommand, tmp_path: Path
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    code, err = run_command(InterruptedLane("run"))
    assert code == 143
    partial = next((tmp_path / "run").glob("*.partial"))
    assert err == (f"convmatrix: {partial.name.split('@')[0]}: interrupted by SIGTERM; its run is recorded as "
                   f"incomplete in {partial} (run it again, or --resume)\n")
    records = [json.loads(line) for line in (partial / rundir.RESULTS).read_text().splitlines()]
    assert [(r["case"], r["status"]) for r in records] == [("a", "passed"), ("b", "crashed")]
    assert "SIGTERM" in records[1]["message"]
    assert meta(partial)["exit_code"] == -signal.SIGTERM
    assert not (tmp_path / "run" / partial.name.removesuffix(rundir.PARTIAL)).exists()  # nothing swapped in
    assert signal.getsignal(signal.SIGTERM) == before


def test_sigterm_before_the_suite_ran_says_so_in_one_line(run_command: RunCommand) -> None:
    code, err = run_command(InterruptedLane("prepare"))
    assert code == 143
    assert err.endswith(": interrupted by SIGTERM before its suite ran\n") and err.count("\n") == 1


class ForgingLane(FakeLane):
    """A suite that rewrites its cell.json: another cell id, the control flag, another host."""

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        code = super().run(prepared, run, log)
        rundir.write_json(run.out / rundir.CELL_JSON, {"schema": 1, "cell": "forged", "control": True,
                                                       "host": "elsewhere", "requested": {"torch": "9.9.9"}})
        return code


def test_what_the_harness_knows_is_never_taken_back_from_a_file_the_suite_wrote(setup: Setup) -> None:
    """Issue 21, item 6: a forged cell id or control flag survived into the report."""
    matrix, go, _, out = setup
    go(ForgingLane())
    for cell in matrix.cells:
        written = meta(ran(out, cell.id))
        assert written["cell"] == cell.id and written["host"] == HOST
        assert written["control"] is (cell == matrix.control) and written["requested"] == cell.values()
        assert written["exit_code"] == 0 and written["ended"]


def test_a_cell_another_run_is_writing_is_refused_naming_the_holder(setup: Setup) -> None:
    """Issue 21, item 5: two runs into one --out both exited 0 and left a broken cell."""
    matrix, go, _lines, out = setup
    busy = next(c for c in matrix.cells if c != matrix.control)
    lane = FakeLane()
    with rundir.held_lock(ran(out, busy.id), holder="node-9"), pytest.raises(BadInput) as err:
        go(lane)
    assert err.value.exit_code == 2
    assert f"{ran(out, busy.id).name}: being written by pid {os.getpid()} on node-9" in str(err.value)
    assert busy not in [r.target.cell for r in lane.runs]  # refused, not written by two
    assert rundir.is_complete(ran(out, str(matrix.control and matrix.control.id)))  # the others still ran


class FullDiskLane(FakeLane):
    """The disk fills while one cell runs."""

    def __init__(self, full: str) -> None:
        super().__init__()
        self.full = full

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        if run.target.cell.id == self.full:
            raise OSError(errno.ENOSPC, "No space left on device", str(run.out / "results.jsonl"))
        return super().run(prepared, run, log)


def test_a_full_disk_during_a_run_is_one_line_and_the_other_cells_still_run(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21, item 9: a full disk during a run was a traceback."""
    matrix, go, _lines, out = setup
    full = next(c for c in matrix.cells if c != matrix.control)
    with pytest.raises(InfrastructureError, match="No space left on device") as err:
        go(FullDiskLane(full.id))
    assert err.value.exit_code == 4
    assert all(rundir.is_complete(ran(out, c.id)) for c in matrix.cells if c != full)
    # Where it happens outside a cell's run, the entry point says it in one line, exit 4.
    monkeypatch.setitem(cli.COMMANDS, "report", lambda args: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device", "/r/report.json")))
    assert cli.main(["report", str(out)]) == 4
    assert capsys.readouterr().err == "convmatrix: /r/report.json: No space left on device\n"


# pip against an index whose name does not resolve (pypa/pip#14250): a warning per retry, then
# the resolver's verdict, which is only the consequence.
PIP_DNS = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken "
    "by 'NewConnectionError('<HTTPSConnection>: Failed to establish a new connection: [Errno -3] Temporary failure "
    "in name resolution')': /whl/cu124/torch/\n"
    "ERROR: Could not find a version that satisfies the requirement torch==2.5.1 (from versions: none)\n")
FOUR = MATRIX.replace('cudnn = ["bundled", "9.5.1.17"]', 'cudnn = ["bundled", "9.5.1.17", "9.6.0.74", "9.7.1.26"]')


class IndexDownLane(FakeLane):
    """The broken cells install from an index that does not resolve, as baremetal.make_venv does:
    each asks the run's outages first, then writes pip's log and fails naming it. The others'
    venvs are already made: they need no index and run."""

    def __init__(self, logs: Path, broken: Iterable[str]) -> None:
        super().__init__(broken=broken)
        self.logs, self.tried = logs, list[str]()

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        if cell.id not in self.broken:
            return Prepared(python="py", record={"venv": f"/v/{cell.id}"})
        outages.check("index", cell.id)
        self.tried.append(cell.id)
        path = self.logs / f"{cell.id}.install.log"
        path.write_text(PIP_DNS)
        raise InfrastructureError(f"{cell.id}: install failed: `pip install torch` exited 1 (see {path})").with_log(path)


def test_an_unreachable_index_is_found_once_and_each_cell_that_needed_it_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_matrix: Callable[[str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(gpus, "discover", list)
    matrix = load(write_matrix(FOUR))
    assert matrix.control is not None
    broken = sorted(c.id for c in matrix.cells if c != matrix.control)
    lane = IndexDownLane(tmp_path, broken)
    monkeypatch.setattr(lanes, "lane", lambda name: lane)
    out, lines = tmp_path / "run", list[str]()
    with pytest.raises(InfrastructureError, match="3 cell") as raised:
        orchestrate.run(matrix, matrix.cells, options.parse(["--out", str(out)]), lines.append, strict=True)
    assert raised.value.exit_code == 4
    # Found once: the first cell that needed the index tried it; the others were not tried.
    assert lane.tried == broken[:1]
    said = [line for line in lines if "found once" in line]
    assert len(said) == 1 and said[0].startswith(f"index unreachable, found once by {broken[0]}")
    assert "2 other cell(s) that need the index recorded not run with this cause, not tried" in said[0]
    first = meta(ran(out, broken[0]))["cause"]
    assert first["cause"] == "index unreachable" and first["line_no"] == 1
    assert first["log"] == str(tmp_path / f"{broken[0]}.install.log") and first["retryable"] is False
    for cell in broken[1:]:
        assert meta(ran(out, cell))["not_run"].startswith("not tried: index unreachable, found by")
        assert meta(ran(out, cell))["cause"] == first  # the finder's line and log

    # Every format: one line per cell that did not run, with its cause and log; no case rows for it.
    cli.main(["report", str(out), "--format", "json", "--fail-on", "never"])  # (the fake control is unhealthy: 3)
    report = json.loads(capsys.readouterr().out)
    cells = {c["cell"]: c for c in report["cells"]}
    assert {c: (cells[c]["cause"]["cause"], cells[c]["owed"]) for c in broken} == {
        c: ("index unreachable", 2) for c in broken}
    assert not [case for case in report["cases"] if case["cell"] in broken]
    assert any(a.startswith("INFRASTRUCTURE: 3 cell(s) did not run (index unreachable ×3)")
               for a in report["control"]["alerts"])
    cli.main(["report", str(out), "--format", "junit", "--fail-on", "never"])
    suites = {s.get("name"): s for s in ElementTree.fromstring(capsys.readouterr().out)}
    for cell in broken:  # a testsuite of one testcase: the cell's verdict, failing with its cause
        (testcase,) = suites[f"{cell}@cpu"]
        failure = testcase.find("failure")
        assert testcase.get("name") == "(verdict)" and failure is not None
        assert "index unreachable: WARNING: Retrying" in (failure.get("message") or "") and first["log"] in (failure.text or "")
    for fmt in ("text", "markdown", "html"):
        cli.main(["report", str(out), "--format", fmt, "--fail-on", "never"])
        shown = capsys.readouterr().out
        # html: the cell's panel line (its grid entry's tooltip and its line among the cells to look at aside)
        lines_of = [line for line in shown.splitlines() if "index unreachable: WARNING: Retrying" in line
                    and not line.startswith(("<tr", '<li class="red"'))]
        assert len(lines_of) == len(broken), fmt
        assert "Temporary failure in name resolution" in shown and first["log"] in shown
        assert "this cell has no result for it" not in shown  # no `missing` row per case


def test_cuda_stacks_on_a_runner_without_a_gpu_are_refused_unless_cpu_is_meant(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    matrix, go, _, out = setup
    monkeypatch.delenv(options.ALLOW_CPU)
    lane = FakeLane()
    with pytest.raises(BadInput) as refused:
        go(lane)
    assert str(refused.value) == (
        f"{matrix.path}: 2 cell(s) with CUDA stacks ({matrix.cells[0].id} and 1 more) and this runner has no GPU: "
        "on the CPU they test nothing of cuDNN; pass --allow-cpu to run them on the CPU anyway")
    assert refused.value.exit_code == 2 and not lane.runs and not out.exists()  # nothing written
    go(lane, "--allow-cpu")  # the way out the line names
    assert len(lane.runs) == 2
    # The matrix may say so itself (the default matrix, meant for a first run on any machine) ...
    meant_file = matrix.path.with_name("meant.toml")
    meant_file.write_text("allow_cpu = true\n" + MATRIX)
    meant = load(meant_file)
    orchestrate.run(meant, meant.cells, options.parse(["--out", str(out)]), lambda line: None, strict=True)
    # ... and a runner with a GPU runs them there, asking nothing.
    monkeypatch.setattr(gpus, "discover", lambda: gpus.parse_smi(*TWO_H100))
    go(FakeLane())
    # `convmatrix run` ends with the one line, exit 2.
    monkeypatch.setattr(gpus, "discover", list)
    assert cli.main(["run", "-m", str(matrix.path), "--", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith("pass --allow-cpu to run them on the CPU anyway")


def test_the_default_matrix_means_the_cpu_and_the_nightly_one_does_not() -> None:
    root = Path(__file__).parents[3]
    assert load(root / "matrix" / "default.toml").allow_cpu
    assert not load(root / "matrix" / "nightly.toml").allow_cpu
