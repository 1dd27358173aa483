"""`nox -s nightly` records its run into the history database by default, then marks its reports
against it (issue 36); CONVMATRIX_RECORD=0 records nothing; a history it cannot read is one line,
and the night's reports are still made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from testkit import REPO

HOST_ONLY = 'name = "h"\n[axes]\nlane = ["host"]\n'


def nightly(tmp_path: Path, out: Path, suite: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    matrix = tmp_path / "m.toml"
    matrix.write_text(HOST_ONLY)
    command = [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", "nightly", "--",
               "--out", str(out), "--", "-k", "conv1d-fp32", *suite]
    full = dict(os.environ, CONVMATRIX_MATRIX=str(matrix), CONVMATRIX_PYTHON=sys.executable,
                CONVMATRIX_HOME=str(tmp_path / "home"), **env)
    full.pop("CONVMATRIX_HISTORY", None) if "CONVMATRIX_HISTORY" not in env else None
    return subprocess.run(command, cwd=REPO, env=full, capture_output=True, text=True, check=False, timeout=1200)


def test_the_nightly_records_its_run_and_marks_its_report(tmp_path: Path) -> None:
    done = nightly(tmp_path, tmp_path / "run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "recorded run run into" in done.stderr + done.stdout
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'home' / 'history.sqlite'}")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT run FROM runs")).scalars().all() == ["run"]
    engine.dispose()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert all("history" in cell for cell in report["cells"])


def test_the_nightly_reports_its_own_run_when_another_starts_meanwhile(tmp_path: Path) -> None:
    """Another run marked itself the latest while the nightly ran (two nightlies on one checkout,
    or parallel tests: stop 43's CI): the nightly still records and reports the run it made."""
    latest = REPO / "reports" / "runs" / "LATEST"
    other = tmp_path / "other-run"
    plugins = os.pathsep.join(filter(None, [str(REPO / "tests" / "plugins"), os.environ.get("PYTHONPATH")]))
    done = nightly(tmp_path, tmp_path / "mine", suite=("-p", "convmatrix_race"), PYTHONPATH=plugins,
                   CONVMATRIX_RACE_LATEST=f"{latest}:{other}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((tmp_path / "mine" / "report.json").read_text())["cells"]
    assert not other.exists()


def test_no_record_when_asked_and_a_broken_history_loses_no_report(tmp_path: Path) -> None:
    done = nightly(tmp_path, tmp_path / "quiet", CONVMATRIX_RECORD="0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (tmp_path / "home" / "history.sqlite").exists()
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database " * 64)
    done = nightly(tmp_path, tmp_path / "loud", CONVMATRIX_HISTORY=f"sqlite:///{broken}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "file is not a database" in done.stdout + done.stderr
    assert "history" not in json.loads((tmp_path / "loud" / "report.json").read_text())["cells"][0]
    assert broken.read_bytes() == b"not a database " * 64


def test_a_nightly_whose_optional_cell_cannot_run_is_green_under_first_red(tmp_path: Path) -> None:
    """Issue 45: the optional host cell that did not run (no torch in the interpreter at hand) was
    stored red, so a fresh, all-green nightly exited 1 under first-red ("1 first-red: host@cpu")."""
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "optional-host"\nallow_cpu = true\n[[include]]\nlane = "host"\noptional = true\n')
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = dict(os.environ, CONVMATRIX_MATRIX=str(matrix), CONVMATRIX_PYTHON=str(bare / "bin" / "python"),
               CONVMATRIX_HOME=str(tmp_path / "home"), CONVMATRIX_FAIL_ON="first-red")
    env.pop("CONVMATRIX_HISTORY", None)
    for night in ("n1", "n2"):
        done = subprocess.run([sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", "nightly", "--",
                               "--out", str(tmp_path / night)], cwd=REPO, env=env, capture_output=True, text=True,
                              check=False, timeout=1200)
        said = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0, said
        assert f"recorded run {night} into" in said and "1 first-red" not in said, said
