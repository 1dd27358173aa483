from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convmatrix import results
from convmatrix.results import read, rundir
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
    """Lines are decoded as one JSON array when they can be: two values on a line must not pass
    for two cases, nor shift the line numbers of the errors after it."""
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
    """Read whole when every line holds one value, else line by line: errors name the same lines."""
    bad = record("c3")
    bad["status"] = "exploded"
    directory = write_result(tmp_path, "a", [])
    path = directory / "results.jsonl"
    for text, line in ((f"\n\n{json.dumps(record('c1'))}\n{json.dumps(bad)}\n", 4),  # read whole
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
