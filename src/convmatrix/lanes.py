"""The lanes as nox session steps: host (the interpreter at hand) and baremetal (a uv venv per cell).

Imported by noxfile.py, in nox's own interpreter: stdlib and convmatrix's stdlib-only modules.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from convmatrix import gpus, install, options, rundir, runner
from convmatrix.cells import Cell
from convmatrix.errors import BadInput
from convmatrix.matrix import Matrix


class Session(Protocol):
    """The part of nox.Session the lanes use."""

    posargs: list[str]
    bin: str

    def install(self, *args: str, **kwargs: Any) -> Any: ...
    def notify(self, target: str, posargs: Sequence[str] | None = None) -> None: ...
    def log(self, *args: Any) -> None: ...
    def warn(self, *args: Any) -> None: ...
    def error(self, *args: Any) -> Any: ...
    def skip(self, *args: Any) -> Any: ...


def reports_bad_input(step: Callable[..., None]) -> Callable[..., None]:
    """A session step that ends on bad input with its one line, not a traceback."""

    @functools.wraps(step)
    def run(session: Session, *args: Any, **kwargs: Any) -> None:
        try:
            step(session, *args, **kwargs)
        except BadInput as exc:
            session.error(f"convmatrix: {exc}")

    return run


def targets(cell: Cell, opts: options.RunOptions) -> list[runner.Target]:
    """One target per GPU generation among the selected GPUs (identical GPUs give one result per
    cell, not one each, all into the same directory); one per device with --every-gpu; the CPU
    when the runner has none."""
    found = gpus.discover()
    chosen = gpus.select(found, opts.gpus)
    if opts.gpus and not chosen:
        listed = ", ".join(str(g.index) for g in found) or "none"
        raise BadInput(f"run options: --gpus {opts.gpus}: no such GPU on this runner (nvidia-smi lists: {listed})")
    if not chosen:
        return [runner.Target(cell=cell, gpu=None, out=opts.out)]
    devices = chosen if opts.every_gpu else gpus.one_per_generation(chosen)
    return [runner.Target(cell=cell, gpu=g, out=opts.out, per_device=opts.every_gpu) for g in devices]


def run_cell(
    session: Session, matrix: Matrix, python: str, opts: options.RunOptions, planned: list[runner.Target],
    *, isolate: bool = True,
) -> None:
    options.mark_latest(opts.out)
    for target in planned:
        if opts.resume and rundir.is_complete(target.final_dir):
            session.log(f"{target.final_dir}: complete, kept (--resume)")
            continue
        with runner.fresh(target) as staged:
            runner.write_cell_json(
                staged, python=python, control=target.cell == matrix.control, extra={"matrix": str(matrix.path)}
            )
            code = runner.run_suite(staged, python, opts.suite_args, isolate=isolate)
            for line in runner.finish(staged, code):
                session.warn(line)
            if opts.rerun_blocking and runner.rerun_blocking(staged, python, opts.suite_args,
                                                              isolate=isolate) is not None:
                session.log(f"{target.cell.id}: failing cases re-run with CUDA_LAUNCH_BLOCKING=1 in {rundir.BLOCKING}/")
        session.log(f"{target.cell.id}: results in {target.final_dir}")


# --- host ---------------------------------------------------------------------------------


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


@reports_bad_input
def host(session: Session, matrix: Matrix) -> None:
    opts = options.parse(session.posargs)
    python = host_python()
    problem = host_problem(python)
    if problem:
        session.error(problem)
    # The host lane installs nothing: it isolates cases only where pytest-xdist is already there.
    isolate = subprocess.run([python, "-c", "import xdist"], capture_output=True, check=False).returncode == 0
    if not isolate:
        session.warn(f"host lane: {python} has no pytest-xdist, so a crashing or hanging case ends the run")
    run_cell(session, matrix, python, opts, targets(Cell(lane="host"), opts), isolate=isolate)


# --- baremetal ----------------------------------------------------------------------------


@reports_bad_input
def baremetal(session: Session, cell: Cell, matrix: Matrix) -> None:
    from nox.command import CommandFailed  # nox is there: this runs inside a nox session

    opts = options.parse(session.posargs)
    all_ids = [c.id for c in matrix.lane("baremetal")]
    if not options.in_shard(cell.id, all_ids, opts.shard):
        session.skip(f"{cell.id} is not in shard {opts.shard}")
    planned = targets(cell, opts)
    if opts.resume and all(rundir.is_complete(t.final_dir) for t in planned):
        session.skip(f"{cell.id}: complete, kept (--resume)")
    # uv's own CA roots miss a TLS-intercepting proxy's; the system store has it.
    os.environ.setdefault("UV_NATIVE_TLS", "1")
    try:
        for step in install.steps(cell, matrix.wheelhouse):
            session.install(*step)
    except CommandFailed as exc:
        for target in planned:
            record_setup_failure(target, f"install failed: {exc}", matrix)
        session.error(f"{cell.id}: install failed ({exc}); recorded in {opts.out}")
    run_cell(session, matrix, str(Path(session.bin) / "python"), opts, planned)


def record_setup_failure(target: runner.Target, reason: str, matrix: Matrix) -> None:
    """A cell that never reached the suite still gets a results directory, so the report shows
    it; it replaces whatever an earlier attempt left, as any rerun does."""
    with runner.fresh(target) as staged:
        runner.write_cell_json(staged, python="", control=target.cell == matrix.control,
                               extra={"matrix": str(matrix.path), "error": reason})
        (staged.results_dir / rundir.LOG).write_text(f"convmatrix: {reason}\n")
        runner.finish(staged, 255)


def python_available(version: str) -> bool:
    """Whether uv finds an installed interpreter for a cell's python (no download attempted)."""
    uv = shutil.which("uv")
    if uv is None:
        return False
    found = subprocess.run(
        [uv, "python", "find", "--no-python-downloads", version], capture_output=True, text=True, check=False
    )
    return found.returncode == 0


@functools.cache
def docker_problem() -> str | None:
    """Why containers cannot run here (no client, or no engine answering), or None."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker client on this machine"
    try:
        answer = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                                text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "the docker engine did not answer within 60 s"
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["?"])[-1]
        return f"the docker engine is not reachable ({last})"
    return None


# --- whole runs ---------------------------------------------------------------------------


def forward(session: Session, out: Path) -> list[str]:
    """The posargs to hand to notified sessions, with the run directory fixed."""
    args = list(session.posargs)
    head = args[: args.index("--")] if "--" in args else args
    return args if "--out" in head else ["--out", str(out), *args]


@reports_bad_input
def fan_out(session: Session, matrix: Matrix, lanes: Sequence[str], *, strict: bool = False) -> None:
    """Queue every runnable cell of these lanes as its own nox session; say why others are not.

    strict (a lane asked for by name): a cell that cannot run here is recorded as an
    infrastructure failure in the run, so the report shows it, and the session fails.
    """
    opts = options.parse(session.posargs)
    options.mark_latest(opts.out)
    args = forward(session, opts.out)
    failed = []
    for cell in matrix.cells:
        if cell.lane not in lanes:
            continue
        reason = unrunnable(cell)
        if reason is None:
            session.notify("host" if cell.lane == "host" else cell.id, args)
            continue
        session.warn(f"{cell.id}: not run here: {reason}")
        if strict:
            failed.append(reason)
            for target in targets(cell, opts):
                if not rundir.is_complete(target.final_dir):  # never overwrite a finished result
                    record_setup_failure(target, f"not run: {reason}", matrix)
    if failed:
        session.error(f"convmatrix: {len(failed)} cell(s) could not run here: {failed[0]}")


def unrunnable(cell: Cell) -> str | None:
    if cell.lane == "host":
        return host_problem(host_python())
    if cell.lane == "container":
        return docker_problem()
    if not python_available(cell.python):
        return f"no Python {cell.python} on this machine (`uv python find {cell.python}` found none)"
    return None
