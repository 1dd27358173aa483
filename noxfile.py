"""convmatrix's nox sessions: thin wrappers; the work lives in src/convmatrix (see README.md).

The matrix comes from $CONVMATRIX_MATRIX (default: matrix/default.toml); run options go after
`--`: --out DIR, --shard I/N, --resume, --gpus 0,1, --every-gpu, --jobs N, --prepare-ahead N,
--prepare-disk GB, --reuse-results, and suite options after a second `--`. A broken matrix fails
only the sessions that need it: `nox -s tests`, `lint`,
`report` and `nox -l` still work, so the tool that would tell you what is wrong still runs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))

from convmatrix.errors import BadInput
from convmatrix.matrix import Matrix, default_matrix, load
from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import options

MATRIX_FILE = default_matrix()
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


def harness(session: nox.Session) -> str:
    """The convmatrix command from one venv that every lane session shares (.nox/harness), made
    or refreshed only when pyproject.toml changed: a lane session installs nothing per cell."""
    venv = Path(".nox") / "harness"
    stamp = venv / "pyproject.toml"
    if not stamp.exists() or stamp.read_text() != Path("pyproject.toml").read_text():
        uv = shutil.which("uv")
        if uv:
            session.run(uv, "venv", "--quiet", "--allow-existing", str(venv), external=True)
            session.run(uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "-e", ".",
                        external=True, env={"UV_NATIVE_TLS": "1"})
        else:
            session.run(sys.executable, "-m", "venv", str(venv), external=True)
            session.run(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-e", ".", external=True)
        stamp.write_text(Path("pyproject.toml").read_text())
    return str(venv / "bin" / "convmatrix")


def run_cells(session: nox.Session, *selection: str, strict: bool = True,
              success_codes: list[int] | None = None) -> None:
    """`convmatrix run` over the selected cells (run options and suite options from posargs)."""
    the_matrix(session)
    session.run(harness(session), "run", "-m", MATRIX_FILE, *selection, *(["--strict"] if strict else []),
                *session.posargs, external=True, success_codes=success_codes or [0])


@nox.session(python=False)
def matrix(session: nox.Session) -> None:
    """The expanded cells of the matrix, and what was pruned and why."""
    session.run(harness(session), "matrix", "-m", MATRIX_FILE, *session.posargs, external=True)


@nox.session(python=False)
def host(session: nox.Session) -> None:
    """The suite on the interpreter at hand ($CONVMATRIX_PYTHON or python3), installing nothing into it."""
    run_cells(session, "--lane", "host")


def cell_session(cell: Cell) -> None:
    """One nox session per cell, so that `nox -l` lists them and `nox -s <cell-id>` runs one."""
    def run(session: nox.Session) -> None:
        run_cells(session, "--cell", cell.id)

    where = f"in a container on {cell.base}" if cell.lane == "container" else f"in a {cell.lane} venv"
    run.__doc__ = f"The suite {where}: torch {cell.torch}+{cell.cuda}, cuDNN {cell.cudnn}."
    nox.session(name=cell.id, python=False)(run)


if MATRIX is not None:
    for _cell in MATRIX.cells:
        if _cell.lane != "host":
            cell_session(_cell)


@nox.session(python=False)
def baremetal(session: nox.Session) -> None:
    """Every baremetal cell of the matrix, one venv each."""
    run_cells(session, "--lane", "baremetal")


@nox.session(python=False)
def container(session: nox.Session) -> None:
    """Every container cell of the matrix; each builds its image first when it is missing."""
    run_cells(session, "--lane", "container")


@nox.session(python=False)
def build(session: nox.Session) -> None:
    """Build the images the matrix's container cells need (-- --dry-run: say what and why)."""
    the_matrix(session)
    session.run(harness(session), "build", "-m", MATRIX_FILE, *session.posargs, external=True)


@nox.session(name="base-image", python=False)
def base_image(session: nox.Session) -> None:
    """A local convmatrix/base:bookworm (Debian bookworm + python3) from Debian packages, no registry."""
    python = str(Path(harness(session)).parent / "python")
    session.run(python, "-m", "convmatrix.run.lanes.base_image", *session.posargs, external=True)


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """The report over the latest run (or the RESULTS given): text here, json/markdown/html/junit beside it."""
    write_report(session, session.posargs)


def write_report(session: nox.Session, paths: list[str]) -> None:
    try:
        paths = paths or [str(options.latest())]
    except BadInput as exc:
        session.error(f"convmatrix: {exc}")
    convmatrix = harness(session)
    run_dir = Path(paths[0])
    for fmt, name in rundir.REPORT_FILES:
        # Written whatever the verdict; the text report below decides the exit status.
        session.run(convmatrix, "report", *paths, "--format", fmt, "-o", str(run_dir / name),
                    "--fail-on", "never", success_codes=[0, 2, 3], silent=True, external=True)
    session.run(convmatrix, "report", *paths, "--format", "text", external=True)


@nox.session(python=False)
def nightly(session: nox.Session) -> None:
    """The main job: every cell this machine can run, then the report (whatever the run's end: a
    cell that failed to set up is in the report as INVALID, and that fails it)."""
    session.log(f"nightly: running {MATRIX_FILE} (set CONVMATRIX_MATRIX for another)")
    if "--reuse-results" in session.posargs:
        # A nightly's results come from that night: reuse is for fix-proof and upgrade runs.
        session.error("convmatrix: --reuse-results is not for the nightly; run the lane sessions with it")
    run_options = session.posargs[:session.posargs.index("--")] if "--" in session.posargs else session.posargs
    # A red cell comes with cuDNN's own reason: each failing case re-run with its log on (--explain).
    explain = () if any(a.startswith("--explain") for a in run_options) else ("--explain",)
    run_cells(session, *explain, strict=False, success_codes=[0, 4])
    write_report(session, [])  # the run just made: `convmatrix run` marked it as the latest


@nox.session(python="3.11", venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The project's own tests (pass pytest options after --, e.g. -m 'not slow')."""
    session.install("-e", ".[test]", "-r", "tests/requirements.txt")
    session.run("pytest", *session.posargs)


@nox.session(python="3.11", venv_backend="venv")
def properties(session: nox.Session) -> None:
    """The property tests (marked `properties`, generators in tests/strategies.py) with the long
    Hypothesis profile: many times the examples the default test run draws, random each time."""
    session.install("-e", ".[test]", "-r", "tests/requirements.txt")
    session.run("pytest", "tests", "-m", "properties", "--hypothesis-profile", "long", "-n", "auto",
                "--hypothesis-show-statistics", *session.posargs)


@nox.session(python="3.11", venv_backend="venv")
def lint(session: nox.Session) -> None:
    """ruff, and mypy --strict over src, noxfile.py, bench and tests (pyproject.toml), then suites/
    on its own (its conftest.py is not the tests' one); mypy reads torch's and pytest's types."""
    session.install("-e", ".[test]", "-r", "tests/requirements.txt", "ruff", "mypy", "types-tabulate")
    session.run("ruff", "check", "src", "tests", "suites", "bench", "noxfile.py")
    session.run("mypy")
    session.run("mypy", "--strict", "suites")
