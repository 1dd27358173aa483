"""Remedy knobs as a matrix axis: parsing, cell ids, include/exclude/control, and the suite
options and cell.json a knobbed cell runs with."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from convmatrix import gpus, matrix
from convmatrix.errors import BadInput
from convmatrix.matrix import knobs
from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import lanes, options, orchestrate
from convmatrix.run.lanes import Log, Prepared, SuiteRun
from convmatrix.run.lanes.baremetal import venv_dir
from testkit import ran

STACK = "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
MATRIX = """
name = "t"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["bundled", "9.5.1.17"]
python = ["3.11"]
knobs = ["default", "benchmark=off", "pad=8", "channels_last=on,deterministic=on"]
[control]
cudnn = "bundled"
"""


def test_a_cell_per_knob_set_each_id_suffixed_and_the_control_is_the_default_set(
        write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(MATRIX))
    ids = [c.id for c in m.cells if c.cudnn == "bundled"]
    assert ids == [STACK, f"{STACK}+bench_off", f"{STACK}+pad8", f"{STACK}+det_on+cl_on"]
    assert len(m.cells) == 8
    assert m.control is not None and m.control.id == STACK
    padded = m.cell(f"{STACK}+pad8")
    assert padded.stack_id == STACK and padded.values()["knobs"] == "pad=8"
    assert "knobs" not in m.control.values()  # a default cell's record is what it was before the axis


def test_without_the_axis_nothing_changes(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(MATRIX.replace('knobs = ["default", "benchmark=off", "pad=8", '
                                                '"channels_last=on,deterministic=on"]', "")))
    assert [c.id for c in m.cells] == [STACK, "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"]
    assert all(c.knobs == "" for c in m.cells)


def test_one_set_however_spelt_is_one_cell(write_matrix: Callable[[str], Path]) -> None:
    text = MATRIX.replace('"benchmark=off", "pad=8", "channels_last=on,deterministic=on"',
                          '"deterministic=on,channels_last=on", "channels_last=on,deterministic=on"')
    m = matrix.load(write_matrix(text.replace('"default", ', '"default", "default", ')))
    assert [c.id for c in m.cells if c.cudnn == "bundled"] == [STACK, f"{STACK}+det_on+cl_on"]


@pytest.mark.parametrize("bad", ["pad=0", "pad=x", "pad=08", "fast=on", "benchmark=yes", "pad=8,pad=4",
                                 "pad=8,", "pad = 8", "pad=\u0668", "Default", "pad=8;rm -rf /"])
def test_a_malformed_set_is_one_line_naming_file_and_field(write_matrix: Callable[[str], Path], bad: str) -> None:
    path = write_matrix(MATRIX.replace('"benchmark=off"', json.dumps(bad)))
    with pytest.raises(BadInput) as err:
        matrix.load(path)
    assert str(err.value).startswith(f"{path}: [axes].knobs[1]: ")
    assert len(str(err.value).splitlines()) == 1 and err.value.exit_code == 2


def test_include_exclude_and_control_by_knobs(write_matrix: Callable[[str], Path]) -> None:
    text = MATRIX.replace('[control]\ncudnn = "bundled"', """
[[exclude]]
cudnn = "9.5.1.17"
knobs = "deterministic=on,channels_last=on"
[[include]]
lane = "host"
[[include]]
lane = "host"
knobs = "pad=16"
[control]
cudnn = "bundled"
knobs = "benchmark=off"
""")
    m = matrix.load(write_matrix(text))
    ids = {c.id for c in m.cells}
    assert "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11+det_on+cl_on" not in ids
    assert {"host", "host+bench_off", "host+pad8", "host+det_on+cl_on", "host+pad16"} <= ids
    assert m.control is not None and m.control.id == f"{STACK}+bench_off"


def test_knob_sets_give_suite_options_in_canonical_order() -> None:
    assert knobs.suite_args("channels_last=on,pad=8,benchmark=on") == (
        "--cudnn-benchmark", "on", "--channels-last", "on", "--pad-channels", "8")
    assert knobs.suite_args("default") == () and knobs.canonical("default") == ""
    assert knobs.parse("pad=8,deterministic=off").suffix == "+det_off+pad8"


def test_knobbed_cells_share_their_stack_s_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_VENVS", "/v")
    plain = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    padded = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11", knobs="pad=8")
    assert venv_dir(plain) == venv_dir(padded) == Path("/v") / STACK


class RecordingLane:
    """Records each suite run; writes the least a complete result needs."""

    def __init__(self) -> None:
        self.runs: list[SuiteRun] = []

    def problem(self, cell: Cell) -> str | None:
        return None

    def prepare(self, cell: Cell, matrix: matrix.Matrix, log: Log) -> Prepared:
        return Prepared(python="py")

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        self.runs.append(run)
        run.out.mkdir(parents=True, exist_ok=True)
        rundir.write_json(run.out / rundir.ENV_JSON, {"schema": 1, "gpus": [], "knobs": {}, "argv": [],
                                                      "ended": rundir.records.now()})
        return 0


def test_each_cell_runs_with_its_own_knob_options_after_the_user_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_matrix: Callable[[str], Path]) -> None:
    monkeypatch.setattr(gpus, "discover", list)
    lane = RecordingLane()
    monkeypatch.setattr(lanes, "lane", lambda name: lane)
    m = matrix.load(write_matrix(MATRIX))
    opts = options.parse(["--out", str(tmp_path / "run"), "--", "-k", "conv2d"])
    orchestrate.run(m, m.cells, opts, lambda line: None, strict=True)
    args = {run.target.cell.id: run.args for run in lane.runs}
    assert args[STACK] == ("-k", "conv2d")
    assert args[f"{STACK}+pad8"] == ("-k", "conv2d", "--pad-channels", "8")
    assert args[f"{STACK}+det_on+cl_on"] == ("-k", "conv2d", "--cudnn-deterministic", "on", "--channels-last", "on")
    padded = json.loads((ran(tmp_path / "run", f"{STACK}+pad8") / rundir.CELL_JSON).read_text())
    assert padded["knobs"] == "pad=8" and padded["requested"]["knobs"] == "pad=8"
    plain = json.loads((ran(tmp_path / "run", STACK) / rundir.CELL_JSON).read_text())
    assert plain["knobs"] == "default" and "knobs" not in plain["requested"]
