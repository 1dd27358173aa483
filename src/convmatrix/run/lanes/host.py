"""The host lane: the suite on the interpreter at hand ($CONVMATRIX_PYTHON, else python3),
installing nothing into it."""

from __future__ import annotations

import os
import shutil
import subprocess

from convmatrix.matrix.cells import Cell
from convmatrix.matrix.parse import Matrix
from convmatrix.run import reuse, runner
from convmatrix.run.lanes import Log, Prepared, SuiteRun


def host_python() -> str:
    """The interpreter at hand: $CONVMATRIX_PYTHON, else python3 on PATH."""
    return os.environ.get("CONVMATRIX_PYTHON") or shutil.which("python3") or shutil.which("python") or "python3"


def host_problem(python: str) -> str | None:
    """Why the host lane cannot run here (no torch or pytest in that interpreter), or None."""
    try:
        subprocess.run([python, "-c", "import torch, pytest"], capture_output=True, text=True, timeout=300, check=True)
    except FileNotFoundError:
        return f"host lane: no interpreter {python} (set CONVMATRIX_PYTHON)"
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr.strip().splitlines() or ["?"])[-1]
        return f"host lane: {python} cannot import torch and pytest ({last}); install them or set CONVMATRIX_PYTHON"
    except subprocess.TimeoutExpired:
        return f"host lane: {python} took over 300 s to import torch"
    return None


class Host:
    def problem(self, cell: Cell) -> str | None:
        return host_problem(host_python())

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        python = host_python()
        return Prepared(python=python, lock=reuse.environment_lock(python))

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        return runner.run_local(prepared.python, run.target, run.args,
                                select=run.select, results_dir=run.results_dir, env=run.env)
