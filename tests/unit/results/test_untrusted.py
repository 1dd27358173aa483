"""What a cell writes is data, not instructions (issue 21, items 2 and 3): the harness writes and
reads only regular files inside a cell's directory, never following a symlink or blocking on a
FIFO, with bounds; a bad case id is a bad line of that cell, and the run goes on."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from convmatrix import home
from convmatrix.cli.main import main
from convmatrix.results import rundir
from convmatrix.run import evidence, reuse
from testkit import env_json, record, write_result

SIG = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def within(seconds: float, call: Callable[[], object]) -> object:
    """call's result, failing the test (instead of hanging it) when it takes longer."""
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: it blocked"
    return box[0]


def failing_cell(tmp_path: Path, case: str = "a") -> Path:
    cell = write_result(tmp_path / "run", "c", [record(case, "failed", SIG)])
    (cell / "log.txt").write_text(f"suites/test_conv.py::test_conv[{case}] FAILED\nE   {SIG}\n")
    return cell


@pytest.mark.parametrize("case", ["../../../../../../tmp/x/traversed", "a/b", "a\x00b", "x" * 300, "..", " a"])
def test_a_case_id_that_names_a_path_writes_nothing_and_is_a_bad_line(tmp_path: Path, case: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cell = failing_cell(tmp_path, case)
    assert evidence.write(cell) == {}
    assert not (tmp_path / "x").exists() and not Path("/tmp/x/traversed.txt").exists()
    assert sorted(p.name for p in cell.iterdir()) == ["env.json", "log.txt", "results.jsonl"]
    assert main(["report", str(tmp_path / "run")]) == 2
    assert "field 'case': not a case id" in capsys.readouterr().err


def test_an_evidence_symlink_the_suite_made_is_replaced_not_followed(tmp_path: Path) -> None:
    cell = failing_cell(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cell / "evidence").symlink_to(elsewhere)
    assert evidence.write(cell) == {"a": "evidence/a.txt"}
    assert list(elsewhere.iterdir()) == []
    assert (cell / "evidence").is_dir() and not (cell / "evidence").is_symlink()


def test_a_fifo_where_evidence_goes_does_not_block_the_run(tmp_path: Path) -> None:
    cell = failing_cell(tmp_path)
    (cell / "evidence").mkdir()
    os.mkfifo(cell / "evidence" / "a.txt")
    assert within(10, lambda: evidence.write(cell)) == {"a": "evidence/a.txt"}
    assert (cell / "evidence" / "a.txt").is_file()


def test_a_log_that_is_a_fifo_or_a_symlink_is_not_read(tmp_path: Path) -> None:
    cell = failing_cell(tmp_path)
    (cell / "log.txt").unlink()
    os.mkfifo(cell / "log.txt")
    assert within(10, lambda: evidence.write(cell)) == {}
    (cell / "log.txt").unlink()
    secret = tmp_path / "secret.txt"
    secret.write_text(f"E   {SIG}\n")
    (cell / "log.txt").symlink_to(secret)
    assert evidence.write(cell) == {}


def test_the_results_store_keeps_regular_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_RESULTS_STORE", str(tmp_path / "store"))
    cell = write_result(tmp_path / "run", "c", [record("a")], cell={"exit_code": 0, "ended": "x"})
    host_file = tmp_path / "host-secret"
    host_file.write_text("secret")
    (cell / "leak").symlink_to(host_file)
    os.mkfifo(cell / "pipe")
    (cell / "log.txt").write_text("#!/bin/sh\n")
    (cell / "log.txt").chmod(0o4755)
    (cell / "huge.bin").write_bytes(b"x" * 1000)  # not what a reuse needs
    within(10, lambda: reuse.save("k", cell))
    stored = tmp_path / "store" / "k"
    # What a reuse shows, and the store's own mark (home.MARKER: gc removes only what carries it).
    assert sorted(p.name for p in stored.iterdir()) == [home.MARKER, "cell.json", "env.json", "log.txt",
                                                        "results.jsonl"]
    assert not (stored / "log.txt").stat().st_mode & 0o6000  # no setuid bit survives the copy


@pytest.mark.parametrize("entry", ["/etc/passwd", "../../secret.txt", "evidence/../../../secret.txt", 5, None])
def test_the_report_reads_no_evidence_outside_its_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       entry: object) -> None:
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
    write_result(run, "cand", [record("a", "failed", SIG)], cell={"ended": "x", "evidence": {"a": entry}})
    out = tmp_path / "r.html"
    code = main(["report", str(run), "--format", "html", "-o", str(out)])
    assert "TOP SECRET" not in out.read_text() and "root:x:0:0" not in out.read_text()
    if entry is not None:
        assert code == 2 and "field 'evidence' [a]" in capsys.readouterr().err


def test_evidence_that_is_a_fifo_or_a_device_does_not_hang_or_grow_the_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a"), record("b")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record("a", "failed", SIG), record("b", "failed", SIG)],
                        cell={"ended": "x", "evidence": {"a": "evidence/a.txt", "b": "evidence/b.txt"}})
    (cand / "evidence").mkdir()
    os.mkfifo(cand / "evidence" / "a.txt")
    (cand / "evidence" / "b.txt").symlink_to("/dev/zero")
    out = tmp_path / "r.html"
    within(30, lambda: main(["report", str(run), "--format", "html", "-o", str(out)]))
    assert out.stat().st_size < 5_000_000


@pytest.mark.parametrize("name", ["results.jsonl", "env.json", "cell.json"])
def test_a_symlinked_record_is_named_and_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record("a")], cell={"ended": "x"})
    real = tmp_path / f"real-{name}"
    real.write_bytes((cand / name).read_bytes())
    (cand / name).unlink()
    (cand / name).symlink_to(real)
    assert within(30, lambda: main(["report", str(run)])) == 2
    assert f"{cand / name}: a symlink (not followed)" in capsys.readouterr().err


def test_a_record_past_its_bound_is_named_and_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record("a")], env=env_json("cand", argv=["x" * 10_000]), cell={"ended": "x"})
    monkeypatch.setattr(rundir, "MAX_RECORD", 4096)
    assert main(["report", str(run)]) == 2
    assert f"{cand / 'env.json'}: larger than 4,096 bytes; not read" in capsys.readouterr().err


def test_deeply_nested_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record("a")], cell={"ended": "x"})
    (cand / "cell.json").write_text('{"schema": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["report", str(run)]) == 2
    assert f"{cand / 'cell.json'}: nested 100,001 levels deep, more than 64; not read" in capsys.readouterr().err


def test_a_results_line_nesting_200000_lists_makes_its_cell_invalid_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32, item 4: such a line stopped `report` with a RecursionError (exit 1, the regression
    code). Now it is a line past a bound: its cell INVALID, the file and line named, the other
    lines and cells read; not bad input (exit 1, not 2: docs/contracts.md)."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a"), record("b")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record("a"), record("b")], cell={"ended": "x"})
    with (cand / "results.jsonl").open("a") as handle:
        handle.write("[" * 200_000 + "]" * 200_000 + "\n")
    assert main(["report", str(run), "--format", "json"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == ["convmatrix: 1 cell(s) INVALID: cand@cpu (of 2 cells: 1 control, 1 invalid)"]
    (cell,) = [c for c in json.loads(out)["cells"] if c["cell"] == "cand"]
    assert cell["verdict"] == "invalid"
    assert f"{cand / 'results.jsonl'}:3: nested 200,000 levels deep, more than 64; not read" in cell["problems"]


def test_a_results_file_past_the_line_bound_makes_its_cell_invalid_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record(f"c{i}") for i in range(rundir.MAX_LINES + 1)], cell={"ended": "x"})
    assert main(["report", str(run), "--format", "json"]) == 1
    (cell,) = [c for c in json.loads(capsys.readouterr().out)["cells"] if c["cell"] == "cand"]
    assert cell["verdict"] == "invalid" and cell["problems"][0] == (
        f"{cand / 'results.jsonl'}: 20,001 lines, more than 20,000 (the catalogue has a few hundred cases); not read")


def test_a_results_file_past_the_size_bound_makes_its_cell_invalid_not_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, item 6: a bound is the cell's fault, the size bound as the line bound (it was exit 2)."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
    cand = write_result(run, "cand", [record(f"c{i}") for i in range(50)], cell={"ended": "x"})
    monkeypatch.setattr(rundir, "MAX_RESULTS", 4096)
    assert main(["report", str(run), "--format", "json"]) == 1
    (cell,) = [c for c in json.loads(capsys.readouterr().out)["cells"] if c["cell"] == "cand"]
    assert cell["verdict"] == "invalid" and cell["problems"][0] == (
        f"{cand / 'results.jsonl'}: larger than 4,096 bytes; not read")


@pytest.mark.parametrize(("body", "lines"), [(b"", 1), (b"a\n", 1), (b"a\nb", 2), (b"a\n" * 6, 6), (b"a\n" * 7, 7)])
def test_read_lines_counts_as_the_report_says_and_drops_the_bytes_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: bytes, lines: int
) -> None:
    """Past MAX_LINES the file is counted, never held: a 10^6-line file took 293 MB of a report's
    memory read whole; 31 MB counted (bench/report_size.py)."""
    monkeypatch.setattr(rundir, "MAX_LINES", 6)
    (tmp_path / "results.jsonl").write_bytes(body)
    data, counted = rundir.read_lines(tmp_path / "results.jsonl", tmp_path)
    assert counted == lines and data == (body if lines <= 6 else None)


def test_write_plain_stays_inside_its_base(tmp_path: Path) -> None:
    with pytest.raises(rundir.NotPlain):
        rundir.write_plain(tmp_path / "a" / ".." / ".." / "x", b"", tmp_path / "a")
    assert json.dumps(sorted(p.name for p in tmp_path.iterdir())) == "[]"
