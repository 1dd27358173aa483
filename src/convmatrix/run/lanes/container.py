"""The container lane: an image per cell, built when missing and reused while its inputs are
unchanged (lanes/images.py), the suite run in it through the docker SDK, least-privileged
(lanes/containers.py, the one owner of engine calls), on Docker or Podman (the cell's `engine`:
[container].engine or the run option --engine). `convmatrix build` builds ahead of a run.

It runs in the `convmatrix run` process like every lane, not as an executable of its own: the
interrupt handling (interrupts.py) and the results accounting (orchestrate.py) are the same for
every lane, and only the engine calls differ.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix import home, tree
from convmatrix.errors import BadInput
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.parse import Matrix
from convmatrix.results import rundir
from convmatrix.run import cases, outages, runner
from convmatrix.run.lanes import Log, Prepared, SuiteRun, containers, images

CELL_PYTHON = "/opt/cell/bin/python"  # where images/Dockerfile puts the cell's venv
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


class Container:
    def problem(self, cell: Cell) -> str | None:
        return containers.engine_problem(cell.engine or "docker")

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        with containers.client(cell.engine or "docker") as engine:
            image = ensure_image(engine, matrix, cell, log)
        return Prepared(python=CELL_PYTHON, record=image, lock=image["image_id"])

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        # blocking/, explain/<name>/: real folders, whatever link or file the suite left in their place.
        rundir.make_dirs(run.out, runner.within(run.target, run.out))
        with scratch(run.out) as writable:
            return self.run_in(prepared, run, log, writable)

    def run_in(self, prepared: Prepared, run: SuiteRun, log: Log, writable: Path) -> int:
        image = prepared.record
        target = run.target
        # Each case file's folder is mounted read-only, at /cases/<n>, and the suite told so.
        mounts = {folder: f"{containers.CASES_MOUNT}/{n}" for n, folder in enumerate(cases.folders(run.args))}
        args = cases.remap(run.args, mounts)
        spec = containers.RunSpec(
            image=image["image_id"] or image["image"],
            command=runner.suite_command(target, "python", args, select=run.select,
                                         results_dir=Path(containers.RESULTS_MOUNT),
                                         suite_root=Path(containers.SUITE_MOUNT)),
            results_dir=writable,
            suite_dir=runner.SUITE_DIR,
            gpu=target.gpu if runner.wants_gpu(target, run.args) else None,
            environment={"CONVMATRIX_LANE": "container", "CONVMATRIX_IMAGE_ID": image["image_id"],
                         **runner.with_results(run.env, containers.RESULTS_MOUNT)},
            readonly=mounts,
        )
        with containers.client(target.cell.engine or "docker") as engine:
            outcome = containers.run(engine, spec, run.out / "log.txt")
        if outcome.oom_killed:
            log(f"{target.cell.id}: the container was killed for lack of memory (OOM)")
        return outcome.exit_code


# What the suite writes into its results directory, and all that is copied out of the scratch
# directory the container gets instead (as plain files, bounded): its record of the stack, its
# lines, and the markers of the cases in flight (which a crash leaves for the harness).
# cuDNN's logs of an --explain re-run come back too (explain.py), bounded like the rest.
SUITE_FILES = (rundir.ENV_JSON, rundir.RESULTS, "cudnn.log", "cudnn_frontend.log")
MARKERS = "running-*.json"


@contextlib.contextmanager
def scratch(out: Path) -> Iterator[Path]:
    """The only directory a cell container may write: fresh, owned by the container's uid, holding
    the suite's own files from out (a --continue-run reads them); afterwards the plain files the
    suite writes are copied back into out (however the run ended: nothing recorded is lost) and
    the rest is dropped: no setuid binary, device, FIFO or link reaches the cell directory."""
    place = Path(tempfile.mkdtemp(prefix=f".{out.name}.scratch-", dir=out.parent))
    uid, gid = containers.cell_user()
    try:
        for name in SUITE_FILES:
            with contextlib.suppress(OSError):
                rundir.write_plain(place / name, rundir.read_plain(out / name, rundir.MAX_RESULTS, out), place)
        for path in [place, *place.iterdir()]:
            if os.getuid() == 0:
                os.chown(path, uid, gid)
        yield place
    finally:
        for path in [*(place / name for name in SUITE_FILES), *sorted(place.glob(MARKERS))]:
            with contextlib.suppress(OSError):  # absent, or not a plain file: nothing to keep
                rundir.write_plain(out / path.name, rundir.read_plain(path, rundir.MAX_RESULTS, place), out)
        with contextlib.suppress(OSError), tree.Tree.open(out) as results:
            for stale in set(p.name for p in out.glob(MARKERS)) - set(p.name for p in place.glob(MARKERS)):
                results.unlink(stale)  # a marker the suite removed when its case ended
        with contextlib.suppress(OSError), tree.Tree.open(place.parent) as parent:
            parent.rmtree(place.name)  # what the container left, however deep, never followed


# --- images: what to build, and building it ----------------------------------------------------

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
            name = containers.kind_of(engine).name
            out.append(Todo(plan=p, reason=f"not built; base {p.cell.base} is not here ({name} pull it, "
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
              wheelhouse: Path | None = None, log: Log = print) -> list[Todo]:
    """Build every missing image of the selected container cells; returns what was (to be) built."""
    engine_name = next((c.engine for c in matrix.lane("container") if c.engine), "docker")
    with containers.client(engine_name) as engine:
        work = todo(engine, plans(engine, matrix, select(matrix, globs), wheelhouse or matrix.wheelhouse))
    for item in work:
        state = "up to date" if item.reason is None else f"{'would build' if dry_run else 'building'}: {item.reason}"
        log(f"{item.plan.cell.id} -> {item.plan.tag}: {state}")
    if not dry_run:
        for item in work:
            if item.reason is not None:
                images.build(item.plan, secrets(), log, engine=engine_name)
    return work


def ensure_image(engine: Any, matrix: Matrix, cell: Cell, log: Log) -> dict[str, str]:
    """The cell's image, built first when it is missing; what cell.json records of it."""
    (plan,) = plans(engine, matrix, [cell], matrix.wheelhouse)
    # Held from before it is looked for until the run ends: `convmatrix gc` leaves it alone, here
    # and in every other home on this machine (and a gc removing it now is waited out first).
    home.hold(home.IMAGES, plan.digest)
    (item,) = todo(engine, [plan])
    if item.reason is not None:
        outages.check("registry", cell.id)  # a registry found down earlier in this run: not tried again
        log(f"{cell.id}: building {item.plan.tag}: {item.reason}")
        images.build(item.plan, secrets(), log, engine=containers.kind_of(engine).name)
    return containers.describe(engine, item.plan)
