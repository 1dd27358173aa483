"""The container lane: build what a matrix's container cells need, and run the suite in them.

`python -m convmatrix.container_lane CELL_ID [run options]` is what each `nox -s <container
cell>` session runs (in a venv with the docker SDK); `convmatrix build` calls build_all.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix import containers, images, interrupts, lanes, options, runner
from convmatrix.cells import Cell
from convmatrix.errors import BadInput
from convmatrix.matrix import Matrix, load

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def secrets() -> images.Secrets:
    """The CA bundle a TLS-intercepting proxy needs (default: the system's, which carries it)
    and an optional pip.conf with index credentials; both go in as BuildKit secrets."""
    ca = os.environ.get("CONVMATRIX_CA_BUNDLE") or (str(SYSTEM_CA) if SYSTEM_CA.exists() else "")
    pipconf = os.environ.get("CONVMATRIX_PIP_CONF", "")
    for name, value in (("CONVMATRIX_CA_BUNDLE", ca), ("CONVMATRIX_PIP_CONF", pipconf)):
        if value and not Path(value).is_file():
            raise BadInput(f"${name}: {value}: no such file")
    return images.Secrets(ca=Path(ca) if ca else None, pipconf=Path(pipconf) if pipconf else None)


def plans(engine: Any, matrix: Matrix, cells: Sequence[Cell], wheelhouse: Path | None) -> list[images.Plan]:
    bases = {c.base for c in cells}
    inputs = images.read_inputs(wheelhouse, {b: containers.image_id(engine, b) for b in bases})
    return [images.plan(c, c.flavour or "wheel", inputs) for c in cells]


@dataclass(frozen=True, kw_only=True)
class Todo:
    plan: images.Plan
    reason: str | None  # why it must be built; None: up to date


def todo(engine: Any, plan_list: list[images.Plan]) -> list[Todo]:
    built = containers.built_digests(engine)
    out = []
    for p in plan_list:
        if p.digest in built:
            out.append(Todo(plan=p, reason=None))
        elif not containers.image_id(engine, p.cell.base):
            out.append(Todo(plan=p, reason=f"not built; base {p.cell.base} is not here (docker pull it, "
                                           f"or `nox -s base-image` for convmatrix/base:bookworm)"))
        else:
            out.append(Todo(plan=p, reason="not built for these inputs (new cell, or its Dockerfile, build "
                                           "arguments, wheelhouse or base changed)"))
    return out


def select(matrix: Matrix, globs: Sequence[str]) -> list[Cell]:
    cells = [c for c in matrix.lane("container") if not globs or any(fnmatch.fnmatch(c.id, g) for g in globs)]
    if globs and not cells:
        raise BadInput(f"{matrix.path}: no container cell matches {' '.join(globs)}")
    return cells


def build_all(matrix: Matrix, globs: Sequence[str] = (), *, dry_run: bool = False,
              wheelhouse: Path | None = None, log: Callable[[str], None] = print) -> list[Todo]:
    """Build every missing image of the selected container cells; returns what was (to be) built."""
    with containers.client() as engine:
        work = todo(engine, plans(engine, matrix, select(matrix, globs), wheelhouse or matrix.wheelhouse))
    for item in work:
        state = "up to date" if item.reason is None else f"{'would build' if dry_run else 'building'}: {item.reason}"
        log(f"{item.plan.cell.id} -> {item.plan.tag}: {state}")
    if not dry_run:
        for item in work:
            if item.reason is not None:
                images.build(item.plan, secrets(), log)
    return work


def run_cell(matrix: Matrix, cell: Cell, opts: options.RunOptions, *, log: Callable[[str], None] = print) -> int:
    """Build the cell's image if needed, then run the suite in it on each target; 0 when it ran."""
    planned = lanes.targets(cell, opts)
    options.mark_latest(opts.out)
    try:
        with containers.client() as engine:
            image = ensure_image(engine, matrix, cell, log)
            for target in planned:
                if not (opts.resume and runner.is_complete(target.results_dir)):
                    run_target(engine, matrix, target, image, opts, log)
    except BadInput as exc:
        for target in planned:
            if not runner.is_complete(target.results_dir):  # a finished target keeps its results
                lanes.record_setup_failure(target, str(exc), matrix)
        raise
    return 0


def ensure_image(engine: Any, matrix: Matrix, cell: Cell, log: Callable[[str], None]) -> dict[str, str]:
    """The cell's image, built first when it is missing; what cell.json records of it."""
    (item,) = todo(engine, plans(engine, matrix, [cell], matrix.wheelhouse))
    if item.reason is not None:
        log(f"{cell.id}: building {item.plan.tag}: {item.reason}")
        images.build(item.plan, secrets(), log)
    return containers.describe(engine, item.plan)


def run_target(engine: Any, matrix: Matrix, target: runner.Target, image: dict[str, str],
               opts: options.RunOptions, log: Callable[[str], None]) -> None:
    runner.write_cell_json(target, python="/opt/cell/bin/python", control=target.cell == matrix.control,
                           extra={"matrix": str(matrix.path), **image})
    spec = containers.RunSpec(
        image=image["image_id"] or image["image"],
        command=runner.suite_command(target, "python", opts.suite_args, select=[containers.SUITE_MOUNT],
                                     results_dir=Path(containers.RESULTS_MOUNT)),
        results_dir=target.results_dir,
        suite_dir=runner.SUITE_DIR,
        gpu_index=target.gpu.index if target.gpu else None,
        environment={"CONVMATRIX_LANE": "container", "CONVMATRIX_IMAGE_ID": image["image_id"]},
    )
    try:
        outcome = containers.run(engine, spec, target.results_dir / "log.txt")
    except interrupts.Interrupted as exc:
        # The suite was killed mid-run: each case it had in flight becomes a `crashed` line
        # naming the signal, and cell.json records the run as ended by it (exit code -signal:
        # not complete, so the report does not trust it and --resume runs it again).
        runner.finish(target, -exc.signum)
        exc.recorded_in = target.results_dir
        raise
    if outcome.oom_killed:
        log(f"{target.cell.id}: the container was killed for lack of memory (OOM)")
    for line in runner.finish(target, outcome.exit_code):
        log(line)
    log(f"{target.cell.id}: results in {target.results_dir}")


def main(argv: Sequence[str] | None = None) -> int:
    """The lane for one cell. SIGTERM or SIGINT ends it promptly: its container is killed and
    removed, the run recorded as interrupted, one line says so, and the exit status is 128 +
    the signal's number (143, 130)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with interrupts.interruptible():
            die_with_parent()
            if not args:
                raise BadInput("usage: python -m convmatrix.container_lane CELL_ID [run options]")
            matrix = load(os.environ.get("CONVMATRIX_MATRIX") or "matrix/default.toml")
            return run_cell(matrix, matrix.cell(args[0]), options.parse(args[1:]))
    except BadInput as exc:
        say(f"convmatrix: {exc}")
        return exc.exit_code
    except interrupts.Interrupted as exc:
        if exc.recorded_in is None:
            say(f"convmatrix: {args[0]}: interrupted by {exc.name} before its suite ran; {exc.detail}")
        else:
            say(f"convmatrix: {args[0]}: interrupted by {exc.name}; {exc.detail}; its run is recorded "
                f"as incomplete in {exc.recorded_in} (run it again, or --resume)")
        return exc.exit_code


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """SIGTERM this process when its parent dies (Linux; best effort): a lane whose nox was
    killed alone (kill PID, or `timeout`, which signal one process) then stops its container
    too, instead of running the suite to its end unattended."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def say(line: str) -> None:
    """One line on stderr, which may be gone (nox, killed with us, read our output)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
