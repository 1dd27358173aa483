"""convmatrix's nox sessions: thin wrappers; the work lives in src/convmatrix (see README.md).

The matrix comes from $CONVMATRIX_MATRIX (default: matrix/default.toml); run options go after
`--`: --out DIR, --shard I/N, --resume, --gpus 0,1, and suite options after a second `--`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))

from convmatrix import lanes, options
from convmatrix.errors import BadInput
from convmatrix.matrix import load

MATRIX_FILE = os.environ.get("CONVMATRIX_MATRIX", "matrix/default.toml")
try:
    MATRIX = load(MATRIX_FILE)
except BadInput as exc:
    print(f"convmatrix: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)

nox.options.sessions = ["nightly"]
nox.options.default_venv_backend = "uv|venv"
TOOLS = dict(python=False, venv_backend="none")


def install_harness(session: nox.Session) -> None:
    session.install("-e", ".")


@nox.session(reuse_venv=True)
def matrix(session: nox.Session) -> None:
    """The expanded cells of the matrix, and what was pruned and why."""
    install_harness(session)
    session.run("convmatrix", "matrix", "-m", MATRIX_FILE, *session.posargs)


@nox.session(**TOOLS)
def host(session: nox.Session) -> None:
    """The suite on the interpreter at hand ($CONVMATRIX_PYTHON or python3), installing nothing."""
    lanes.host(session, MATRIX)


def _baremetal_cell(cell):  # one nox session per baremetal cell: `nox -l` lists them
    def run(session: nox.Session) -> None:
        lanes.baremetal(session, cell, MATRIX)

    run.__doc__ = f"The suite in a uv venv: torch {cell.torch}+{cell.cuda}, cuDNN {cell.cudnn}."
    return nox.session(run, name=cell.id, python=cell.python, venv_backend="uv")


for _cell in MATRIX.lane("baremetal"):
    _baremetal_cell(_cell)


@nox.session(**TOOLS)
def baremetal(session: nox.Session) -> None:
    """Every baremetal cell of the matrix, one venv each."""
    lanes.fan_out(session, MATRIX, ["baremetal"], strict=True)


def _container_cell(cell):  # one nox session per container cell, like baremetal
    def run(session: nox.Session) -> None:
        install_harness(session)
        session.run("python", "-m", "convmatrix.container_lane", cell.id, *session.posargs,
                    env={"CONVMATRIX_MATRIX": MATRIX_FILE})

    run.__doc__ = f"The suite in a container on {cell.base}: torch {cell.torch}+{cell.cuda}, cuDNN {cell.cudnn}."
    return nox.session(run, name=cell.id, reuse_venv=True)


for _cell in MATRIX.lane("container"):
    _container_cell(_cell)


@nox.session(**TOOLS)
def container(session: nox.Session) -> None:
    """Every container cell of the matrix; each builds its image first when it is missing."""
    lanes.fan_out(session, MATRIX, ["container"], strict=True)


@nox.session(reuse_venv=True)
def build(session: nox.Session) -> None:
    """Build the images the matrix's container cells need (-- --dry-run: say what and why)."""
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


@nox.session(**TOOLS)
def nightly(session: nox.Session) -> None:
    """The main job: every cell this machine can run, then the report."""
    lanes.fan_out(session, MATRIX, ["host", "baremetal", "container"])
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
