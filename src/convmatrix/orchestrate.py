"""One orchestration for every lane: which cells run here, their targets (a GPU generation
each, or the CPU), --resume, a fresh results directory per run, preparing the cell, running the
suite, accounting for crashes, the blocking re-run, and recording cells that cannot run.

`convmatrix run` calls it; the nox sessions call `convmatrix run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from convmatrix import gpus, knobs, lanes, options, rundir, runner
from convmatrix.cells import Cell
from convmatrix.errors import BadInput, ConvmatrixError, InfrastructureError
from convmatrix.interrupts import Interrupted
from convmatrix.lanes import Lane, Log, Prepared, SuiteRun
from convmatrix.matrix import Matrix


@dataclass(kw_only=True)
class Outcome:
    ran: list[str] = field(default_factory=list)  # cell ids run
    kept: list[str] = field(default_factory=list)  # complete and kept (--resume)
    skipped: list[str] = field(default_factory=list)  # cannot run here (not strict): why
    failed: list[str] = field(default_factory=list)  # could not run, recorded: why


def targets(cell: Cell, opts: options.RunOptions) -> list[runner.Target]:
    """One target per GPU generation among the selected GPUs (identical GPUs give one result per
    cell, not one each into the same directory); one per device with --every-gpu; the CPU
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


def run(matrix: Matrix, cells: Sequence[Cell], opts: options.RunOptions, log: Log, *, strict: bool) -> Outcome:
    """Run these cells of the matrix (this runner's shard of them). strict (lanes asked for by
    name): a cell that cannot run here is recorded, so the report shows it, and the run fails;
    otherwise it is skipped with its reason. A cell whose set-up fails is always recorded, and
    the run goes on with the others before it fails (InfrastructureError, exit 4)."""
    options.mark_latest(opts.out)
    every = [c.id for c in matrix.cells]
    outcome = Outcome()
    for cell in cells:
        if options.in_shard(cell.id, every, opts.shard):
            try:
                run_one(matrix, cell, opts, log, strict=strict, outcome=outcome)
            except Interrupted as exc:
                exc.cell = cell.id
                raise
    if outcome.failed:
        raise InfrastructureError(f"{len(outcome.failed)} cell(s) could not run here: {outcome.failed[0]}")
    return outcome


def run_one(matrix: Matrix, cell: Cell, opts: options.RunOptions, log: Log, *, strict: bool,
            outcome: Outcome) -> None:
    todo = []
    for target in targets(cell, opts):
        if opts.resume and rundir.is_complete(target.final_dir):
            log(f"{target.final_dir}: complete, kept (--resume)")
            outcome.kept.append(cell.id)
        else:
            todo.append(target)
    if not todo:
        return
    lane = lanes.lane(cell.lane)
    problem = lane.problem(cell)
    if problem is not None and not strict:
        log(f"{cell.id}: not run here: {problem}")
        outcome.skipped.append(f"{cell.id}: {problem}")
        return
    try:
        if problem is not None:
            raise InfrastructureError(f"not run: {problem}")
        prepared = lane.prepare(cell, matrix, log)
    except ConvmatrixError as exc:
        for target in todo:
            if not rundir.is_complete(target.final_dir):  # a finished result outweighs a failed retry
                record_setup_failure(target, str(exc), matrix)
        log(f"{cell.id}: {exc}; recorded in {opts.out}")
        outcome.failed.append(f"{cell.id}: {exc}")
        return
    for target in todo:
        run_target(lane, prepared, matrix, target, opts, log)
    outcome.ran.append(cell.id)


def run_target(lane: Lane, prepared: Prepared, matrix: Matrix, target: runner.Target,
               opts: options.RunOptions, log: Log) -> None:
    with runner.fresh(target) as staged:
        runner.write_cell_json(staged, python=prepared.python, control=target.cell == matrix.control,
                               extra={"matrix": str(matrix.path), **prepared.record})
        try:
            code = lane.run(prepared, SuiteRun(target=staged, args=suite_args(target.cell, opts)), log)
            for line in runner.finish(staged, code):
                log(line)
            if opts.rerun_blocking:
                rerun_blocking(lane, prepared, staged, opts, log)
        except Interrupted as exc:
            # The suite was stopped mid-run: each case it had in flight becomes a `crashed` line
            # naming the signal, and cell.json records the run as ended by it (exit -signal: not
            # complete, so the report shows it INVALID and --resume runs it again). The partial
            # directory stays beside whatever result the cell had before.
            runner.finish(staged, -exc.signum)
            exc.recorded_in = staged.results_dir
            raise
    log(f"{target.cell.id}: results in {target.final_dir}")


def rerun_blocking(lane: Lane, prepared: Prepared, target: runner.Target, opts: options.RunOptions,
                   log: Log) -> None:
    """Re-run the failing cases with CUDA_LAUNCH_BLOCKING=1 into <results>/blocking/, so that an
    asynchronous CUDA error is reported at the call that caused it."""
    select = runner.failing_nodeids(target.results_dir)
    if not select:
        return
    lane.run(prepared, SuiteRun(target=target, args=suite_args(target.cell, opts), select=select,
                                results_dir=target.results_dir / rundir.BLOCKING,
                                env={"CUDA_LAUNCH_BLOCKING": "1"}), log)
    log(f"{target.cell.id}: failing cases re-run with CUDA_LAUNCH_BLOCKING=1 in {rundir.BLOCKING}/")


def suite_args(cell: Cell, opts: options.RunOptions) -> tuple[str, ...]:
    """The user's suite options, then the cell's knob set (`+pad8`: --pad-channels 8): last, so
    that the set the cell is named after is the one that runs (pytest keeps an option's last value)."""
    return (*opts.suite_args, *knobs.suite_args(cell.knobs))


def record_setup_failure(target: runner.Target, reason: str, matrix: Matrix) -> None:
    """A cell that never reached the suite still gets a results directory, so the report shows
    it (INVALID, with the reason); it replaces whatever an earlier attempt left, as any rerun does."""
    with runner.fresh(target) as staged:
        runner.write_cell_json(staged, python="", control=target.cell == matrix.control,
                               extra={"matrix": str(matrix.path), "error": reason})
        (staged.results_dir / rundir.LOG).write_text(f"convmatrix: {reason}\n")
        runner.finish(staged, 255)
