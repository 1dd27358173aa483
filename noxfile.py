"""convmatrix's nox sessions: thin wrappers; the work lives in src/convmatrix (see README.md).

The matrix comes from $CONVMATRIX_MATRIX (default: matrix/default.toml); run options go after
`--`: --out DIR, --shard I/N, --resume, --gpus 0,1, --every-gpu, --jobs N, --prepare-ahead N,
--prepare-disk GB, --reuse-results, and suite options after a second `--`. A broken matrix fails
only the sessions that need it: `nox -s tests`, `lint`,
`report` and `nox -l` still work, so the tool that would tell you what is wrong still runs.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))

from convmatrix import gpus
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
LOCKS = "requirements"  # the lock of this repository's own runs (requirements/lock.py)


def the_matrix(session: nox.Session) -> Matrix:
    """The loaded matrix; a session that needs a broken one ends with its one line."""
    if MATRIX is None:
        session.error(MATRIX_ERROR or f"convmatrix: {MATRIX_FILE}: not loaded")
    assert MATRIX is not None
    return MATRIX


def harness(session: nox.Session) -> str:
    """The convmatrix command from one venv that every lane session shares (.nox/harness), made or
    refreshed only when pyproject.toml or its lock (requirements/harness.txt) changed: a lane
    session installs nothing per cell. Made under a lock: two sessions started at once (the tests
    run nox in parallel) would otherwise build it over each other."""
    venv = Path(".nox") / "harness"
    stamp = venv / "installed-from"
    wanted = Path("pyproject.toml").read_text() + Path(LOCKS, "harness.txt").read_text()
    Path(".nox").mkdir(exist_ok=True)
    with open(Path(".nox") / "harness.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text() != wanted:
            python = str(venv / "bin" / "python")
            # The locked packages, then the checkout itself with none of its own (--no-deps),
            # built by the lock's setuptools (--no-build-isolation): nothing floats.
            uv = shutil.which("uv")
            if uv:
                env = {"UV_NATIVE_TLS": "1"}
                session.run(uv, "venv", "--quiet", "--allow-existing", str(venv), external=True)
                session.run(uv, "pip", "install", "--quiet", "--python", python, "-r", f"{LOCKS}/harness.txt",
                            external=True, env=env)
                session.run(uv, "pip", "install", "--quiet", "--python", python, "--no-deps", "--no-build-isolation",
                            "-e", ".", external=True, env=env)
            else:
                session.run(sys.executable, "-m", "venv", str(venv), external=True)
                session.run(python, "-m", "pip", "install", "--quiet", "-r", f"{LOCKS}/harness.txt", external=True)
                session.run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", ".",
                            external=True)
            stamp.write_text(wanted)
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
def audit(session: nox.Session) -> None:
    """A CPU gate for images: every cell's CUDA library audit alone (`convmatrix run --audit-only`,
    no GPU needed), then its report; nothing is recorded into the history."""
    try:
        out = options.parse(["--audit-only", *session.posargs]).out
    except BadInput as exc:
        session.error(f"convmatrix: {exc}")
    run_cells(session, "--audit-only", "--out", str(out), strict=False, success_codes=[0, 4])
    write_report(session, [str(out)])


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


def write_report(session: nox.Session, paths: list[str], *, record: bool = False) -> None:
    try:
        paths = paths or [str(options.latest())]
    except BadInput as exc:
        session.error(f"convmatrix: {exc}")
    convmatrix = harness(session)
    run_dir = Path(paths[0])
    history = recorded(session, convmatrix, paths) if record else ()
    for fmt, name in rundir.REPORT_FILES:
        # Written whatever the verdict; the text report below decides the exit status.
        session.run(convmatrix, "report", *paths, *history, "--format", fmt, "-o", str(run_dir / name),
                    "--fail-on", "never", success_codes=[0, 2, 3], silent=True, external=True)
    session.run(convmatrix, "report", *paths, *history, "--format", "text", *gate(session, history), external=True)


def gate(session: nox.Session, history: tuple[str, ...]) -> tuple[str, ...]:
    """$CONVMATRIX_FAIL_ON: the text report's --fail-on, the nightly's exit (regression by default;
    `first-red` fails only on what went red tonight for the first time: docs/sessions.md). Without
    a history to judge first-red against, the night falls back to regression, and says so."""
    chosen = os.environ.get("CONVMATRIX_FAIL_ON", "").strip()
    if not chosen:
        return ()
    # A comma-separated list passes through as it is (`regression,fallback`: docs/contracts.md).
    named = [p.strip() for p in chosen.split(",") if p.strip()]
    if "first-red" in named and not history:
        rest = ",".join(p for p in named if p != "first-red") or "regression"
        session.log("convmatrix: CONVMATRIX_FAIL_ON=first-red needs the history (not recorded tonight): "
                    f"failing on {rest} instead")
        return ("--fail-on", rest)
    return ("--fail-on", ",".join(named))


def recorded(session: nox.Session, convmatrix: str, paths: list[str]) -> tuple[str, ...]:
    """The run recorded into the history database (`convmatrix record`: $CONVMATRIX_HISTORY, else
    history.sqlite in $CONVMATRIX_HOME), unless CONVMATRIX_RECORD=0; then the reports are marked
    against it (--history default). A history it cannot use is its one line, and the reports are
    made without it: the night's verdicts are never lost to the database."""
    if os.environ.get("CONVMATRIX_RECORD", "1") == "0":
        return ()
    said = session.run(convmatrix, "record", *paths, success_codes=[0, 2], silent=True, external=True)
    said = said.strip() if isinstance(said, str) else ""
    session.log(said or "convmatrix record: no output")
    return ("--history", "default") if said.startswith("recorded run") else ()


@nox.session(python=False)
def nightly(session: nox.Session) -> None:
    """The main job: every cell this machine can run, recorded into the history database, then the
    report marked against it (whatever the run's end: a cell that failed to set up is in the
    report as INVALID, and that fails it). CONVMATRIX_RECORD=0 records nothing;
    CONVMATRIX_FAIL_ON=first-red fails only on what went red for the first time."""
    session.log(f"nightly: running {MATRIX_FILE} (set CONVMATRIX_MATRIX for another)")
    if "--reuse-results" in session.posargs:
        # A nightly's results come from that night: reuse is for fix-proof and upgrade runs.
        session.error("convmatrix: --reuse-results is not for the nightly; run the lane sessions with it")
    run_options = session.posargs[:session.posargs.index("--")] if "--" in session.posargs else session.posargs
    # The run directory named here, and the report made of it, not of reports/runs/LATEST: a run
    # started meanwhile on this checkout (another nightly, a lane) marks itself the latest.
    try:
        out = options.parse(session.posargs).out
    except BadInput as exc:
        session.error(f"convmatrix: {exc}")
    # No CUDA stacks on a CPU runner by accident: the one line `convmatrix run` would say, before
    # the harness is built and a 55-minute ETA is printed for runs that would test nothing of cuDNN.
    matrix = the_matrix(session)
    refused = options.cpu_refusal(matrix, matrix.cells, allow_cpu=options.allow_cpu(run_options),
                                  has_gpu=bool(gpus.discover()))
    if refused:
        session.error(f"convmatrix: {refused}")
    # A red cell comes with cuDNN's own reason: each failing case re-run with its log on (--explain).
    explain = () if any(a.startswith("--explain") for a in run_options) else ("--explain",)
    run_cells(session, *explain, "--out", str(out), strict=False, success_codes=[0, 4])
    # The run just made, recorded into the history first.
    write_report(session, [str(out)], record=True)


def install_locked(session: nox.Session, lock: str) -> None:
    """The session's venv from requirements/<lock> alone, with pip: the lock's torch is the CPU
    build (2.13.0+cpu) that pip finds on disk on this kind of machine, which uv would not see
    (requirements/lock.py says why). Then the checkout itself, with no dependency of its own and
    built by the lock's setuptools; then a check that the venv holds exactly the lock's pins."""
    session.install("-r", f"{LOCKS}/{lock}")
    session.install("--no-deps", "--no-build-isolation", "-e", ".")
    session.run("python", f"{LOCKS}/lock.py", "verify", f"{LOCKS}/{lock}")


# Both cores (or all): pytest-xdist, one worker per CPU. --dist loadgroup: the tests that share a
# machine-wide resource (the container engines, ...) carry one xdist_group and run one after
# another on one worker (tests/integration/conftest.py); every other test goes where a worker is
# free. Here and not in pyproject's addopts, which the suite's own runs may read as their config
# (see the comment there). `nox -s tests -- -n 0` runs them serially.
PARALLEL = ("-n", "auto", "--dist", "loadgroup")


@nox.session(python="3.11", venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The project's own tests, on every core (pass pytest options after --, e.g. -m 'not slow', -n 0)."""
    install_locked(session, "tests.txt")
    session.run("pytest", *PARALLEL, *session.posargs)


@nox.session(python="3.11", venv_backend="venv")
def properties(session: nox.Session) -> None:
    """The property tests (marked `properties`, generators in tests/strategies.py) with the long
    Hypothesis profile: many times the examples the default test run draws, random each time."""
    install_locked(session, "tests.txt")
    session.run("pytest", "tests", "-m", "properties", "--hypothesis-profile", "long", "-n", "auto",
                "--hypothesis-show-statistics", *session.posargs)


@nox.session(python="3.11", venv_backend="venv")
def lint(session: nox.Session) -> None:
    """ruff, and mypy --strict over src, noxfile.py, bench, requirements and tests (pyproject.toml),
    then suites/ on its own (its conftest.py is not the tests' one); mypy reads torch's and
    pytest's types. The tools' versions are the lock's (requirements/lint.txt)."""
    install_locked(session, "lint.txt")
    session.run("ruff", "check", "src", "tests", "suites", "bench", "requirements", "noxfile.py")
    session.run("mypy")
    session.run("mypy", "--strict", "suites")


@nox.session(python="3.11", venv_backend="venv")
def models(session: nox.Session) -> None:
    """Regenerate the zoo (suites/models/*.json) from the pinned model packages, in a venv of its own
    (requirements/models.txt: PyPI's CUDA torch, which records on a CPU); `-- --only NAME` for one."""
    session.install("-r", f"{LOCKS}/models.txt")
    # The checkout's own code on the path, not installed: the recorder needs none of its dependencies.
    # A recording's wall bound is 120 s by default (a hostile model must not hang a user's command);
    # these are pinned packages, and importing transformers on a busy 2-core runner alone took past
    # that (issue 50), so the zoo gets 600 s unless the caller says otherwise.
    seconds = os.environ.get("CONVMATRIX_FROM_MODEL_SECONDS", "600")
    session.run("python", "-m", "convmatrix.capture.zoo", *session.posargs,
                env={"PYTHONPATH": "src", "CONVMATRIX_FROM_MODEL_SECONDS": seconds})


@nox.session(python="3.11", venv_backend="venv")
def lock(session: nox.Session) -> None:
    """Refresh the lock (requirements/*.txt): the newest versions that pyproject.toml's ranges and
    tests/requirements.txt allow, resolved by pip on this python; review and commit the diff."""
    session.run("python", f"{LOCKS}/lock.py", "compile")
