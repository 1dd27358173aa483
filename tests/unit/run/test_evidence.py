"""Evidence files: the first occurrence with the lines before it, the last line per case, a
crash's evidence from the end of the log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from convmatrix.matrix.cells import Cell
from convmatrix.run import evidence, options, orchestrate, runner
from convmatrix.run.lanes import Prepared
from convmatrix.run.lanes.host import Host
from testkit import record

NOT_SUPPORTED = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def test_find_keeps_100_lines_before_the_first_occurrence() -> None:
    log = [f"line {i}\n" for i in range(1, 501)]
    log[299] = f"E   RuntimeError: {NOT_SUPPORTED}\n"
    log[399] = f"E   RuntimeError: {NOT_SUPPORTED}\n"
    hit = evidence.find(log, [NOT_SUPPORTED])
    assert hit is not None
    assert hit.line == 300
    assert hit.first == 200
    assert hit.lines[:100] == [f"line {i}" for i in range(200, 300)]
    assert len(hit.lines) == 100 + 1 + evidence.AFTER


def test_find_near_the_top_keeps_what_there_is() -> None:
    hit = evidence.find(["a\n", f"{NOT_SUPPORTED}\n", "b\n"], [NOT_SUPPORTED])
    assert hit is not None
    assert (hit.line, hit.first, hit.lines) == (2, 1, ["a", NOT_SUPPORTED, "b"])


def test_failures_takes_the_last_line_per_case(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [record("a", "failed", "boom"), record("a", "passed"), record("b", "crashed", "died")]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + "{truncated\n")
    assert [(f.case, f.status) for f in evidence.failures(path)] == [("b", "crashed")]


def test_crash_evidence_is_the_end_of_the_log(tmp_path: Path) -> None:
    (tmp_path / "log.txt").write_text("".join(f"l{i}\n" for i in range(300)) + "test_conv[x] ")
    (tmp_path / "results.jsonl").write_text(json.dumps(record("x", "crashed", "the suite process died")) + "\n")
    saved = evidence.write(tmp_path)
    text = (tmp_path / saved["x"]).read_text()
    assert "x: crashed (crash)" in text.splitlines()[0]
    assert text.rstrip().endswith("test_conv[x]")
    assert len(text.splitlines()) == 1 + evidence.BEFORE + 1


def rerun_blocking(target: runner.Target, args: list[str]) -> list[str]:
    """The blocking re-run of --rerun-blocking on the host lane; what it told the user."""
    said: list[str] = []
    opts = options.parse(["--out", str(target.out), "--", *args])
    orchestrate.rerun_blocking(Host(), Prepared(python=sys.executable), target, opts, said.append)
    return said


def test_no_failures_no_blocking_rerun(tmp_path: Path) -> None:
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)
    target.results_dir.mkdir()
    (target.results_dir / "results.jsonl").write_text(json.dumps(record("a")) + "\n")
    assert rerun_blocking(target, []) == []
    assert not (target.results_dir / "blocking").exists()
