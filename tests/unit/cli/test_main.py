"""The convmatrix command over results directories written by hand: verdicts of incomplete and
duplicated cells, malformed input as one line and exit 2, the matrix command."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import testkit
from convmatrix.cli.main import main
from convmatrix.cli.output import write_output
from convmatrix.cli.report import bulk
from convmatrix.errors import BadInput
from convmatrix.report.notes import NO_GPU
from testkit import record, write_result


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_matrix_command(write_matrix: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = write_matrix('name = "x"\n[axes]\nlane = ["baremetal"]\ntorch = ["2.4.1"]\ncuda = ["cu124", "cu126"]\n'
                        'cudnn = ["bundled"]\npython = ["3.11"]\n')
    assert main(["matrix", "-m", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in data["cells"]] == ["baremetal-torch2.4.1-cu124-cudnnbundled-py3.11"]
    assert data["cells"][0]["expected_cudnn"] == "9.1.0.70"
    assert "never published for cu126" in data["pruned"][0]["reason"]


def test_misspelt_matrix_key_exits_2_naming_key_and_file(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('name = "x"\n[axes]\nlanes = ["baremetal"]\n')
    proc = subprocess.run([sys.executable, "-m", "convmatrix", "matrix", "-m", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"convmatrix: {path}: [axes]: unknown key 'lanes' (allowed: base, cuda, cudnn, knobs, lane, python, torch)"
    ]


def test_matrix_checks_the_case_files_it_names(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('name = "x"\ncases = ["prod.toml"]\n[axes]\nlane = ["baremetal"]\ntorch = ["2.4.1"]\n'
                        'cuda = ["cu124"]\ncudnn = ["bundled"]\npython = ["3.11"]\n')
    cases = path.parent / "prod.toml"
    cases.write_text('[[case]]\nname = "a"\nop = "conv2d"\ninput = [1, 4, 8, 8]\nout_channels = 4\nkernel = 3\n'
                     "benchmrk = true\n")
    proc = subprocess.run([sys.executable, "-m", "convmatrix", "matrix", "-m", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"convmatrix: {cases}: case 1 (a): benchmrk: unknown key (did you mean benchmark?)"]
    cases.write_text(cases.read_text().replace("benchmrk", "benchmark"))
    proc = subprocess.run([sys.executable, "-m", "convmatrix", "matrix", "-m", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_report_on_nothing_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = report(capsys, str(tmp_path / "none"))
    assert code == 2 and "no results here" in err


def test_slowdown_is_a_summary_and_fingerprint_drift_is_called_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from testkit import record, write_result

    def line(case: str, ms: float, sha: str) -> dict[str, Any]:
        repeats = [ms * 0.99, ms, ms * 1.01]  # tight repeats: a difference beyond their noise
        return record(case, timing={"forward_ms": ms, "forward_runs": repeats, "backward_ms": None},
                      fingerprint={"sha": sha})

    write_result(tmp_path, "ctl", [line("a", 1.0, "x"), line("b", 2.0, "y")], cell={"control": True})
    write_result(tmp_path, "slow", [line("a", 3.0, "x"), line("b", 6.0, "z")], cell={})
    code, out, _ = report(capsys, str(tmp_path), "--format", "json")
    cells = {c["cell"]: c for c in json.loads(out)["cells"]}
    assert (cells["slow"]["slowdown"], cells["slow"]["fingerprint_changed"]) == (3.0, 1)
    assert cells["slow"]["verdict"] == "ok" and code == 0
    _, text, _ = report(capsys, str(tmp_path))
    # Issue 48: no cell-level SLOWER mark nor drift note; the cell's slowdown stays a summary.
    assert "SLOWER" not in text and "T3.0" not in text and "convolutions ran" not in text
    assert "slow@cpu: 1 case(s) computed a different output fingerprint" in text


@pytest.mark.parametrize("how", ["killed", "reused", "another host"])
def test_no_timing_verdict_on_a_cell_that_did_not_end_normally_here(
        how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34 item 3: a cell killed mid-run on a loaded CPU read `INVALID 15/233 T33.5` and
    "SLOWER x33.5". Timings are set against the control's only for a cell that ended normally,
    in this run (not a stored result reused from another) and on the control's host."""
    from testkit import env_json, record, write_result

    def line(case: str, ms: float) -> dict[str, Any]:
        return record(case, timing={"forward_ms": ms, "forward_runs": [ms * 0.99, ms, ms * 1.01], "backward_ms": None})

    cases = [f"c{i}" for i in range(4)]
    ended = {"ended": "2026-12-02T00:01:00Z"}
    write_result(tmp_path, "ctl", [line(c, 1.0) for c in cases], cell={"control": True, **ended}, host="a")
    done = [line(c, 33.5) for c in (cases[:2] if how == "killed" else cases)]
    cell = {**ended, **({"reused": {"key": "k"}} if how == "reused" else {})}
    killed = {"exit_code": -9}  # as the harness records a suite SIGKILLed mid-run
    write_result(tmp_path, "slow", done, cell=killed if how == "killed" else cell,
                 env=env_json("slow", ended=None) if how == "killed" else None, host="b" if how == "another host" else "a")
    _, out, _ = report(capsys, str(tmp_path), "--format", "json")
    (row,) = [c for c in json.loads(out)["cells"] if c["cell"] == "slow"]
    assert row["slowdown"] is None
    assert all(c["slowdown"] is None for c in json.loads(out)["cases"] if c["cell"] == "slow")
    _, text, _ = report(capsys, str(tmp_path))
    assert "SLOWER" not in text and "T33.5" not in text, text


# --- verdicts you can trust (issue 8) ---------------------------------------------------------

def two_cells(tmp_path: Path, candidate_records: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], *,
              env: dict[str, Any] | None = None, cell: dict[str, Any] | None = None) -> Path:
    from testkit import record, write_result

    cases = [record(f"c{i}") for i in range(11)]
    write_result(tmp_path, "ctl", cases, cell={"control": True, "ended": "2026-12-02T00:01:00Z"})
    return write_result(tmp_path, "cand", candidate_records(cases), env=env,
                        cell={"ended": "2026-12-02T00:01:00Z", **(cell or {})})


def test_a_candidate_killed_after_3_of_11_cases_is_invalid_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from testkit import env_json

    two_cells(tmp_path, lambda cases: cases[:3], env=env_json("cand", ended=None), cell={"exit_code": -9})
    code, out, err = report(capsys, str(tmp_path), "--format", "json")
    cand = next(c for c in json.loads(out)["cells"] if c["cell"] == "cand")
    assert cand["verdict"] == "invalid"
    assert "the suite did not finish (env.json has no end time)" in cand["problems"]
    assert code == 1 and "1 cell(s) INVALID: cand@cpu" in err
    _, text, _ = report(capsys, str(tmp_path))
    assert "INVALID: 3 pass" in text


def test_a_candidate_without_env_json_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = two_cells(tmp_path, lambda cases: cases)
    (directory / "env.json").unlink()
    code, out, _ = report(capsys, str(tmp_path), "--format", "json")
    cand = next(c for c in json.loads(out)["cells"] if c["cell"] == "cand")
    assert (cand["verdict"], code) == ("invalid", 1)


def test_cases_the_control_ran_and_the_candidate_did_not_are_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_cells(tmp_path, lambda cases: cases[:8])
    code, out, _ = report(capsys, str(tmp_path), "--format", "json")
    data = json.loads(out)
    missing = [c["case"] for c in data["cases"] if c["cell"] == "cand" and c["outcome"] == "missing"]
    assert missing == ["c10", "c8", "c9"]
    cand = next(c for c in data["cells"] if c["cell"] == "cand")
    assert (cand["verdict"], cand["counts"]["missing"], code) == ("not-run", 3, 1)
    assert report(capsys, str(tmp_path), "--fail-on", "never")[0] == 0


def test_a_complete_candidate_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two_cells(tmp_path, lambda cases: cases)
    code, out, _ = report(capsys, str(tmp_path), "--format", "json")
    assert [c["verdict"] for c in json.loads(out)["cells"]] == ["control", "ok"] and code == 0


def test_the_same_run_twice_is_counted_once_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two_cells(tmp_path, lambda cases: cases)
    code, out, _ = report(capsys, str(tmp_path), str(tmp_path), "--format", "json")
    data = json.loads(out)
    assert len(data["cases"]) == 22 and len(data["cells"]) == 2 and code == 0
    assert any(n.startswith("cand@cpu: two results; kept") for n in data["notes"])
    _, text, _ = report(capsys, str(tmp_path), str(tmp_path))
    assert "cand@cpu: two results; kept" in text


def test_of_two_copies_of_a_cell_the_newest_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from testkit import env_json, record, write_result

    older, newer = tmp_path / "a", tmp_path / "b"
    write_result(older, "x", [record("c", "failed", "boom")], env=env_json("x", ended="2026-12-01T00:00:00Z"))
    write_result(newer, "x", [record("c")], env=env_json("x", ended="2026-12-02T00:00:00+00:00"))
    for order in ([newer, older], [older, newer]):
        _, out, _ = report(capsys, *map(str, order), "--format", "json")
        data = json.loads(out)
        assert [c["outcome"] for c in data["cases"]] == ["pass"]
        assert f"dropped {older / 'x@cpu'}" in data["notes"][0]


@pytest.mark.parametrize(("where", "text", "named"), [
    ("results.jsonl", None, "results.jsonl:2: field 'message': expected string or null, got integer 12345"),
    ("cell.json", {"schema": 1, "cell": "cand", "gpu": "x"}, "cell.json: field 'gpu': expected object or null, got string 'x'"),
    ("env.json", {"schema": 1, "gpus": [{"name": 3, "capability": "9.0"}]}, "env.json: gpus[0].'name': expected string"),
])
def test_a_field_of_the_wrong_type_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, text: dict[str, object] | None, named: str
) -> None:
    from testkit import record

    directory = two_cells(tmp_path, lambda cases: [*cases[:1], {**record("c1"), "message": 12345}, *cases[2:]])
    if text is not None:
        (directory / where).write_text(json.dumps(text))
        (directory / "results.jsonl").write_text("")
    code, out, err = report(capsys, str(tmp_path), "--format", "json")
    assert code == 2
    assert named in err and "Traceback" not in err
    assert "ctl" in {c["cell"] for c in json.loads(out)["cells"]}  # the other cells are still reported


def test_a_results_file_that_is_a_directory_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = two_cells(tmp_path, lambda cases: cases)
    (directory / "results.jsonl").unlink()
    (directory / "results.jsonl").mkdir()
    code, _, err = report(capsys, str(tmp_path))
    assert code == 2 and f"{directory / 'results.jsonl'}: not a regular file" in err


def test_a_report_leaves_the_collector_on_and_its_objects_out_of_its_young_generations() -> None:
    """What was made with the collector off is frozen, so the first collection after does not
    walk a fleet's 200,000 cases again; refcounting still frees them."""
    frozen = gc.get_freeze_count()
    try:
        with bulk():
            assert not gc.isenabled()
            kept = [[n] for n in range(5000)]  # lists: the collector tracks them whatever they hold
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept) and gc.get_count()[0] < len(kept)
    finally:
        gc.unfreeze()


def test_a_report_that_fails_while_written_leaves_the_previous_one(tmp_path: Path) -> None:
    output = tmp_path / "reports" / "report.json"
    output.parent.mkdir()
    output.write_text("last night's report\n")

    def pieces() -> Iterator[str]:
        yield '{"schema": 1,'
        raise OSError(28, "No space left on device")

    with pytest.raises(BadInput, match=r"-o .*report.json: cannot write the report \(No space left on device\)"):
        write_output(pieces(), output)
    assert output.read_text() == "last night's report\n"
    assert sorted(p.name for p in output.parent.iterdir()) == ["report.json"]  # no temporary file left
    write_output(iter(["{", "}\n"]), output)
    assert output.read_text() == "{}\n"


def test_an_unwritable_output_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two_cells(tmp_path, lambda cases: cases)
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = report(capsys, str(tmp_path), "-o", str(blocker / "report.md"))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"convmatrix: -o {blocker / 'report.md'}: cannot write the report (")


def test_the_default_matrix_host_cell_without_torch_is_greyed_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: the README's nightly on a machine whose python3 has no torch drops nothing: the
    host cell is in every format, greyed, with its reason, and fails nothing."""
    no_torch = tmp_path / "python3"
    no_torch.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    no_torch.chmod(0o755)
    monkeypatch.setenv("CONVMATRIX_PYTHON", str(no_torch))
    monkeypatch.setattr("convmatrix.gpus.discover", list)
    out = tmp_path / "run"
    assert main(["run", "-m", str(testkit.REPO / "matrix" / "default.toml"), "--lane", "host", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    assert (cell["cell"], cell["verdict"], cell["optional"]) == ("host", "not-run", True)
    assert "cannot import torch and pytest (ModuleNotFoundError: No module named torch)" in cell["not_run"]
    assert main(["report", str(out), "--color", "always"]) == 0
    text = capsys.readouterr().out
    assert "\x1b[2mnot run" in text and "not run (optional): host lane:" in text


@pytest.mark.parametrize(("suite_args", "says"), [
    (["--cudnn-benchmarkk", "on"], "--cudnn-benchmarkk: no such suite option (did you mean --cudnn-benchmark?)"),
    (["--cudnn-benchmark", "yes"], "--cudnn-benchmark yes: expected one of on, off"),
    (["--case-timeout", "nan"], "--case-timeout nan: expected seconds"),
    (["--pad-channels"], "--pad-channels: needs a value"),
])
def test_a_bad_suite_option_stops_the_run_before_any_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, write_matrix: Callable[[str], Path],
    suite_args: list[str], says: str,
) -> None:
    """Issue 20, item 2: a mistyped suite option made every cell's suite exit 4 and `run` say done."""
    ran: list[str] = []
    monkeypatch.setattr("convmatrix.run.orchestrate.run", lambda *a, **k: ran.append("run"))
    out = tmp_path / "run"
    code = main(["run", "-m", str(testkit.REPO / "matrix" / "default.toml"), "--out", str(out), "--", *suite_args])
    err = capsys.readouterr().err
    assert code == 2 and not ran and not out.exists()
    assert err.count("\n") == 1 and err.startswith("convmatrix: suite options: ") and says in err


def test_a_lone_unhealthy_control_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 20, item 2: with only the control on a GPU key, a sick control was a note and exit 0."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [], env=testkit.env_json("ctrl", ended=None), cell={"control": True, "exit_code": 4})
    assert main(["report", str(run)]) == 3
    out, err = capsys.readouterr()
    # after the alert that no GPU took part (a run on the CPU)
    assert "control unhealthy on cpu" in err and "CONTROL UNHEALTHY on cpu" in out.splitlines()[4]


def test_a_control_that_hits_the_signature_says_so_first_in_every_format(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sig = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
    write_result(run, "ctrl", [record("a"), record("b", "failed", sig)], cell={"control": True, "ended": "x"})
    write_result(run, "cand", [record("a"), record("b", "failed", sig)], cell={"ended": "x"})
    alert = "CONTROL HITS THE SIGNATURE on cpu in 1 case(s): b: it is not known-good for these"
    texts = {}
    for fmt in ("text", "markdown", "html", "json"):
        path = tmp_path / f"r.{fmt}"
        assert main(["report", str(run), "--format", fmt, "-o", str(path)]) == 0
        texts[fmt] = path.read_text()
    # after the alert that no GPU took part (a run on the CPU, report/notes.NO_GPU)
    assert texts["text"].splitlines()[1:5] == ["verdicts: 1 control, 1 ok", "", f"! {NO_GPU}", f"! {alert}"]
    assert texts["markdown"].index(alert) < texts["markdown"].index("| stack |")
    assert texts["html"].index(alert) < texts["html"].index('<section id="grid">')
    assert json.loads(texts["json"])["control"]["alerts"] == [NO_GPU, alert]


@pytest.mark.parametrize("value", ["Podman", "", "podman ", "podman\n", "$(reboot)", "podman;id", "../docker"])
@pytest.mark.parametrize("command", ["build", "gc", "base_image"])
def test_every_engine_option_refuses_a_hostile_name_with_exit_2(command: str, value: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--engine of build, gc and the base_image helper: one list (matrix/cells.py ENGINES), nothing
    else reaches an engine client or a CLI's argv."""
    from convmatrix.run.lanes import base_image

    entry = base_image.main if command == "base_image" else lambda argv: main([command, *argv])
    with pytest.raises(SystemExit) as exited:
        entry(["--engine", value])
    assert exited.value.code == 2
    assert "argument --engine: invalid choice" in capsys.readouterr().err
