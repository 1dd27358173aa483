"""The baremetal lane: the suite in a uv venv per cell, on this machine's driver and GPUs.

A cell's venv gets its install plan's steps (install.py: torch, the suite's requirements, the
cuDNN override last). A venv whose plan is unchanged since it was made is reused as it is: a warm
rerun installs nothing. The venvs live in home.venvs() (<$CONVMATRIX_HOME>/venvs unless
$CONVMATRIX_VENVS says where); a run holds each venv it prepares until it ends, and marks it used,
so that `convmatrix gc` removes only venvs no running job holds, by when they were last used.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from convmatrix import home, popen, tree
from convmatrix.errors import InfrastructureError
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.parse import Matrix
from convmatrix.run import outages, reuse, runner
from convmatrix.run.lanes import Log, Prepared, SuiteRun, install

STAMP = "convmatrix-install.json"  # in the venv: the plan it was made with


def uv() -> str | None:
    return shutil.which("uv")


def python_available(version: str) -> bool:
    """Whether uv finds an installed interpreter for a cell's python (no download attempted)."""
    found = uv()
    if found is None:
        return False
    done = subprocess.run([found, "python", "find", "--no-python-downloads", version],
                          capture_output=True, text=True, check=False)
    return done.returncode == 0


def venvs_root() -> Path:
    """Where the cells' venvs live."""
    return home.venvs()


def venv_dir(cell: Cell) -> Path:
    # By stack: cells that differ only in their knob set (+pad8) run the suite in one venv.
    return venvs_root() / cell.stack_id


class Baremetal:
    def problem(self, cell: Cell) -> str | None:
        if uv() is None:
            return "no uv on this machine (python3 -m pip install uv)"
        # A venv whose python still resolves was made from that interpreter: asking uv again
        # (through a pyenv shim, a chain of shell scripts) would cost a warm cell a tenth of a second.
        if (venv_dir(cell) / "bin" / "python").exists():
            return None
        if not python_available(cell.python):
            return f"no Python {cell.python} on this machine (`uv python find {cell.python}` found none)"
        return None

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        venv = venv_dir(cell)
        home.hold(home.VENVS, venv.name)  # until the run ends: gc leaves it alone (and waits out a gc removing it)
        plan = install.plan(cell, matrix.wheelhouse).steps()
        stamp, python = venv / STAMP, venv / "bin" / "python"
        wanted = {"python": cell.python, "steps": plan}
        if python.exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted:
            log(f"{cell.id}: venv {venv} is up to date")
        else:
            make_venv(cell, venv, plan, log)
            with tree.Tree.open(venv) as made:
                made.write(STAMP, json.dumps(wanted).encode())
        home.touch(venv)  # used now: gc ages a venv by its last use
        return Prepared(python=str(python), record={"venv": str(venv)},
                        lock=reuse.venv_lock(venv, str(python)))

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        return runner.run_local(prepared.python, run.target, run.args,
                                select=run.select, results_dir=run.results_dir, env=run.env)


def make_venv(cell: Cell, venv: Path, plan: list[list[str]], log: Log) -> None:
    """A fresh venv with the plan installed, step by step; InfrastructureError naming the step
    that failed. uv's cache is shared, so nothing is downloaded twice."""
    found = uv()
    assert found is not None  # problem() said so before prepare
    outages.check("index", cell.id)  # an index found down earlier in this run: not tried again
    with tree.Tree.open(venv.parent, create=True) as venvs:
        venvs.remove(venv.name)
        # The install log's first line says whose it is: gc removes only logs that start so.
        venvs.write(f"{cell.id}.install.log", home.INSTALL_LOG_HEAD + f" of {cell.id}\n".encode())
    log(f"{cell.id}: making {venv}")
    # uv's own CA roots miss a TLS-intercepting proxy's; the system store has it.
    env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1")}
    commands = [[found, "venv", "--no-python-downloads", "--python", cell.python, str(venv)]]
    commands += [[found, "pip", "install", "--python", str(venv / "bin" / "python"), *step] for step in plan]
    install_log = venv.parent / f"{cell.id}.install.log"
    for step, command in enumerate(commands):
        code = popen.stream(command, env=env, log_path=install_log)
        if code == 0 and step == 0:
            home.mark(venv, "venv")  # made by convmatrix: gc may remove it (and only such)
        if code != 0:
            with tree.Tree.open(venv.parent) as venvs:
                venvs.remove(venv.name)  # never reuse a half-made venv
            raise InfrastructureError(f"{cell.id}: install failed: `{' '.join(command[1:])}` exited {code} "
                                      f"(see {install_log})").with_log(install_log)
