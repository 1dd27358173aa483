from __future__ import annotations

import json
import pickle
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import strategies as gen
from convmatrix import forkmap, results, tree
from convmatrix.cli.main import main
from convmatrix.results import read, rundir
from convmatrix.results.outcomes import Outcome
from testkit import env_json, record, write_result

NOT_SUPPORTED = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def test_loads_run_dir_and_classifies(tmp_path: Path) -> None:
    write_result(tmp_path, "a", [record("c1"), record("c2", "failed", NOT_SUPPORTED)], cell={"lane": "baremetal"})
    loaded = results.load([tmp_path])
    assert loaded.errors == []
    (result,) = loaded.results
    assert result.cell == "a" and result.gpu_key == "cpu" and result.problems == ()
    assert result.cases["c2"].outcome == "fail"
    assert result.cases["c2"].family == "cudnn_not_supported"
    assert result.cases["c1"].family is None


def test_warning_only_signature_is_a_pass_with_a_warning(tmp_path: Path) -> None:
    warning = {"category": "UserWarning", "message": "Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED"}
    write_result(tmp_path, "a", [record("c1", warnings=[warning])])
    case = results.load([tmp_path]).results[0].cases["c1"]
    assert case.outcome == "pass" and case.family is None
    assert case.warnings == ("cudnn_not_supported",)


def test_corrupt_line_is_named_and_the_rest_kept(tmp_path: Path) -> None:
    directory = write_result(tmp_path, "a", [record("c1"), record("c2")])
    with (directory / "results.jsonl").open("a") as fh:
        fh.write('{"schema": 1, "case": "c3", "sta')
    loaded = results.load([tmp_path])
    assert set(loaded.results[0].cases) == {"c1", "c2"}
    assert loaded.errors == [f"{directory / 'results.jsonl'}:3: not a JSON object (truncated or corrupt line)"]


def test_other_schema_is_rejected_by_file(tmp_path: Path) -> None:
    directory = write_result(tmp_path, "a", [record("c1")], env=env_json("a", schema=7))
    loaded = results.load([tmp_path])
    assert loaded.results == []
    assert loaded.errors == [f"{directory / 'env.json'}: schema 7, this convmatrix reads schema 1"]


def test_gpu_from_env_and_problems(tmp_path: Path) -> None:
    env = env_json("a", device="cuda", gpus=[{"index": 0, "name": "NVIDIA H200", "capability": "9.0"}], ended=None)
    write_result(tmp_path, "a", [record("c1")], env=env, gpu="h200-sm90", cell={"exit_code": -11})
    (result,) = results.load([tmp_path]).results
    assert result.gpu_key == "h200-sm90"
    assert result.gpu["generation"] == "Hopper"
    assert "the suite did not finish (env.json has no end time)" in result.problems
    assert "the suite exited with status -11" in result.problems


def test_empty_path_is_an_error(tmp_path: Path) -> None:
    loaded = results.load([tmp_path / "missing"])
    assert loaded.results == [] and "no results here" in loaded.errors[0]


def test_cell_json_mismatch_is_recomputed(tmp_path: Path) -> None:
    write_result(tmp_path, "a", [record("c1")], env=env_json("a", cudnn=90100),
                 cell={"expected": {"torch": "2.5.1", "cuda": "12.4", "cudnn": 90501}})
    (result,) = results.load([tmp_path]).results
    assert result.stack_mismatch == ("cudnn: requested 90501, observed 90100",)
    assert json.loads((tmp_path / "a@cpu" / "cell.json").read_text())["cell"] == "a"


def test_a_line_holding_two_objects_is_named_not_split(tmp_path: Path) -> None:
    """Two values on a line must not pass for two cases, nor shift the line numbers of the errors
    after it."""
    directory = write_result(tmp_path, "a", [record("c1")])
    with (directory / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(record("c2")) + ", " + json.dumps(record("c3")) + "\n")
        fh.write(json.dumps(record("c4")) + "\n")
        fh.write("[1]\n")
    loaded = results.load([tmp_path])
    assert set(loaded.results[0].cases) == {"c1", "c4"}
    assert loaded.errors == [f"{directory / 'results.jsonl'}:2: not a JSON object (truncated or corrupt line)",
                             f"{directory / 'results.jsonl'}:4: not a JSON object"]


def test_a_wrong_type_is_caught_after_sound_lines_of_the_same_fields(tmp_path: Path) -> None:
    bad = record("c2")
    bad["duration_s"] = "slow"
    directory = write_result(tmp_path, "a", [record("c1"), bad, record("c3")])
    loaded = results.load([tmp_path])
    assert set(loaded.results[0].cases) == {"c1", "c3"}
    assert loaded.errors == [f"{directory / 'results.jsonl'}:2: field 'duration_s': expected integer or number "
                             "or null, got string 'slow'"]


def test_line_numbers_count_blank_lines_whichever_way_the_file_is_read(tmp_path: Path) -> None:
    """Blank lines first or between (once read whole, then line by line): errors name the file's lines."""
    bad = record("c3")
    bad["status"] = "exploded"
    directory = write_result(tmp_path, "a", [])
    path = directory / "results.jsonl"
    for text, line in ((f"\n\n{json.dumps(record('c1'))}\n{json.dumps(bad)}\n", 4),  # blank lines first
                       (f"{json.dumps(record('c1'))}\n\n  \n{json.dumps(bad)}\r\n\n", 4)):  # blank lines between
        path.write_text(text)
        loaded = results.load([tmp_path])
        assert set(loaded.results[0].cases) == {"c1"}
        assert [e.split(": field")[0] for e in loaded.errors] == [f"{path}:{line}"]


def test_a_line_separator_inside_a_message_does_not_split_its_line(tmp_path: Path) -> None:
    """JSON lets U+2028 and other separators stand raw inside a string; a line ends at \\n only."""
    message = "cuDNN error:\u2028CUDNN_STATUS_NOT_SUPPORTED\x1c\x85 (raw separators from another writer)"
    directory = write_result(tmp_path, "a", [])
    (directory / "results.jsonl").write_text(
        json.dumps(record("c1", "failed", message), ensure_ascii=False) + "\n" + json.dumps(record("c2")) + "\n")
    loaded = results.load([tmp_path])
    assert loaded.errors == []
    assert loaded.results[0].cases["c1"].message == message and set(loaded.results[0].cases) == {"c1", "c2"}


def test_an_explain_folder_that_is_a_link_is_said_not_passed_over(tmp_path: Path) -> None:
    """Issue 32, item 1: a kept result whose explain/ is a link (a suite's, or a copy's) is named
    by one line; nothing behind the link is read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.json").write_text(json.dumps({"schema": 1, "case": "a", "cudnn": {"status": "SECRET"}}))
    cell = write_result(tmp_path / "run", "c", [record("a", "failed", "boom")], cell={"gpu_key": "cpu"})
    (cell / "explain").symlink_to(outside, target_is_directory=True)
    loaded = results.load([tmp_path / "run"])
    assert [e for e in loaded.errors if "explain" in e] == [
        f"{cell / 'explain'}: a symlink; the cell's explanations were not read"]
    assert loaded.results[0].explained == {}


@pytest.mark.parametrize("skips", [
    "conv1d-*", [{"cases": ["a"]}], [{"cases": [], "reason": "r"}], [{"cases": ["a"], "reason": ""}],
    [{"cases": [1], "reason": "r"}], [{"cases": ["a"], "reason": "r", "x": 1}], [["a"]],
    [{"cases": ["a"], "reason": "r"}] * 65, [{"cases": ["a"] * 65, "reason": "r"}],
])
def test_a_hostile_expected_skips_field_is_one_line_naming_it(tmp_path: Path, skips: Any) -> None:
    """cell.json's expected_skips (issue 31) is untrusted: one error naming the file and field,
    the cell not read, never a traceback or a skip declared by garbage."""
    cell = write_result(tmp_path / "run", "cand", [record("a", "skipped")], cell={"expected_skips": skips})
    loaded = results.load([tmp_path / "run"])
    assert not loaded.results
    assert len(loaded.errors) == 1 and loaded.errors[0].startswith(f"{cell / 'cell.json'}: field 'expected_skips'")


def test_an_explain_finding_is_read_by_its_hashed_name_and_must_name_its_case(tmp_path: Path) -> None:
    """Issue 32, item 7: explain/<explain_name(case)>.json is the case's finding; one that names
    another case is one line and not shown; the layout before (explain/<case>.json) is still read."""
    cell = write_result(tmp_path, "a", [record("zz", status="failed"), record("zz.json", status="failed")])
    (cell / "explain").mkdir()
    finding = {"schema": 1, "case": "zz", "status": "failed", "cudnn": {"status": "CUDNN_STATUS_BAD_PARAM"}}
    (cell / "explain" / f"{rundir.explain_name('zz')}.json").write_text(json.dumps(finding))
    (cell / "explain" / f"{rundir.explain_name('zz.json')}.json").write_text(json.dumps(finding))  # names zz
    errors: list[str] = []
    found = read.read_explained(cell, ["zz", "zz.json"], errors)
    assert set(found) == {"zz"} and found["zz"].status == "CUDNN_STATUS_BAD_PARAM"
    assert len(errors) == 1 and "field 'case': expected 'zz.json'" in errors[0]
    (cell / "explain" / f"{rundir.explain_name('zz')}.json").rename(cell / "explain" / "zz.json")
    assert set(read.read_explained(cell, ["zz"], [])) == {"zz"}


# --- issue 45: two lines for one case, and lines only the whole file made sound ---------------------

DRIVER_TOO_OLD = "RuntimeError: The NVIDIA driver on your system is too old (found version 11040)."
DONE = {"ended": "2026-12-02T00:02:00Z"}


def report_json(run: Path, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """`convmatrix report RUN --format json`'s exit code and its cells by name."""
    out = tmp_path / "report.json"
    code = main(["report", str(run), "--format", "json", "-o", str(out)])
    return code, {c["cell"]: c for c in json.loads(out.read_text())["cells"]}


def test_one_case_failing_twice_with_other_families_is_named_not_read_as_the_last(tmp_path: Path) -> None:
    """Issue 45, item 1: CUDNN_STATUS_NOT_SUPPORTED, then "driver too old" for one case, both
    failed: the last line won in silence, and the cell read `unsupported` (exit 0) everywhere."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("x"), record("y")], cell={"control": True, **DONE})
    write_result(run, "cand", [record("x", "failed", NOT_SUPPORTED), record("y"),
                               record("x", "failed", DRIVER_TOO_OLD)], cell=DONE)
    loaded = results.load([run])
    (cand,) = [r for r in loaded.results if r.cell == "cand"]
    assert loaded.errors == []
    assert cand.cases["x"].family == "cudnn_not_supported"  # the first failing line's: never the greener
    assert cand.problems == ("results.jsonl:3: case x recorded again as fail (cuda_driver_insufficient), earlier "
                             "as fail (cudnn_not_supported); kept the earlier line",)
    code, cells = report_json(run, tmp_path)
    assert cells["cand"]["verdict"] == "invalid" and code == 1
    assert cand.problems[0] in cells["cand"]["problems"]


def test_a_case_recorded_again_keeps_its_worst_line(tmp_path: Path) -> None:
    """Disagreeing lines make the cell INVALID and keep the worst one (a failure over a skip over a
    pass), whichever came last; among failures, the first."""
    write_result(tmp_path, "a", [record("f", "failed", NOT_SUPPORTED), record("f"),
                                 record("s"), record("s", "skipped", "not here"), record("s"),
                                 record("t", "timeout", "case timed out"), record("t", "failed", NOT_SUPPORTED)])
    (result,) = results.load([tmp_path]).results
    assert {name: case.outcome for name, case in result.cases.items()} == {"f": "fail", "s": "skip", "t": "timeout"}
    assert result.problems == (
        "results.jsonl:2: case f recorded again as pass, earlier as fail (cudnn_not_supported); kept the earlier line",
        "results.jsonl:4: case s recorded again as skip, earlier as pass; kept this line",
        "results.jsonl:5: case s recorded again as pass, earlier as skip; kept the earlier line",
        "results.jsonl:7: case t recorded again as fail (cudnn_not_supported), earlier as timeout; "
        "kept the earlier line",
    )


def test_lines_that_agree_are_one_case_and_no_conflict(tmp_path: Path) -> None:
    """The same line written twice, or the same outcome and family in other words, is no conflict:
    the later line is kept, with the warnings of both (a pass that warned stays one that warned)."""
    warned = [{"category": "UserWarning", "message": "Plan failed with a cudnnException: "
               "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: "
               "CUDNN_STATUS_NOT_SUPPORTED"}]
    write_result(tmp_path, "a", [record("a"), record("a"),
                                 record("b", "failed", NOT_SUPPORTED), record("b", "failed", NOT_SUPPORTED + " (2)"),
                                 record("c", warnings=warned), record("c", duration_s=0.5)])
    loaded = results.load([tmp_path])
    (result,) = loaded.results
    assert loaded.errors == [] and result.problems == ()
    assert result.cases["b"].message == NOT_SUPPORTED + " (2)"
    assert result.cases["c"].warnings == ("cudnn_not_supported",) and result.cases["c"].duration_s == 0.5


def test_an_object_over_two_lines_and_two_on_one_line_are_named(tmp_path: Path) -> None:
    """Issue 45, item 2: split between two fields (a comma at the line break makes it whole), then a
    second object on the second line: the whole-file read found two values in two lines and took
    them as sound (exit 0). Each line is read alone now, as every line always was."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a"), record("b")], cell={"control": True, **DONE})
    cand = write_result(run, "cand", [record("a")], cell=DONE)
    first = json.dumps(record("b", "failed", NOT_SUPPORTED))
    at = first.index(', "nodeid"')
    text = f"{first[:at]}\n{first[at + 2:]}, {json.dumps(record('c'))}\n{json.dumps(record('a'))}\n"
    assert len(json.loads("[" + text.strip().replace("\n", ",\n") + "]")) == 3  # what made it pass
    (cand / "results.jsonl").write_text(text)
    assert [line is read.BAD_LINE for _n, line in read.numbered(text)] == [True, True, False]
    loaded = results.load([run])
    path = cand / "results.jsonl"
    assert loaded.errors == [f"{path}:1: not a JSON object (truncated or corrupt line)",
                             f"{path}:2: not a JSON object (truncated or corrupt line)"]
    (result,) = [r for r in loaded.results if r.cell == "cand"]
    assert set(result.cases) == {"a"}
    assert "some of its results could not be read (see the errors)" in result.problems
    assert main(["report", str(run)]) == 2


def badness(line: gen.JsonlLine) -> int:
    """A sound line's rank, worst highest: a failing outcome over a skip over a pass."""
    assert line.outcome is not None
    return {Outcome.PASS: 0, Outcome.SKIP: 1}.get(line.outcome, 2)


@pytest.mark.properties
@given(gen.reread_results_files())
def test_a_results_file_never_reads_greener_than_its_worst_line(lines: list[gen.JsonlLine]) -> None:
    """Issue 45: whatever duplicate and malformed lines a results.jsonl holds, each malformed line
    is named (and only those); each case reads as its worst sound line (the first of the worst),
    and a case whose lines disagree (outcome or family) is a conflict, its cell with a problem;
    lines that agree are none."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_result(Path(tmp), "cand", [], cell=DONE)
        path = directory / rundir.RESULTS
        path.write_text(gen.jsonl_text(lines))
        errors: list[str] = []
        conflicts: list[str] = []
        cases = read.read_cases(path, errors, conflicts)
        assert [int(e.removeprefix(f"{path}:").split(":")[0]) for e in errors] == [
            n for n, line in enumerate(lines, 1) if line.bad]
        said: dict[str, list[gen.JsonlLine]] = {}
        for line in lines:
            if line.case is not None:
                said.setdefault(line.case, []).append(line)
        assert set(cases) == set(said)
        for name, its in said.items():
            worst = max(badness(line) for line in its)
            first_worst = next(line for line in its if badness(line) == worst)
            assert (cases[name].outcome, cases[name].family) == (first_worst.outcome, first_worst.family), name
            agree = len({(line.outcome, line.family) for line in its}) == 1
            assert any(f": case {name} recorded again as " in c for c in conflicts) != agree, (name, conflicts)
        loaded_errors: list[str] = []
        result = read.load_dir(directory, loaded_errors)
        assert result is not None and loaded_errors == errors
        assert bool(result.problems) == bool(conflicts or errors)
        assert all(c in result.problems for c in conflicts[:5])


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json", "junit"])
def test_a_partial_rerun_beside_its_result_is_a_note_in_every_format(fmt: str, tmp_path: Path) -> None:
    """Issue 46: a .partial beside an older final result was skipped (as the contract says) without
    a word, so an interrupted rerun that failed with the signature read green."""
    from convmatrix.cli.main import main

    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True})
    write_result(run, "cand", [record("a")], cell={})
    partial = run / "cand@cpu.partial"
    partial.mkdir()
    (partial / "results.jsonl").write_text(json.dumps(record("a", "failed", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"))
                                           + "\n")
    out = tmp_path / f"report.{fmt}"
    assert main(["report", str(run), "--format", fmt, "-o", str(out)]) == 0
    assert "cand@cpu.partial: an interrupted rerun beside the result cand@cpu" in out.read_text()


@pytest.mark.parametrize("batch", [1, 3, read.BATCH])
def test_numbered_reads_every_line_as_alone_whatever_the_batch(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: lines are parsed a batch per json call (jsonread.loads_each); a batch holding a
    bad line is read a line at a time, so each line still reads as it does alone, numbered."""
    monkeypatch.setattr(read, "BATCH", batch)
    first = json.dumps(record("b", "failed", NOT_SUPPORTED))
    at = first.index(', "nodeid"')
    lines = [json.dumps(record("a")), "", first[:at], first[at + 2:] + ", " + json.dumps(record("c")), "  ",
             json.dumps(record("d")), "[" * 70 + "]" * 70, json.dumps(record("e")), "{"]
    text = "\n".join(lines) + "\n"

    def said(value: object) -> object:
        return "bad" if value is read.BAD_LINE else type(value).__name__ if isinstance(value, Exception) else value

    expected = [(n, said(read._loads(line))) for n, line in enumerate(lines, 1) if line.strip()]
    assert [(n, said(v)) for n, v in read.numbered(text)] == expected
    assert [n for n, v in expected if v == "bad"] == [3, 4, 9] and (7, "TooBig") in expected


def test_evidence_points_only_the_cases_it_names_in_their_order() -> None:
    """with_evidence visits only the cases cell.json names (issue 49: not every case of a fleet);
    the cases keep their order, and each wrong entry is one error, in the cases' order."""
    cases: dict[str, read.Case] = {}
    for name in ("a", "b", "c", "d"):
        case = read.check_line(record(name))
        assert isinstance(case, read.Case)
        cases[name] = case
    directory = Path("/runs/cell@cpu")
    errors: list[str] = []
    saved = {"d": "/etc/passwd", "b": None, "a": "evidence/a.txt", "c": "../c.txt", "z": "evidence/z.txt"}
    found = read.with_evidence(cases, directory, {"evidence": saved}, errors)
    assert list(found) == ["a", "b", "c", "d"]
    assert [c.evidence for c in found.values()] == [str(directory / "evidence/a.txt"), None, None, None]
    assert [e.split("[")[1].split("]")[0] for e in errors] == ["c", "d"]
    assert read.with_evidence(cases, directory, {"evidence": {}}, errors) == cases
    assert read.with_evidence(cases, directory, {}, errors) == cases


def test_a_cells_own_files_are_read_through_one_descriptor_of_its_folder(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """cell.json, env.json, results.jsonl and first_cause.json through one open folder: before, each
    opened the folder again (five opens a cell, a sixth of a fleet report's time in bench/run.py)."""
    cell = write_result(tmp_path, "a", [record("c1"), record("c2", "failed", NOT_SUPPORTED)],
                        cell={"lane": "baremetal"})
    (cell / rundir.FIRST_CAUSE).write_text(json.dumps({"schema": 1}))
    opened: list[Path] = []
    real = tree.Tree.open

    def counted(path: Path | str, **kwargs: Any) -> tree.Tree:
        opened.append(Path(path))
        return real(path, **kwargs)

    monkeypatch.setattr(tree.Tree, "open", counted)
    errors: list[str] = []
    result = read.load_dir(cell, errors)
    assert result is not None and set(result.cases) == {"c1", "c2"}, errors
    # Once for its own four files, once more to look below it for blocking/ (absent here); before, five.
    assert opened.count(cell) == 2, opened


def test_a_cell_folder_that_cannot_be_opened_is_read_file_by_file_saying_why(tmp_path: Path) -> None:
    """A link in a cell folder's place: nothing read through it, each file refused by name."""
    real = write_result(tmp_path / "elsewhere", "a", [record("c1")])
    linked = tmp_path / "run" / real.name
    linked.parent.mkdir()
    linked.symlink_to(real)
    errors: list[str] = []
    assert read.load_dir(linked, errors) is None
    assert errors and all("symlink" in e and str(linked) in e for e in errors), errors


def test_a_fleet_read_with_a_child_reads_as_one_read_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """results.load hands a share of a fleet's cells to a forked child (forkmap): the same results,
    errors and notes, in the same order, as one process reads them, bad lines and all."""
    for n in range(forkmap.MIN_ITEMS + 6):
        lines = [json.dumps(record(f"c{k}", "failed" if (n + k) % 7 == 0 else "passed",
                                   NOT_SUPPORTED if (n + k) % 7 == 0 else None)) for k in range(5)]
        if n % 9 == 0:
            lines.insert(2, '{"schema": 1, "case": "torn')  # a corrupt line: an error naming it
        if n % 11 == 0:
            lines.append(json.dumps(record("c0", "failed", "other")))  # a conflict: a problem of its cell
        write_result(tmp_path, f"cell{n:03d}", [], cell={"lane": "baremetal"})
        (tmp_path / f"cell{n:03d}@cpu" / rundir.RESULTS).write_text("\n".join(lines) + "\n")
    read_here: list[Path] = []  # the cells this process read (the child's own list is its own)

    def load_alone(directory: Path) -> tuple[read.CellResult | None, list[str]]:
        read_here.append(directory)
        return LOAD_ALONE(directory)
    monkeypatch.setattr(read, "load_alone", load_alone)
    forked = results.load([tmp_path])
    if forkmap.can_fork(len(forked.results)):  # the child's cells came back from it, not read here again
        assert len(read_here) == round(len(forked.results) * forkmap.HEAD)
    monkeypatch.setattr(forkmap, "cpus", lambda: 1)
    alone = results.load([tmp_path])
    assert forked.errors and any(r.problems for r in forked.results)
    assert (forked.results, forked.errors, forked.notes) == (alone.results, alone.errors, alone.notes)


LOAD_ALONE = read.load_alone


@given(gen.case_sets())
def test_a_case_pickles_as_itself(cases: dict[str, read.Case]) -> None:
    full = read.Case("c", Outcome.FAIL, "other", "m", {"device": "cpu"}, ("w",), 1.5, "ab", "e", {"op": "conv2d"},
                     (1.0, 2.0), ("https://x",), 0.5, "Mkldnn", 7, (0.1,), ("k",), (), ())
    for case in (*cases.values(), full):
        assert pickle.loads(pickle.dumps(case)) == case


def test_a_cell_result_pickles_as_itself_with_its_cases_as_tuples(tmp_path: Path) -> None:
    """forkmap's child sends a fleet's cells back pickled: a CellResult's cases go as their
    fields' tuples (CellResult.__reduce__), and come back equal, in order, each key its case's, as
    the plain read made them; its other fields unchanged."""
    write_result(tmp_path / "run", "cand", [record("b", "failed", NOT_SUPPORTED), record("a"), record("c", "skipped")],
                 cell={})
    result, errors = read.load_alone(tmp_path / "run" / "cand@cpu")
    assert result is not None and not errors
    pickled = pickle.dumps(result)
    assert b"_cell_result" in pickled  # its own reduction, not the dataclass's default
    back = pickle.loads(pickled)
    assert back == result and repr(back) == repr(result)
    assert list(back.cases) == ["b", "a", "c"] and all(name == case.case for name, case in back.cases.items())
