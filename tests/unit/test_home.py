"""CONVMATRIX_HOME and its parts (issue 25, item 3), and the holds that keep `convmatrix gc` off
what a running job uses."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from convmatrix import home
from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import reuse
from convmatrix.run.lanes import baremetal


@pytest.fixture(autouse=True)
def fresh_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONVMATRIX_HOME", "CONVMATRIX_VENVS", "CONVMATRIX_RESULTS_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setattr(home, "_KEPT", {})  # hold()'s descriptors: this test's only


def test_the_default_home_is_outside_the_checkout_and_holds_every_part(tmp_path: Path) -> None:
    root = (tmp_path / "user" / ".cache" / "convmatrix").resolve()
    assert home.home() == root
    assert (home.venvs(), home.results_store(), home.locks()) == (root / "venvs", root / "results", root / "locks")
    assert baremetal.venvs_root() == root / "venvs" and reuse.store() == root / "results"
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    assert baremetal.venv_dir(cell).parent == root / "venvs"


def test_convmatrix_home_moves_them_all_and_the_old_variables_still_move_their_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMATRIX_HOME", "~/ci-cache")
    root = (tmp_path / "user" / "ci-cache").resolve()
    assert home.home() == root and home.venvs() == root / "venvs" and home.locks() == root / "locks"
    monkeypatch.setenv("CONVMATRIX_VENVS", str(tmp_path / "v"))
    monkeypatch.setenv("CONVMATRIX_RESULTS_STORE", str(tmp_path / "s"))
    assert (home.venvs(), home.results_store()) == (tmp_path / "v", tmp_path / "s")
    assert home.locks() == root / "locks"  # the holds stay in the home


def test_a_lock_name_never_leaves_its_folder() -> None:
    for kind, name in (("venvs", "../x"), ("venvs", ".."), ("venvs", ""), ("other", "x")):
        with pytest.raises(ValueError, match="no lock for"):
            home.lock_path(kind, name)


def test_a_held_thing_cannot_be_taken_by_gc_and_a_hold_marks_its_use(tmp_path: Path) -> None:
    assert home.last_held(home.VENVS, "v") is None
    with home.held(home.VENVS, "v"):
        assert home.last_held(home.VENVS, "v") is not None
        with home.exclusive(home.VENVS, "v") as free:
            assert not free
    with home.exclusive(home.VENVS, "v") as free:
        assert free


def test_a_hold_for_the_process_is_taken_once(tmp_path: Path) -> None:
    home.hold(home.RESULTS, "k")
    home.hold(home.RESULTS, "k")
    assert len(home._KEPT) == 1
    with home.exclusive(home.RESULTS, "k") as free:
        assert not free
    for fd in home._KEPT.values():
        os.close(fd)


def test_gc_s_own_lock_file_never_passes_for_a_use_and_a_dry_run_makes_none() -> None:
    with home.exclusive(home.VENVS, "dry", create=False) as free:
        assert free
    assert not home.lock_path(home.VENVS, "dry").exists()
    with home.exclusive(home.VENVS, "made") as free:
        assert free
    assert home.last_held(home.VENVS, "made") == 0.0


def test_a_holder_that_waited_on_a_lock_file_gc_removed_holds_the_new_one() -> None:
    taken, release = threading.Event(), threading.Event()

    def holder() -> None:
        with home.held(home.VENVS, "v"):
            taken.set()
            release.wait(10)

    with home.exclusive(home.VENVS, "v") as free:
        assert free
        thread = threading.Thread(target=holder)
        thread.start()
        assert not taken.wait(0.2)  # waits while gc removes the thing
        home.lock_path(home.VENVS, "v").unlink()  # gc is done: its lock file goes with the thing
    assert taken.wait(10)
    with home.exclusive(home.VENVS, "v") as free:
        assert not free  # the holder holds the lock file that is there now
    release.set()
    thread.join(10)


def test_where_no_lock_file_can_be_made_a_job_goes_on_and_gc_keeps_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "file" / "home"))
    with home.held(home.VENVS, "v"):
        pass
    home.hold(home.VENVS, "v")
    with home.exclusive(home.VENVS, "v") as free:
        assert not free


def test_a_stored_result_is_marked_used_when_it_is_reused(tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()
    rundir.write_json(done / rundir.CELL_JSON, {"id": "c", "exit_code": 0, "ended": "2024-01-01T00:00:00"})
    rundir.write_json(done / rundir.ENV_JSON, {"ended": "2024-01-01T00:00:00"})
    reuse.save("k" * 32, done)
    stored = reuse.store() / ("k" * 32)
    assert rundir.is_complete(stored)
    os.utime(stored, (1, 1))
    assert reuse.restore("k" * 32, tmp_path / "into")
    assert stored.stat().st_mtime > 1
    assert home.last_held(home.RESULTS, "k" * 32) is not None


def test_the_baremetal_lane_holds_the_venvs_it_prepares_and_marks_them_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmatrix.matrix import load

    def make(cell: Cell, venv: Path, plan: list[list[str]], log: object) -> None:
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")

    monkeypatch.setattr(baremetal, "make_venv", make)
    monkeypatch.setattr(reuse, "venv_lock", lambda venv, python: "")
    (tmp_path / "m.toml").write_text('name = "t"\n[axes]\nlane = ["baremetal"]\ntorch = ["2.5.1"]\ncuda = ["cu124"]\n'
                                     'cudnn = ["bundled"]\npython = ["3.11"]\n')
    matrix = load(tmp_path / "m.toml")
    (cell,) = matrix.cells
    baremetal.Baremetal().prepare(cell, matrix, print)
    venv = baremetal.venv_dir(cell)
    assert json.loads((venv / baremetal.STAMP).read_text())["python"] == "3.11"
    os.utime(venv, (1, 1))
    baremetal.Baremetal().prepare(cell, matrix, print)  # warm: nothing installed, but used now
    assert venv.stat().st_mtime > 1
    with home.exclusive(home.VENVS, venv.name) as free:
        assert not free  # held until the run (this process) ends
    for fd in home._KEPT.values():
        os.close(fd)
