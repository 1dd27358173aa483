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


def pytest_log(cases: list[str], message: str, *, traceback: int = 60) -> list[str]:
    """A log.txt as `pytest -v` writes it: a line per case, then each failure's block."""
    lines = ["=" * 20 + " test session starts " + "=" * 20, "collected 4 items", ""]
    lines += [f"suites/test_conv.py::test_conv[{c}] FAILED [ 25%]" for c in cases]
    lines += ["", "=" * 30 + " FAILURES " + "=" * 30]
    for case in cases:
        lines += [f"{'_' * 20} test_conv[{case}] {'_' * 20}", "", f"request = <Function test_conv[{case}]>"]
        lines += [f"    frame {i}" for i in range(traceback)]
        lines += [f"E   RuntimeError: {message}", "", "suites/test_conv.py:88: RuntimeError"]
    lines += ["=" * 20 + " short test summary info " + "=" * 20]
    lines += [f"FAILED suites/test_conv.py::test_conv[{c}] - RuntimeError: {message}" for c in cases]
    return [*lines, "=" * 20 + " 4 failed in 0.85s " + "=" * 20]


def test_n_identical_failures_get_n_distinct_windows_each_its_own(tmp_path: Path) -> None:
    """Issue 20, item 1: four cases failing with one message all pointed at the first case's
    traceback; each now points at its own failure block."""
    cases = ["conv1d-fp32-k3-p1", "conv1d-fp16-k5-s2-dilated2", "conv1d-bf16-k7-p3-depthwise", "conv1d-fp32-k3-bwd"]
    log = pytest_log(cases, NOT_SUPPORTED)
    (tmp_path / "log.txt").write_text("\n".join(log) + "\n")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(record(c, "failed", f"RuntimeError: {NOT_SUPPORTED}"))
                                                    + "\n" for c in cases))
    saved = evidence.write(tmp_path)
    marked = {}
    for case in cases:
        text = (tmp_path / saved[case]).read_text().splitlines()
        (line,) = [t for t in text[1:] if t[7] == ">"]
        number = int(line[:7])
        marked[case] = number
        assert NOT_SUPPORTED in log[number - 1]
        header = log.index(f"{'_' * 20} test_conv[{case}] {'_' * 20}") + 1
        assert header < number  # the message below its own block's header, in the window
        assert any(f"test_conv[{case}]" in t for t in text[1:])
    assert len(set(marked.values())) == 4


def test_a_message_that_is_not_in_its_block_points_at_the_block(tmp_path: Path) -> None:
    cases = ["a", "b"]
    log = pytest_log(cases, "something else printed")
    (tmp_path / "log.txt").write_text("\n".join(log) + "\n")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(record(c, "failed", "boom")) + "\n" for c in cases))
    saved = evidence.write(tmp_path)
    first = (tmp_path / saved["b"]).read_text().splitlines()[0]
    assert f"line {log.index('_' * 20 + ' test_conv[b] ' + '_' * 20) + 1}," in first


def test_a_case_that_died_points_at_the_end_of_its_own_session(tmp_path: Path) -> None:
    """--continue-run: the dead case's process ended; a fresh session ran the rest after it."""
    log = ["===== test session starts =====", "suites/test_conv.py::test_conv[a] PASSED",
           "suites/test_conv.py::test_conv[dies] ", "Fatal Python error: Segmentation fault", "  File x",
           "===== test session starts =====", "suites/test_conv.py::test_conv[c] PASSED", "===== 1 passed ====="]
    (tmp_path / "log.txt").write_text("\n".join(log) + "\n")
    (tmp_path / "results.jsonl").write_text(json.dumps(record("dies", "crashed", "the suite process died")) + "\n")
    saved = evidence.write(tmp_path)
    assert "first occurrence at log.txt line 5," in (tmp_path / saved["dies"]).read_text().splitlines()[0]


def test_an_evidence_window_of_huge_lines_stays_bounded(tmp_path: Path) -> None:
    """Issue 21, item 8: a 400 MB line made a 400 MB evidence file."""
    (tmp_path / "log.txt").write_text("x" * 5_000_000 + "\n" + f"E   {NOT_SUPPORTED}" + "y" * 5_000_000 + "\n")
    (tmp_path / "results.jsonl").write_text(json.dumps(record("c", "failed", NOT_SUPPORTED)) + "\n")
    saved = evidence.write(tmp_path)
    assert (tmp_path / saved["c"]).stat().st_size < 3 * evidence.LINE + 1000


def test_a_line_nesting_200000_lists_is_skipped_not_a_traceback(tmp_path: Path) -> None:
    """Issue 32, item 4: `run` stopped with a RecursionError here (the cell left .partial, later
    cells never ran)."""
    results = tmp_path / "results.jsonl"
    results.write_text("[" * 200_000 + "]" * 200_000 + "\n"
                       + json.dumps({"case": "a", "status": "failed", "message": "x"}) + "\n")
    assert [f.case for f in evidence.failures(results)] == ["a"]
