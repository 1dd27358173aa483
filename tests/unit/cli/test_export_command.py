"""`convmatrix export RUN... -o BUNDLE [--fleet LABEL] [--show]` (issue 40): the bundle written
whole and readable, --show printing what is kept and dropped (writing nothing without -o), bad
arguments one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmatrix.atlas import bundle
from convmatrix.cli.main import main
from exportkit import H100, V100, bundle_text, leaks, write_run


def test_two_runs_export_to_one_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, two = write_run(tmp_path / "a", tmp_path, H100), write_run(tmp_path / "b", tmp_path, V100)
    out = tmp_path / "out" / "fleet.bundle.json"
    assert main(["export", str(one), str(two), "-o", str(out), "--fleet", "lab-3"]) == 0
    made = bundle.read(out)
    assert (made.fleet, len(made.runs)) == ("lab-3", 2)
    assert capsys.readouterr().out == f"wrote {out}: 2 run(s), 4 cell(s), 8 case(s)\n"
    assert leaks(bundle_text(out), one, two, tmp_path) == []


def test_show_without_output_prints_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run", tmp_path, H100)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["export", str(run), "--show"]) == 0
    shown = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert "kept:" in shown and "dropped:" in shown
    assert "NVIDIA H100 80GB HBM3 sm90, torch 2.11.0+cu130, CUDA 13.0, cuDNN 9.19.0, driver 580.159.04" in shown
    assert "  - host names (cell.json host, env.json hostname) and user names" in shown
    assert leaks(shown, run, tmp_path) == []


def test_show_with_output_prints_then_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    assert main(["export", str(write_run(tmp_path / "run", tmp_path, H100)), "--show", "-o", str(out),
                 "--fleet", "lab"]) == 0
    shown = capsys.readouterr().out
    assert shown.index("dropped:") < shown.index(f"wrote {out}") and bundle.read(out).runs


@pytest.mark.parametrize(("extra", "said"), [
    ([], "export: -o BUNDLE says where to write it"),
    (["-o", "b.json"], "export: -o needs --fleet LABEL"),
    (["--show", "--fleet", "<script>"], "--fleet '<script>': letters, digits"),
    (["--show", "--fleet", "a" * 65], "--fleet"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                           said: str) -> None:
    assert main(["export", str(write_run(tmp_path / "run", tmp_path, H100)), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"convmatrix: {said}") and err.count("\n") == 1


def test_no_results_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty"), "-o", str(tmp_path / "b.json"), "--fleet", "lab"]) == 2
    assert "no results here" in capsys.readouterr().err and not (tmp_path / "b.json").exists()


def test_an_unreadable_line_is_reported_and_the_rest_exported(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """As `report`: what could be read is judged and written, what could not is a line each (exit 2)."""
    run = write_run(tmp_path / "run", tmp_path, H100)
    cell = next(p for p in run.iterdir() if p.name.startswith("host+pad8@"))
    with (cell / "results.jsonl").open("a") as handle:
        handle.write("{not json\n")
    out = tmp_path / "b.json"
    assert main(["export", str(run), "-o", str(out), "--fleet", "lab"]) == 2
    assert "results.jsonl" in capsys.readouterr().err
    assert json.loads(out.read_text())["format"] == "convmatrix-bundle"


def test_an_output_named_with_a_line_break_is_one_line_each_way(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run", tmp_path, H100)
    assert main(["export", str(run), "-o", str(tmp_path / "b\nc.json"), "--fleet", "lab"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'b c.json'}: 1 run(s)")
    (tmp_path / "d\ne").write_text("a file where a folder should be")
    assert main(["export", str(run), "-o", str(tmp_path / "d\ne" / "x.json"), "--fleet", "lab"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "cannot write" in err[0], err
