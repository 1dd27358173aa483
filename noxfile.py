"""convmatrix's nox sessions: thin wrappers; the work lives in src/convmatrix (see README.md).

The matrix comes from $CONVMATRIX_MATRIX (default: matrix/default.toml); run options go after
`--`: --out DIR, --shard I/N, --resume, --gpus 0,1, --every-gpu, and suite options after a
second `--`. A broken matrix fails only the sessions that need it: `nox -s tests`, `lint`,
`report` and `nox -l` still work, so the tool that would tell you what is wrong still runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))

from convmatrix import lanes, options
from convmatrix.cells import Cell
from convmatrix.errors import BadInput
from convmatrix.matrix import Matrix, load

MATRIX_FILE = os.environ.get("CONVMATRIX_MATRIX", "matrix/default.toml")
MATRIX: Matrix | None = None
MATRIX_ERROR: str | None = None
try:
    MATRIX = load(MATRIX_FILE)
except BadInput as exc:
    MATRIX_ERROR = f"convmatrix: {exc}"
    print(MATRIX_ERROR, file=sys.stderr)

nox.options.sessions = ["nightly"]
nox.options.default_venv_backend = "uv|venv"


def the_matrix(session: nox.Session) -> Matrix:
    """The loaded matrix; a session that needs a broken one ends with its one line."""
    if MATRIX is None:
        session.error(MATRIX_ERROR or f"convmatrix: {MATRIX_FILE}: not loaded")
    assert MATRIX is not None
    return MATRIX


def install_harness(session: nox.Session) -> None:
    session.install("-e", ".")


@nox.session(reuse_venv=True)
def matrix(session: nox.Session) -> None:
    """The expanded cells of the matrix, and what was pruned and why."""
    install_harness(session)
    session.run("convmatrix", "matrix", "-m", MATRIX_FILE, *session.posargs)


@nox.session(python=False, venv_backend="none")
def host(session: nox.Session) -> None:
    """The suite on the interpreter at hand ($CONVMATRIX_PYTHON or python3), installing nothing."""
    lanes.host(session, the_matrix(session))


def cell_session(cell: Cell, run: Callable[[nox.Session], None], doc: str, *, python: str | None = None,
                 venv_backend: str | None = None, reuse_venv: bool | None = None) -> None:
    """One nox session per cell, so that `nox -l` lists them and `nox -s <cell-id>` runs one."""
    run.__doc__ = doc
    nox.session(name=cell.id, python=python, venv_backend=venv_backend, reuse_venv=reuse_venv)(run)


def baremetal_cell(cell: Cell, matrix: Matrix) -> None:
    def run(session: nox.Session) -> None:
        lanes.baremetal(session, cell, matrix)

    cell_session(cell, run, f"The suite in a uv venv: torch {cell.torch}+{cell.cuda}, cuDNN {cell.cudnn}.",
                 python=cell.python, venv_backend="uv")


def container_cell(cell: Cell) -> None:
    def run(session: nox.Session) -> None:
        install_harness(session)
        session.run("python", "-m", "convmatrix.container_lane", cell.id, *session.posargs,
                    env={"CONVMATRIX_MATRIX": MATRIX_FILE})

    cell_session(cell, run, f"The suite in a container on {cell.base}: torch {cell.torch}+{cell.cuda}, "
                 f"cuDNN {cell.cudnn}.", reuse_venv=True)


if MATRIX is not None:
    for _cell in MATRIX.lane("baremetal"):
        baremetal_cell(_cell, MATRIX)
    for _cell in MATRIX.lane("container"):
        container_cell(_cell)


@nox.session(python=False, venv_backend="none")
def baremetal(session: nox.Session) -> None:
    """Every baremetal cell of the matrix, one venv each."""
    lanes.fan_out(session, the_matrix(session), ["baremetal"], strict=True)


@nox.session(python=False, venv_backend="none")
def container(session: nox.Session) -> None:
    """Every container cell of the matrix; each builds its image first when it is missing."""
    lanes.fan_out(session, the_matrix(session), ["container"], strict=True)


@nox.session(reuse_venv=True)
def build(session: nox.Session) -> None:
    """Build the images the matrix's container cells need (-- --dry-run: say what and why)."""
    the_matrix(session)
    install_harness(session)
    session.run("convmatrix", "build", "-m", MATRIX_FILE, *session.posargs)


@nox.session(name="base-image", reuse_venv=True)
def base_image(session: nox.Session) -> None:
    """A local convmatrix/base:bookworm (Debian bookworm + python3) from Debian packages, no registry."""
    install_harness(session)
    session.run("python", "-m", "convmatrix.base_image", *session.posargs)


@nox.session(reuse_venv=True)
def report(session: nox.Session) -> None:
    """The report over the latest run (or the RESULTS given): text here, json/markdown/junit beside it."""
    try:
        paths = session.posargs or [str(options.latest())]
    except BadInput as exc:
        session.error(f"convmatrix: {exc}")
    install_harness(session)
    run_dir = Path(paths[0])
    for fmt, name in (("json", "report.json"), ("markdown", "report.md"), ("junit", "junit.xml")):
        # Written whatever the verdict; the text report below decides the exit status.
        session.run("convmatrix", "report", *paths, "--format", fmt, "-o", str(run_dir / name),
                    "--fail-on", "never", success_codes=[0, 2, 3], silent=True)
    session.run("convmatrix", "report", *paths, "--format", "text")


@nox.session(python=False, venv_backend="none")
def nightly(session: nox.Session) -> None:
    """The main job: every cell this machine can run, then the report."""
    lanes.fan_out(session, the_matrix(session), ["host", "baremetal", "container"])
    session.notify("report")


@nox.session(python="3.11", venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The project's own tests (pass pytest options after --, e.g. -m 'not slow')."""
    session.install("-e", ".[test]", "-r", "tests/requirements.txt")
    session.run("pytest", *session.posargs)


@nox.session(python="3.11", venv_backend="venv")
def lint(session: nox.Session) -> None:
    """ruff and mypy, as configured in pyproject.toml."""
    session.install("-e", ".", "ruff", "mypy", "types-tabulate", "nox")
    session.run("ruff", "check", "src", "tests", "suites", "bench", "noxfile.py")
    session.run("mypy")
