"""Issue 32, item 8: the readers of a cell's output and the trees it leaves, property-tested over
generated hostile input (tests/strategies.py: hostile cell output). Whatever a cell leaves, each
reader gives one line per problem (the project's error, with its exit code) or an INVALID cell,
never a traceback; and reading, copying (the results store) and removing a cell's tree changes
nothing outside it, whatever links, FIFOs, names and depth it holds."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies as gen
from convmatrix import forkmap, jsonread, results, tree
from convmatrix.cli.main import main
from convmatrix.results import read, rundir
from convmatrix.run import evidence, runner
from testkit import env_json, record, write_result

pytestmark = pytest.mark.properties

READ_CODES = (0, 1, 2, 3)  # green, red or INVALID, bad input, unhealthy control: never 4, never a traceback


def report(run: Path) -> tuple[int, dict[str, object] | None, list[str]]:
    """`convmatrix report RUN --format json` in this process: its exit code, its JSON (None when it
    wrote none) and its stderr lines. An exception other than the project's own fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", str(run), "--format", "json", "--control", "ctrl"])
    lines = err.getvalue().splitlines()
    assert code in READ_CODES, (code, lines)
    assert all(line.startswith("convmatrix: ") for line in lines), lines
    return code, (json.loads(out.getvalue()) if out.getvalue() else None), lines


def cell_verdict(shown: dict[str, object] | None, cell: str) -> str | None:
    cells = shown.get("cells", []) if shown else []
    assert isinstance(cells, list)
    return next((c["verdict"] for c in cells if c["cell"] == cell), None)


def sound_run(run: Path) -> Path:
    """A control and a cell 'cand', both sound: the cell's directory, for a test to spoil."""
    write_result(run, "ctrl", [record("a"), record("b")], cell={"control": True, "ended": "x"})
    return write_result(run, "cand", [record("a"), record("b", "failed")], cell={"ended": "x"})


@given(gen.hostile_json_texts())
def test_the_bounded_json_reader_returns_or_says_why_not(text: str) -> None:
    said = ""
    try:
        jsonread.loads(text)
    except ValueError as exc:  # TooBig, or the text is no JSON: either is one line
        said = str(exc) or "?"
    assert "\n" not in said.strip()


@given(gen.hostile_results_lines())
def test_a_results_file_of_any_lines_is_read_invalid_or_one_line(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cand = sound_run(run)
        (cand / rundir.RESULTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
        code, shown, _ = report(run)
        if code != 2:
            assert shown is not None and cell_verdict(shown, "cand") is not None
        if any(jsonread.depth(line) > jsonread.MAX_DEPTH for line in lines):
            # Past the depth bound: the cell's fault, INVALID, whatever else the file holds.
            assert code == 2 or cell_verdict(shown, "cand") == "invalid"
        # The run's own readers of the same file (the failing cases to re-run, their evidence).
        assert isinstance(runner.failing_nodeids(cand), tuple)
        assert isinstance(evidence.failures(cand / rundir.RESULTS), list)


@given(st.sampled_from((rundir.CELL_JSON, rundir.ENV_JSON, rundir.FIRST_CAUSE)), gen.hostile_json_texts())
def test_a_record_of_any_text_is_read_or_one_line(name: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cand = sound_run(run)
        (cand / name).write_text(text, encoding="utf-8")
        code, shown, _ = report(run)
        assert code == 2 or cell_verdict(shown, "cand") is not None
        errors: list[str] = []
        loaded = rundir.load_object(cand / name, errors)
        assert loaded is None or isinstance(loaded, dict)
        assert all("\n" not in e for e in errors)


@given(gen.hostile_json_texts(), st.sampled_from(("b", "zz", "zz.json")))
def test_an_explain_finding_of_any_text_is_shown_under_its_case_or_one_line(text: str, case: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cand = sound_run(run)
        (cand / rundir.EXPLAIN).mkdir()
        (cand / rundir.EXPLAIN / f"{rundir.explain_name(case)}.json").write_text(text, encoding="utf-8")
        errors: list[str] = []
        found = read.read_explained(cand, ["b"], errors)
        assert set(found) <= {"b"} and all("\n" not in e for e in errors)
        if found:
            assert case == "b" and json.loads(text).get("case") == "b"
        report(run)


@given(gen.hostile_trees())
def test_a_hostile_tree_is_read_copied_and_removed_without_touching_anything_outside(
    entries: list[gen.TreeEntry],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outside = gen.make_outside(Path(tmp) / "outside")
        before = gen.snapshot(outside)
        run = Path(tmp) / "run"
        cand = run / "cand@cpu"
        cand.mkdir(parents=True)
        gen.plant(cand, entries, outside)
        # The sound files where the cell left nothing of its own under their names.
        for name, data in ((rundir.ENV_JSON, json.dumps(env_json("cand"))),
                           (rundir.RESULTS, json.dumps(record("a", "failed")) + "\n"),
                           (rundir.CELL_JSON, json.dumps({"ended": "x"}))):
            with contextlib.suppress(OSError):
                if not (cand / name).exists() and not (cand / name).is_symlink():
                    (cand / name).write_text(data)
        write_result(run, "ctrl", [record("a")], cell={"control": True, "ended": "x"})
        report(run)
        runner.failing_nodeids(cand)
        read.read_explained(cand, ["a", "zz", "zz.json"], [])
        # The results store's copy: only folders and regular files, or one line past a bound.
        store = Path(tmp) / "store"
        store.mkdir()
        said = ""
        try:
            rundir.copy_plain(cand, store / "copy")
        except rundir.NotPlain as exc:
            said = str(exc)
        assert "\n" not in said
        assert {kind for kind, _ in gen.snapshot(store).values()} <= {"dir", "file"}
        # Removing an old result: all of it, at any depth, and nothing a link points at.
        with tree.Tree.open(run) as root:
            root.rmtree(cand.name)
        assert not cand.exists() and not cand.is_symlink()
        assert gen.snapshot(outside) == before


KILLED = {"case": "k", "status": "crashed", "message": "the suite process died (signal 9, SIGKILL) while this case ran"}


@given(gen.hostile_results_lines())
def test_the_retry_decision_reads_any_results_file_and_still_finds_the_harnesss_line(lines: list[str]) -> None:
    """The --retries readers (runner.attempt_cause, runner.statuses) parsed results.jsonl with a
    plain json.loads: a line nested 5,000 deep was a RecursionError in the run. Whatever else the
    file holds, they return, and the harness's own SIGKILL line is still the cause found."""
    with tempfile.TemporaryDirectory() as folder:
        cell = Path(folder)
        (cell / rundir.RESULTS).write_text("".join(line + "\n" for line in [*lines, json.dumps(KILLED)]))
        rundir.write_json(cell / rundir.CELL_JSON, {"exit_code": -9})
        found = runner.attempt_cause(cell)
        assert found is not None and found.cause == "killed" and found.retryable
        counts = runner.statuses(cell)
        assert counts.get("crashed", 0) >= 1 and all(isinstance(n, int) and n > 0 for n in counts.values())


@given(st.lists(gen.hostile_results_lines(), min_size=2, max_size=4))
def test_a_child_reads_any_cells_as_this_process_reads_them(files: list[list[str]]) -> None:
    """results.load with a forked child reading a share (forkmap, forced here for a few cells) gives
    what one process reading alone gives, whatever the lines hold: every value pickled back as it
    was read (repr: a NaN the line holds is not equal to itself), the same errors and notes, in
    the same order."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        for n, lines in enumerate(files):
            cell = write_result(run, f"cell{n}", [], cell={"lane": "baremetal"})
            (cell / rundir.RESULTS).write_text("".join(line + "\n" for line in lines))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(forkmap, "mapped", functools.partial(MAPPED, minimum=2))
            forked = results.load([run])
            patch.setattr(forkmap, "cpus", lambda: 1)
            alone = results.load([run])
    assert repr((forked.results, forked.errors, forked.notes)) == repr((alone.results, alone.errors, alone.notes))


MAPPED = forkmap.mapped


BLANKS = st.sampled_from(("", " ", "\t", "\r", "\u3000", "\x1c"))  # what str.isspace calls blank, json not always


@given(gen.hostile_results_lines(), st.lists(st.tuples(st.integers(0, 8), BLANKS), max_size=3),
       st.sampled_from((1, 3, read.BATCH)), st.booleans())
def test_numbered_reads_any_lines_as_each_alone(lines: list[str], blanks: list[tuple[int, str]], batch: int,
                                                last_break: bool) -> None:
    """Issue 49: numbered (and read_cases through batches) reads a file with no blank line by
    slices, one with blank lines by its kept lines' numbers; either way each non-blank line's value
    is what it reads alone (_loads), numbered as in the file, whatever the batch."""
    for at, blank in blanks:
        lines.insert(min(at, len(lines)), blank)
    text = "\n".join(lines) + ("\n" if last_break else "")
    expected = [(n, read._loads(line)) for n, line in enumerate(text.split("\n"), 1) if line and not line.isspace()]

    def same(value: object) -> object:  # a TooBig is a new exception each read: compared by its words
        return ("TooBig", str(value)) if isinstance(value, jsonread.TooBig) else value

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(read, "BATCH", batch)
        got = list(read.numbered(text))
    assert [(n, same(v)) for n, v in got] == [(n, same(v)) for n, v in expected]
