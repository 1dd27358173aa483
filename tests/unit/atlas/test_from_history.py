"""atlas/from_history.py: `convmatrix export --history URL` (issue 40): the runs recorded in a
history database (SQLite and PostgreSQL) export to the same runs, cells, stacks and verdicts as
their folders do, under the same opaque run ids, with nothing identifying (not the history's host
column, not its run keys), and with what the history cannot give said in `dropped`."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from convmatrix.atlas import bundle, export, from_history
from convmatrix.atlas.model import Bundle
from convmatrix.cli.main import main
from exportkit import H100, H200_SLICE, V100, bundle_text, leaks, write_audit_run, write_fallback_run, write_run
from testkit import HOST

# Not the sub-code: the history keeps --explain's only; a folder's export also reads the one its
# message names (below).
KEPT = ("case", "verdict", "outcome", "family")


def cells_of(made: Bundle) -> list[tuple[object, ...]]:
    return [(run.run, run.date, cell.gpu.generation, cell.gpu.mig, cell.stack.torch, cell.stack.cudnn,
             cell.stack.driver, cell.stack.lane, cell.verdict, cell.control,
             tuple(tuple(getattr(case, f) for f in KEPT) for case in cell.cases))
            for run in made.runs for cell in run.cells]


def test_recorded_runs_export_as_their_folders_do(history_url: str, tmp_path: Path) -> None:
    runs = [write_run(tmp_path / "night-h100", tmp_path, H100, ended="2026-12-03T01:02:03.456+00:00"),
            write_run(tmp_path / "night-v100", tmp_path, V100, ended="2026-12-04T01:02:03.789+00:00"),
            write_run(tmp_path / "night-slice", tmp_path, H200_SLICE, ended="2026-12-05T01:02:03.012+00:00")]
    for run in runs:
        assert main(["record", str(run), "--history", history_url]) == 0
    from_db, from_folders = tmp_path / "db.json", tmp_path / "folders.json"
    assert main(["export", "--history", history_url, "-o", str(from_db), "--fleet", "lab"]) == 0
    assert main(["export", *map(str, runs), "-o", str(from_folders), "--fleet", "lab"]) == 0
    db, folders = bundle.read(from_db), bundle.read(from_folders)
    assert cells_of(db) == cells_of(folders)
    # The GPU's model is its key's spelling (the history keeps no GPU record).
    assert [c.gpu.model for r in db.runs for c in r.cells] == ["h100-80gb-hbm3"] * 2 + ["tesla-v100-sxm2-16gb"] * 2 + \
        ["h200"] * 2
    failing = [c for r in db.runs for cell in r.cells for c in cell.cases if c.outcome == "fail"]
    assert len(failing) == 3 and all(c.reason == "cudnn_not_supported" and c.repro is None for c in failing)
    assert {c.subcode for c in failing} == {None}
    assert {c.subcode for r in folders.runs for cell in r.cells for c in cell.cases if c.outcome == "fail"} == {3000}
    assert db.dropped[0].startswith("repro fields, messages, known-issue ids and sources")
    assert leaks(bundle_text(from_db), *runs, tmp_path) == []
    assert not any(run.name in bundle_text(from_db) for run in runs)


def test_last_takes_the_newest_runs(history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for day in (1, 2, 3):
        run = write_run(tmp_path / f"night-{day}", tmp_path, H100, ended=f"2026-12-0{day}T05:00:00.000+00:00")
        assert main(["record", str(run), "--history", history_url]) == 0
    assert main(["export", "--history", history_url, "--last", "2", "--show"]) == 0
    shown = capsys.readouterr().out
    assert "of 2026-12-02" in shown and "of 2026-12-03" in shown and "of 2026-12-01" not in shown


def test_a_reason_from_a_recorded_sub_code() -> None:
    assert from_history.reason("cudnn_not_supported", 3002) == \
        "cudnn_not_supported: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002): no engine supports this tensor shape"
    assert from_history.reason("crash", None) == "crash"


@pytest.mark.parametrize(("cell", "image", "lane"), [("host+pad8", None, "host"), ("baremetal-torch2.5.1", None,
                                                     "baremetal"), ("nightly-a", "sha256:" + "a" * 64, "container"),
                                                    ("nightly-a", None, "host")])
def test_the_lane_from_the_cell_id(cell: str, image: str | None, lane: str) -> None:
    assert from_history.lane_of(cell, image) == lane


@pytest.mark.parametrize(("argv", "said"), [
    (["export", "--show"], "export: give RUN directories, or --history URL"),
    (["export", "x", "--history", "sqlite:///x.db", "--show"], "export: give RUN directories, or --history URL"),
    (["export", "x", "--last", "3", "--show"], "--last: with --history"),
    (["export", "--history", "sqlite:///x.db", "--last", "0", "--show"], "--last: with --history"),
])
def test_the_source_is_one_or_the_other(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"convmatrix: {said}")


def test_an_empty_history_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--history", f"sqlite:///{tmp_path / 'none.sqlite'}", "--show"]) == 2
    assert "nothing was recorded there" in capsys.readouterr().err


def test_today_is_the_date_of_a_run_without_an_end() -> None:
    assert export.day_of(None, datetime.date(2026, 1, 2)) == "2026-01-02"


def test_a_case_id_naming_a_recorded_host_is_dropped(history_url: str, tmp_path: Path) -> None:
    """The history's host column is kept out of the bundle, and so is a case id that names it."""
    run = write_run(tmp_path / "night", tmp_path, H100, cases=("conv2d-a", f"conv2d-on-{HOST}"))
    assert main(["record", str(run), "--history", history_url]) == 0
    made = from_history_bundle(history_url, tmp_path)
    assert [[c.case for c in cell.cases] for r in made.runs for cell in r.cells] == [["conv2d-a"], ["conv2d-a"]]
    assert HOST not in bundle_text(tmp_path / "db.json")
    assert "2 cases whose id names a host, a user, a path or an address" in made.dropped


def test_a_recorded_fallback_exports_with_its_backends_and_ratios(history_url: str, tmp_path: Path) -> None:
    """Issue 48: the history keeps a fallback's backends and ratios (schema 2), and its export
    carries them as the folder's does."""
    run = write_fallback_run(tmp_path / "night")
    assert main(["record", str(run), "--history", history_url]) == 0
    made = from_history_bundle(history_url, tmp_path)
    costs = [(c.case, c.verdict, c.cost) for r in made.runs for cell in r.cells for c in cell.cases if c.cost]
    assert len(costs) == 1 and costs[0][:2] == ("conv3d-a", "fallback")
    cost = costs[0][2]
    assert cost is not None and (cost.control_backend, cost.backend, cost.memory_ratio) == ("Cudnn", "Slow3d", 14.0)


def from_history_bundle(history_url: str, tmp_path: Path) -> Bundle:
    assert main(["export", "--history", history_url, "-o", str(tmp_path / "db.json"), "--fleet", "lab"]) == 0
    return bundle.read(tmp_path / "db.json")


def test_a_cells_library_audit_is_kept_by_the_history_and_both_bundles_without_its_paths(
        history_url: str, tmp_path: Path) -> None:
    """Issue 47: the history keeps each cell's stack line and what the atlas keeps of its table;
    the bundle from the folders and the one from the history carry the same, and no path."""
    import json

    import sqlalchemy as sa

    from convmatrix.history import backends, schema

    run = write_audit_run(tmp_path / "night")
    assert main(["record", str(run), "--history", history_url]) == 0
    with backends.opened(history_url) as engine, engine.connect() as conn:
        stored = dict(conn.execute(sa.select(schema.cells.c.cell, schema.cells.c.libraries_line)).all())
        kept = dict(conn.execute(sa.select(schema.cells.c.cell, schema.cells.c.libraries)).all())
    assert stored == {"host": None, "host+swapped": "cuDNN 9.4.0 (wheel) · libcudnn_cnn, libcudnn_ops 9.2.1 from "
                                                    "LD_LIBRARY_PATH"}
    assert json.loads(kept["host+swapped"]) == {"swapped": True, "cudnn": [
        {"name": "libcudnn", "origin": "wheel", "version": "9.4.0"},
        {"name": "libcudnn_cnn", "origin": "LD_LIBRARY_PATH", "version": "9.2.1"},
        {"name": "libcudnn_ops", "origin": "LD_LIBRARY_PATH", "version": "9.2.1"}]}
    assert json.loads(kept["host"])["swapped"] is False
    db = from_history_bundle(history_url, tmp_path)
    assert main(["export", str(run), "-o", str(tmp_path / "folders.json"), "--fleet", "lab"]) == 0
    folders = bundle.read(tmp_path / "folders.json")
    for made in (db, folders):
        by_cell = {c.control: c for r in made.runs for c in r.cells}
        swapped = by_cell[False].libraries
        assert swapped is not None and swapped.swapped
        assert [(f.name, f.version, f.origin) for f in swapped.cudnn] == [
            ("libcudnn", "9.4.0", "wheel"), ("libcudnn_cnn", "9.2.1", "LD_LIBRARY_PATH"),
            ("libcudnn_ops", "9.2.1", "LD_LIBRARY_PATH")]
        own = by_cell[True].libraries
        assert own is not None and not own.swapped
    assert "/secret/cudnn92" not in bundle_text(tmp_path / "db.json") + bundle_text(tmp_path / "folders.json")
