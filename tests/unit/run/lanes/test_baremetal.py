from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from convmatrix.matrix.cells import Cell
from convmatrix.run.lanes import Log, baremetal


def cell(*, torch: str = "2.5.1", cuda: str = "cu124", cudnn: str = "bundled", python: str = "3.11") -> Cell:
    return Cell(lane="baremetal", torch=torch, cuda=cuda, cudnn=cudnn, python=python)


def test_a_venv_whose_plan_is_unchanged_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_matrix: Callable[[str], Path]
) -> None:
    from convmatrix.matrix import load

    monkeypatch.setenv("CONVMATRIX_VENVS", str(tmp_path / "venvs"))
    made: list[list[list[str]]] = []

    def make(cell: Cell, venv: Path, plan: list[list[str]], log: Log) -> None:
        made.append(plan)
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")

    monkeypatch.setattr(baremetal, "make_venv", make)
    matrix = load(write_matrix('name = "t"\n[axes]\nlane = ["baremetal"]\ntorch = ["2.5.1"]\ncuda = ["cu124"]\n'
                               'cudnn = ["bundled"]\npython = ["3.11"]\n'))
    lane, (the_cell,) = baremetal.Baremetal(), matrix.cells
    first = lane.prepare(the_cell, matrix, print)
    assert lane.prepare(the_cell, matrix, print) == first and len(made) == 1  # warm: nothing installed
    assert first.python == str(tmp_path / "venvs" / the_cell.id / "bin" / "python")
    other = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="9.5.1.17", python="3.11")
    (tmp_path / "venvs" / other.id).mkdir()
    lane.prepare(other, matrix, print)
    assert len(made) == 2


def test_a_failed_install_step_is_an_infrastructure_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from convmatrix.errors import InfrastructureError

    monkeypatch.setattr(baremetal, "uv", lambda: "false")
    with pytest.raises(InfrastructureError, match=r"install failed: `venv .*` exited 1"):
        baremetal.make_venv(cell(), tmp_path / "v", [["torch==2.5.1"]], print)
    assert not (tmp_path / "v").exists()


def test_an_existing_venv_spares_asking_uv_for_its_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setenv("CONVMATRIX_VENVS", str(tmp_path))
    monkeypatch.setattr(baremetal, "uv", lambda: "/usr/bin/uv")

    def python_available(version: str) -> bool:
        asked.append(version)
        return False

    monkeypatch.setattr(baremetal, "python_available", python_available)
    lane = baremetal.Baremetal()
    assert lane.problem(cell()) == "no Python 3.11 on this machine (`uv python find 3.11` found none)"
    python = baremetal.venv_dir(cell()) / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(tmp_path / "gone")  # the interpreter it was made from is gone: ask
    assert lane.problem(cell()) is not None
    (tmp_path / "gone").write_text("")
    assert lane.problem(cell()) is None
    assert asked == ["3.11", "3.11"]
