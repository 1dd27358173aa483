"""`convmatrix run --audit-only` (issue 47): each cell's library audit case alone, a CPU gate for
images, kept apart from --resume, the reuse store and the history; its report judges only the audit
case (docs/contracts.md: Audit-only runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from convmatrix import gpus
from convmatrix.cli import main as cli
from convmatrix.errors import BadInput
from convmatrix.matrix import Matrix, load
from convmatrix.report import notes
from convmatrix.results import libraries, plans, rundir
from convmatrix.run import lanes, options, orchestrate, reuse
from convmatrix.run.lanes import Log, Prepared, SuiteRun
from testkit import OVERRIDE_MATRIX, ran, results_in


class AuditLane:
    """Writes what the suite would: the audit case alone when --audit-only selects it, else the
    audit case and two conv cases; `failing`: cases that fail."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.runs: list[SuiteRun] = []
        self.failing = failing

    def problem(self, cell: Any) -> str | None:
        return None

    def prepare(self, cell: Any, matrix: Matrix, log: Log) -> Prepared:
        return Prepared(python="py", record={"venv": f"/v/{cell.id}"}, lock=f"lock-{cell.id}")

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        self.runs.append(run)
        run.out.mkdir(parents=True, exist_ok=True)
        expected = cell_json(run.out).get("expected", {})  # the stack it asked for, observed
        rundir.write_json(run.out / rundir.ENV_JSON, {"schema": 1, "cell_id": run.target.cell.id, "gpus": [],
                                                      "knobs": {}, "argv": [], "isolation": {}, **expected,
                                                      "suite_version": "s1", "ended": rundir.records.now()})
        cases = [libraries.CASE] if run.select == orchestrate.AUDIT_ONLY else [libraries.CASE, "conv-a", "conv-b"]
        for case in cases:
            failing = case in self.failing
            rundir.append_result(run.out, {"schema": 1, "case": case, "status": "failed" if failing else "passed",
                                           "message": "CUDA library swap: x" if failing else None,
                                           "nodeid": f"suites/test_x.py::test_x[{case}]"})
        return 1 if self.failing else 0


Go = Callable[..., orchestrate.Outcome]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          write_matrix: Callable[[str], Path]) -> tuple[Matrix, Go, Path]:
    monkeypatch.setattr(gpus, "discover", list)
    monkeypatch.delenv(options.ALLOW_CPU, raising=False)  # --audit-only alone must be enough
    matrix = load(write_matrix(OVERRIDE_MATRIX))

    def go(lane: AuditLane, *args: str, out: Path = tmp_path / "run") -> orchestrate.Outcome:
        monkeypatch.setattr(lanes, "lane", lambda name: lane)
        return orchestrate.run(matrix, matrix.cells, options.parse(["--out", str(out), *args]), lambda line: None,
                               strict=True)

    return matrix, go, tmp_path / "run"


def cell_json(directory: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((directory / rundir.CELL_JSON).read_text())
    return found


def report_json(out: Path, capsys: pytest.CaptureFixture[str], *more: str) -> dict[str, Any]:
    cli.main(["report", str(out), *more, "--format", "json", "--fail-on", "never"])
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def test_it_runs_only_the_audit_case_of_every_cell_on_a_cpu_without_allow_cpu(
        setup: tuple[Matrix, Go, Path]) -> None:
    matrix, go, out = setup
    assert any(c.cuda_stack for c in matrix.cells)  # refused on this GPU-less runner without --allow-cpu
    lane = AuditLane()
    go(lane, "--audit-only")
    assert len(lane.runs) == len(matrix.cells)
    assert all(r.select == ("suites/test_audit.py",) for r in lane.runs)
    for path in results_in(out):
        assert cell_json(path)["audit_only"] is True and rundir.audit_only(path)
    (plan,) = (out / plans.PLANS).glob("*.json")
    assert json.loads(plan.read_text())["audit_only"] is True


def test_it_is_kept_apart_from_resume_and_the_reuse_store(setup: tuple[Matrix, Go, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    matrix, go, out = setup
    for given in ("--resume", "--reuse-results"):
        with pytest.raises(BadInput, match=f"--audit-only with {given}: an audit-only run is kept apart"):
            options.parse(["--audit-only", given])

    def never(*args: object, **kwargs: object) -> bool:
        raise AssertionError("the reuse store was used")

    monkeypatch.setattr(reuse, "save", never)
    monkeypatch.setattr(reuse, "restore", never)
    go(AuditLane(), "--audit-only")
    assert all(rundir.is_complete(p) for p in results_in(out))
    # A full run with --resume into the same directory keeps none of them: one case is no cell.
    monkeypatch.undo()
    monkeypatch.setattr(gpus, "discover", list)
    lane = AuditLane()
    outcome = go(lane, "--resume", "--allow-cpu")
    assert outcome.kept == [] and len(lane.runs) == len(matrix.cells)
    assert all(r.select == () for r in lane.runs)
    assert not any(rundir.audit_only(p) for p in results_in(out))


def test_its_report_judges_the_audit_case_alone_never_a_missing_or_passed_conv_case(
        setup: tuple[Matrix, Go, Path], capsys: pytest.CaptureFixture[str]) -> None:
    matrix, go, out = setup
    assert matrix.control is not None
    candidate = next(c.id for c in matrix.cells if c != matrix.control)
    go(AuditLane(failing=(libraries.CASE,)), "--audit-only")
    # The control's audit fails too (same lane): make it a clean one.
    control_dir = ran(out, matrix.control.id)
    (control_dir / rundir.RESULTS).write_text(json.dumps({"schema": 1, "case": libraries.CASE, "status": "passed",
                                                          "message": None, "nodeid": "n"}) + "\n")
    shown = report_json(out, capsys)
    assert shown["audit_only"] is True and shown["control"]["alerts"][0] == notes.AUDIT_ONLY
    cases = [c for c in shown["cases"] if c["cell"] == candidate]
    assert [c["case"] for c in cases] == [libraries.CASE] and cases[0]["verdict"] == "regression"
    # A full control beside an audit-only candidate: only the audit case is compared.
    full = out.parent / "full"
    go(AuditLane(), "--allow-cpu", out=full)
    rundir.write_json(ran(full, candidate) / rundir.CELL_JSON, {**cell_json(ran(out, candidate))})
    (ran(full, candidate) / rundir.RESULTS).write_text((ran(out, candidate) / rundir.RESULTS).read_text())
    shown = report_json(full, capsys)
    cases = [c for c in shown["cases"] if c["cell"] == candidate]
    assert [c["case"] for c in cases] == [libraries.CASE]
    assert "not-run" not in {c["verdict"] for c in shown["cases"]} and shown["audit_only"] is True
    # A full run's report says nothing of it.
    clean = out.parent / "clean"
    go(AuditLane(), "--allow-cpu", out=clean)
    shown = report_json(clean, capsys)
    assert shown["audit_only"] is False and notes.AUDIT_ONLY not in shown["control"]["alerts"]
    assert {c["case"] for c in shown["cases"] if c["cell"] == candidate} == {libraries.CASE, "conv-a", "conv-b"}


def test_the_history_and_the_atlas_refuse_it(setup: tuple[Matrix, Go, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _, go, out = setup
    go(AuditLane(), "--audit-only")
    history = f"sqlite:///{tmp_path / 'h.sqlite'}"
    for command in (["record", str(out), "--history", history],
                    ["report", str(out), "--history", history, "--format", "json"],
                    ["export", str(out), "-o", str(tmp_path / "b.json"), "--fleet", "f"]):
        assert cli.main(command) == 2, command
        assert "an audit-only run (convmatrix run --audit-only) is kept out of the history" in capsys.readouterr().err
    assert not (tmp_path / "h.sqlite").exists() and not (tmp_path / "b.json").exists()
