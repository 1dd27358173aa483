"""One orchestration for every lane: which cells run here, their targets (a GPU generation
each, or the CPU), --resume, a fresh results directory per run, preparing the cell, running the
suite, accounting for crashes, the blocking re-run, and recording cells that cannot run.

Cells run concurrently: each GPU generation's pool (pool.py) runs one cell per GPU at once, the
CPU `--jobs N`; environments are prepared ahead of the runs (ahead.py). The main thread only
schedules and waits, so that SIGTERM and SIGINT, which Python delivers to it alone, are taken
there: every cell then running is stopped (interrupts.stop_all) and recorded as cut short, each
by its own worker, before the one line is said.

`convmatrix run` calls it; the nox sessions call `convmatrix run`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from convmatrix import gpus, popen
from convmatrix.errors import BadInput, ConvmatrixError, InfrastructureError
from convmatrix.interrupts import Interrupted, held, raise_if_stopped, stop_all
from convmatrix.matrix import knobs, stacks
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.parse import Matrix
from convmatrix.results import infra, plans, rundir
from convmatrix.run import ahead, cases, explain, lanes, options, outages, pool, progress, reuse, runner
from convmatrix.run.lanes import Lane, Log, Prepared, SuiteRun

POLL_S = 0.2  # how often the main thread wakes while it waits (a signal is handled at once anyway)
# --audit-only: the suite's node ids that run (the library audit case alone; suites/test_audit.py).
AUDIT_ONLY = (f"{runner.SUITE_DIR.name}/test_audit.py",)


@dataclass(kw_only=True)
class Outcome:
    ran: list[str] = field(default_factory=list)  # cell ids run
    kept: list[str] = field(default_factory=list)  # complete and kept (--resume)
    skipped: list[str] = field(default_factory=list)  # cannot run here (not strict): why
    failed: list[str] = field(default_factory=list)  # could not run, recorded: why
    busy: list[str] = field(default_factory=list)  # held by another run into the same --out: why
    not_tried: list[str] = field(default_factory=list)  # cell ids not tried: what they need was found down


def pool_specs(opts: options.RunOptions, log: Log) -> list[pool.Spec]:
    """The pools of this runner: one per GPU key among the selected devices (identical GPUs, or
    identical MIG slices, give one result per cell, not one each into the same directory); one per
    device with --every-gpu; --jobs slots on the CPU when the runner has no GPU."""
    found = gpus.discover()
    chosen = gpus.select(found, opts.gpus)
    if opts.gpus and not chosen:
        listed = ", ".join(g.selector for g in found) or "none"
        raise BadInput(f"run options: --gpus {opts.gpus}: no such GPU on this runner (nvidia-smi lists: {listed})")
    for note in dict.fromkeys(g.note for g in chosen if g.note):
        log(note)
    if chosen and opts.jobs > 1:
        log(f"--jobs {opts.jobs}: ignored on a runner with GPUs (one cell runs on each GPU at once)")
    return pool.specs(chosen, every_gpu=opts.every_gpu, jobs=opts.jobs)


def targets(cell: Cell, opts: options.RunOptions, specs: Sequence[pool.Spec] | None = None) -> list[runner.Target]:
    """A cell's target in each pool (its GPU is the pool's first until a slot is assigned)."""
    if specs is None:
        specs = pool_specs(opts, lambda line: None)
    return [runner.Target(cell=cell, gpu=s.slots[0].gpu, out=opts.out, per_device=s.per_device, host=opts.host)
            for s in specs]


@dataclass(frozen=True, kw_only=True)
class Ready:
    """A prepare's end: the cell's environment, or why it is not run here (not strict)."""

    prepared: Prepared | None = None
    skipped: str | None = None


@dataclass(frozen=True, kw_only=True)
class Job:
    """One cell on its way: the targets it still has to run, and its lane."""

    cell: Cell
    lane: Lane
    todo: list[runner.Target]


@dataclass(kw_only=True)
class Ended:
    """How a target's run ended, as its worker saw it."""

    target: runner.Target
    slot: str
    seconds: float
    interrupted: Interrupted | None = None
    error: ConvmatrixError | None = None


def run(matrix: Matrix, cells: Sequence[Cell], opts: options.RunOptions, log: Log, *, strict: bool,
        selection: dict[str, Any] | None = None) -> Outcome:
    """Run these cells of the matrix (this runner's shard of them, the control in every shard),
    after writing the plan: every cell and target this run means to cover, so the report can tell
    a cell that did not run from one never asked for. strict (lanes asked for by name): a cell
    that cannot run here is recorded INVALID and the run fails; otherwise it is recorded as not
    run, with its reason. A cell whose set-up fails is always recorded, and the run goes on with
    the others before it fails (InfrastructureError, exit 4). selection: the narrowing options
    (--lane, --cell) the cells came from, which name the plan."""
    # Case files are checked before anything is written (a bad field: exit 2, one line each).
    opts, files = cases.with_files(opts, matrix.cases)
    opts = replace(opts, case_files=tuple(f.record() for f in files))
    said = threading.Lock()

    def say(line: str) -> None:  # workers log too: whole lines, one at a time
        with said:
            log(line)

    every = [c.id for c in matrix.cells]
    control = matrix.control.id if matrix.control else None
    mine = [c for c in cells if options.in_shard(c.id, every, opts.shard, control)]
    specs = pool_specs(opts, say)
    wanted = [k for k in opts.expect_gpus if k != gpus.CPU_KEY]
    if wanted and specs[0].slots[0].gpu is None:
        raise InfrastructureError(f"--expect-gpu {','.join(wanted)}: this runner has no GPU (nvidia-smi is missing, "
                                  "lists none, or only GPUs in MIG mode without a MIG device); not running on the "
                                  "CPU instead")
    refuse_cpu(matrix, mine, opts, specs)
    options.mark_latest(opts.out)
    write_plan(matrix, mine, opts, specs, selection or {})
    outcome = Outcome()
    outages.begin()
    Scheduler(matrix, opts, say, specs=specs, strict=strict, outcome=outcome).run(mine)
    say_not_tried(outcome, say)
    if outcome.busy:
        more = f" (and {len(outcome.busy) - 1} more)" if len(outcome.busy) > 1 else ""
        raise BadInput(f"{outcome.busy[0]}{more}")
    if outcome.failed:
        raise InfrastructureError(f"{len(outcome.failed)} cell(s) could not run here: {outcome.failed[0]}")
    return outcome


def refuse_cpu(matrix: Matrix, cells: Sequence[Cell], opts: options.RunOptions, specs: Sequence[pool.Spec]) -> None:
    """No CUDA stacks on a CPU runner by accident: their suite would run on the CPU and come out ok,
    which says nothing of cuDNN. Refused (bad input, exit 2, before anything is written) unless the
    matrix (allow_cpu = true) or the run (--allow-cpu, $CONVMATRIX_ALLOW_CPU=1) says it is meant."""
    refused = options.cpu_refusal(matrix, cells, allow_cpu=opts.allow_cpu,
                                  has_gpu=any(s.slots[0].gpu is not None for s in specs))
    if refused:
        raise BadInput(refused)


def say_not_tried(outcome: Outcome, log: Log) -> None:
    """The one line of fail fast: which outage was found once, and how many cells it spared trying."""
    found = outages.found()
    if not outcome.not_tried or not found:
        return
    first = found[0]
    shown = ", ".join(outcome.not_tried[:3]) + (f" and {len(outcome.not_tried) - 3} more"
                                                if len(outcome.not_tried) > 3 else "")
    log(f"{first.cause.cause}, found once by {first.cell} ({first.cause.line}): {len(outcome.not_tried)} other "
        f"cell(s) that need the {first.cause.shared} recorded not run with this cause, not tried: {shown}")


def write_plan(matrix: Matrix, cells: Sequence[Cell], opts: options.RunOptions, specs: Sequence[pool.Spec],
               selection: dict[str, Any]) -> None:
    """<run>/plans/<host>-<digest>.json: each cell on each of this runner's targets, and on each
    expected GPU key it lacks (those are not-run on this host unless a result appears)."""
    here = {s.key for s in specs}
    expected = []
    for cell in cells:
        optional = cell.id in matrix.optional
        keys = [t.key for t in targets(cell, opts, specs)] + [k for k in opts.expect_gpus if k not in here]
        expected += [plans.Expected(cell=cell.id, gpu_key=key, host=opts.host, optional=optional, lane=cell.lane,
                                    requested=cell.values()) for key in keys]
    chosen = {"matrix": str(matrix.path), "lanes": sorted(selection.get("lanes", [])),
              "cells": sorted(selection.get("cells", [])), "shard": list(opts.shard) if opts.shard else None,
              **({"audit_only": True} if opts.audit_only else {})}
    plans.write(opts.out, host=opts.host, selection=chosen, fleet_gpus=matrix.fleet_gpus, expected=expected)


class Scheduler:
    """The main thread's side of a run: hands cells to the preparer, prepared targets to their
    pools, says how far the run is, and on an interrupt stops and accounts for everything."""

    def __init__(self, matrix: Matrix, opts: options.RunOptions, log: Log, *, specs: list[pool.Spec],
                 strict: bool, outcome: Outcome) -> None:
        self.matrix, self.opts, self.log, self.specs = matrix, opts, log, specs
        self.strict, self.outcome = strict, outcome
        self.slots = sum(len(s.slots) for s in specs)
        self.threads = pool.threads_per_slot(self.slots)
        self.driver = gpus.driver() if specs[0].slots[0].gpu is not None else "none"
        self.busy = 0  # targets prepared and not yet ended: waiting for a slot or running
        self.guard = threading.Lock()
        self.progress: progress.Progress = progress.Plain(log)  # run() picks the live line where it can
        self.preparing: dict[Future[Ready], Job] = {}
        self.running: dict[Future[Ended], runner.Target] = {}
        self.ends: list[Ended] = []

    def slot_free(self) -> bool:
        with self.guard:
            return self.busy < self.slots

    def run(self, cells: Sequence[Cell]) -> None:
        jobs = [job for job in (self.job(cell) for cell in cells) if job is not None]
        total = sum(len(j.todo) for j in jobs)
        # One cell at a time with nothing prepared beside it: its output can go to the terminal too.
        alone = self.slots == 1 and (len(jobs) <= 1 or self.opts.prepare_ahead == 0)
        limits = ahead.Limits(builds=self.opts.prepare_ahead, disk_gb=self.opts.prepare_disk_gb,
                              disk_paths=ahead.build_paths(),
                              engine_name=next((c.engine for c in cells if c.engine), "docker"))
        self.progress = progress.choose(self.log, streaming=alone)
        if isinstance(self.progress, progress.LiveLine):
            self.log = self.progress.say  # every line above the live one, never through it
        preparer = ahead.Preparer(limits, self.slot_free, self.log)
        pools = {s.key: pool.Pool(s) for s in self.specs}
        if self.slots > 1 or len(jobs) > 1:
            self.log(f"{len(jobs)} cell(s), {total} run(s) on {self.describe_slots()}; "
                     f"each cell's output in {self.opts.out}/<cell>@<gpu>/log.txt")
        self.progress.begin(total, self.slots)
        try:
            with popen.quiet(not alone):
                for job in jobs:
                    with held():
                        self.preparing[preparer.submit(job.cell, self.preparer_of(job))] = job
                self.drive(pools)
        except Interrupted as exc:
            stop_all(exc.signum)
            preparer.shutdown(wait=False)
            for each in pools.values():
                each.shutdown(cancel=True)  # every run started has ended, and recorded itself
            self.account_for(exc, preparer.active)
            raise
        finally:
            preparer.shutdown(wait=True)
            for each in pools.values():
                each.shutdown()
            self.progress.close()

    def describe_slots(self) -> str:
        return ", ".join(f"{s.key} ({len(s.slots)} at once)" for s in self.specs)

    def job(self, cell: Cell) -> Job | None:
        todo = []
        too_old = stacks.driver_too_old(self.driver, cell.cuda) if cell.cuda else None
        for target in targets(cell, self.opts, self.specs):
            with contextlib.suppress(rundir.Busy), rundir.held_lock(target.final_dir, wait=False):
                rundir.recover(target.final_dir)  # not while another writer is between its renames
            # An audit-only result is never kept: it ran one case of the cell (rundir.audit_only).
            if self.opts.resume and rundir.is_complete(target.final_dir) and not rundir.audit_only(target.final_dir):
                self.log(f"{target.final_dir}: complete, kept (--resume)")
                self.outcome.kept.append(cell.id)
            elif too_old and target.gpu is not None:
                # Known before running: this runner's driver cannot run the stack's CUDA. A fact
                # about the runner, recorded as such (unsupported), never a regression.
                record_not_run(target, too_old, self.matrix, field="unsupported")
                self.log(f"{cell.id}@{target.key}: unsupported here: {too_old}; recorded in {self.opts.out}")
                self.outcome.skipped.append(f"{cell.id}: unsupported: {too_old}")
            else:
                todo.append(target)
        return Job(cell=cell, lane=lanes.lane(cell.lane), todo=todo) if todo else None

    def preparer_of(self, job: Job) -> Callable[[], Ready]:
        def prepare() -> Ready:
            problem = job.lane.problem(job.cell)
            if problem is not None and not self.strict:
                return Ready(skipped=problem)
            if problem is not None:
                raise InfrastructureError(f"not run: {problem}")
            try:
                return Ready(prepared=job.lane.prepare(job.cell, self.matrix, self.log))
            except outages.NotTried:
                raise
            except InfrastructureError as exc:
                # Its cause, from the first decisive line of the log it names; a cause the other
                # cells share (a dead index) is noted here, in the preparing thread, before the
                # next cell's preparing can start: that one is then not tried.
                exc.cause = infra.classify_log(Path(exc.log) if exc.log else None, str(exc))
                outages.note(job.cell.id, exc.cause)
                raise
        return prepare

    def drive(self, pools: dict[str, pool.Pool]) -> None:
        while self.preparing or self.running:
            futures: list[Future[Any]] = [*self.preparing, *self.running]
            wait(futures, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for prepare in [f for f in self.preparing if f.done()]:
                self.prepared(self.preparing.pop(prepare), prepare, pools)
            for running in [f for f in self.running if f.done()]:
                self.running.pop(running)
                self.ended(running.result())

    def prepared(self, job: Job, future: Future[Ready], pools: dict[str, pool.Pool]) -> None:
        cell = job.cell
        try:
            ready = future.result()
        except outages.NotTried as exc:
            # What it needs was found down by an earlier cell: recorded not run with that cause, and
            # said once for all such cells at the end (say_not_tried), not a line each.
            for target in job.todo:
                if not rundir.is_complete(target.final_dir):
                    record_not_run(target, str(exc).removeprefix(f"{cell.id}: "), self.matrix,
                                   cause=exc.outage.cause)
            self.outcome.not_tried.append(cell.id)
            self.outcome.failed.append(str(exc))
            self.progress.add(-len(job.todo))
            return
        except ConvmatrixError as exc:
            found = getattr(exc, "cause", None)  # classified in preparer_of (an InfrastructureError's)
            found = found if isinstance(found, infra.RootCause) else None
            for target in job.todo:
                if not rundir.is_complete(target.final_dir):  # a finished result outweighs a failed retry
                    record_setup_failure(target, str(exc), self.matrix, cause=found)
            # A lane's error may already open with the cell's id (a build or install names its cell).
            said = str(exc) if str(exc).startswith(f"{cell.id}: ") else f"{cell.id}: {exc}"
            self.log(f"{said}; recorded in {self.opts.out}")
            self.outcome.failed.append(said)
            self.progress.add(-len(job.todo))  # runs that will not happen leave the total
            return
        if ready.prepared is None:
            for target in job.todo:
                if not rundir.is_complete(target.final_dir):  # a finished result outweighs a skipped retry
                    record_not_run(target, ready.skipped or "", self.matrix)
            self.log(f"{cell.id}: not run here: {ready.skipped}; recorded in {self.opts.out}")
            self.outcome.skipped.append(f"{cell.id}: {ready.skipped}")
            self.progress.add(-len(job.todo))  # runs that will not happen leave the total
            return
        self.outcome.ran.append(cell.id)
        for target in job.todo:
            with self.guard:
                self.busy += 1
            work = self.worker(job.lane, ready.prepared, target)
            with held():  # a run started is a run accounted for, whenever a signal comes
                self.running[pools[target.key].submit(work)] = target

    def worker(self, lane: Lane, prepared: Prepared, target: runner.Target) -> Callable[[pool.Slot], Ended]:
        def work(slot: pool.Slot) -> Ended:
            placed = replace(target, gpu=slot.gpu)
            env = {"OMP_NUM_THREADS": str(self.threads)} if self.threads else {}
            started = time.monotonic()
            ended = Ended(target=placed, slot=slot.name, seconds=0.0)
            self.progress.started(f"{placed.cell.id}@{placed.key}", slot.name)
            try:
                run_target(lane, prepared, self.matrix, placed, self.opts, self.log, env=env, driver=self.driver)
            except Interrupted as exc:
                ended.interrupted = exc
            except ConvmatrixError as exc:
                ended.error = exc
            except OSError as exc:  # a full disk, a directory gone: this run's failure, not the harness's
                ended.error = InfrastructureError(f"{exc.filename or placed.final_dir}: {exc.strerror or exc}")
            finally:
                ended.seconds = time.monotonic() - started
                with self.guard:
                    self.busy -= 1
                    self.ends.append(ended)  # where an interrupt finds it, however the main thread stood
            return ended
        return work

    def ended(self, ended: Ended) -> None:
        where = f"{ended.target.cell.id}@{ended.target.key}"
        if isinstance(ended.error, rundir.Busy):
            self.log(f"{where}: {ended.error}")
            self.outcome.busy.append(str(ended.error))
        elif ended.error is not None:
            self.log(f"{where}: {ended.error}")
            self.outcome.failed.append(f"{where}: {ended.error}")
        self.progress.finished(where, ended.slot, ended.seconds)

    def account_for(self, exc: Interrupted, preparing: Sequence[str]) -> None:
        """Say what became of the runs the interrupt cut short, in the one line (a single cell's
        line is the one a sequential run says)."""
        with self.guard:
            recorded = [e.interrupted for e in self.ends if e.interrupted and e.interrupted.recorded_in]
        if len(recorded) == 1:
            only = recorded[0]
            exc.cell, exc.detail, exc.recorded_in = only.cell, only.detail, only.recorded_in
        elif recorded:
            exc.cell = ", ".join(sorted(i.cell or "?" for i in recorded))
            exc.detail = "; ".join(sorted({i.detail for i in recorded if i.detail}))
            exc.recorded_in, exc.runs = self.opts.out, len(recorded)
        else:
            exc.cell = exc.cell or (preparing[0] if preparing else None)


def run_target(lane: Lane, prepared: Prepared, matrix: Matrix, target: runner.Target,
               opts: options.RunOptions, log: Log, *, env: dict[str, str] | None = None,
               driver: str = "none") -> None:
    # An audit-only run is neither restored from the reuse store nor saved into it: it is one case.
    key = None if opts.audit_only else reuse.key(target, prepared.lock, driver=driver,
                                                 suite_args=suite_args(target.cell, opts),
                                                 blocking=opts.rerun_blocking, explain=opts.explain)
    with runner.fresh(target, wait=target.cell == matrix.control) as staged:
        if opts.reuse_results and key and reuse.restore(key, staged.results_dir, host=target.host):
            log(f"{target.cell.id}: reused the stored result of the same environment, suite, driver and GPU "
                f"(--reuse-results)")
        else:
            run_attempts(lane, prepared, matrix, staged, opts, log, env=env or {})
            if key and rundir.is_complete(staged.results_dir):
                reuse.save(key, staged.results_dir)
    log(f"{target.cell.id}: results in {target.final_dir}")


def run_attempts(lane: Lane, prepared: Prepared, matrix: Matrix, staged: runner.Target, opts: options.RunOptions,
                 log: Log, *, env: dict[str, str]) -> None:
    """The cell's suite, and with --retries N, again (up to N times) while what ended an attempt is
    an infrastructure cause a retry can fix (runner.attempt_cause: the harness's own crash lines and
    exit, never a test's failure). Each earlier attempt is set aside whole in attempts/<n>/ and
    named in the last one's cell.json (`attempts`); the cell's directory holds the last."""
    earlier: list[dict[str, Any]] = []
    for attempt in range(1, opts.retries + 2):
        run_suite(lane, prepared, matrix, staged, opts, log, env=env, attempts=earlier)
        cause = runner.attempt_cause(staged.results_dir) if attempt <= opts.retries else None
        if cause is None or not cause.retryable:
            return
        counts = runner.statuses(staged.results_dir)
        kept = rundir.set_aside(staged.results_dir, attempt)
        earlier.append({"attempt": attempt, "path": kept, "cause": cause.record(), "counts": counts})
        log(f"{staged.cell.id}: attempt {attempt} ended by {cause.cause} ({cause.line}): kept in {kept}/, "
            f"running it again (attempt {attempt + 1} of at most {opts.retries + 1}, --retries)")


def run_suite(lane: Lane, prepared: Prepared, matrix: Matrix, staged: runner.Target, opts: options.RunOptions,
              log: Log, *, env: dict[str, str], attempts: Sequence[dict[str, Any]] = ()) -> None:
    meta = runner.write_cell_json(staged, python=prepared.python, control=staged.cell == matrix.control,
                           extra={"matrix": str(matrix.path), **prepared.record,
                                  **({"attempts": list(attempts)} if attempts else {}),
                                  **({"audit_only": True} if opts.audit_only else {}),
                                  **({"cases": list(opts.case_files)} if opts.case_files else {}),
                                  **({"expected_skips": skips} if (skips := matrix.skips_for(staged.cell.id)) else {})})
    try:
        code = run_continuing(lane, prepared, SuiteRun(target=staged, args=suite_args(staged.cell, opts), env=env,
                                                       select=AUDIT_ONLY if opts.audit_only else ()), log)
        for line in runner.finish(staged, code, meta):
            log(line)
        if opts.rerun_blocking:
            rerun_blocking(lane, prepared, staged, opts, log, env=env)
        if opts.explain:
            explain.explain(lane, prepared, staged, suite_args(staged.cell, opts), opts.explain, log,
                            run_continuing, env=env)
    except Interrupted as exc:
        # The suite was stopped mid-run: each case it had in flight becomes a `crashed` line
        # naming the signal, and cell.json records the run as ended by it (exit -signal: not
        # complete, so the report shows it INVALID and --resume runs it again). The partial
        # directory stays beside whatever result the cell had before.
        runner.finish(staged, -exc.signum, meta)
        exc.recorded_in = staged.results_dir
        exc.cell = staged.cell.id
        raise


def run_continuing(lane: Lane, prepared: Prepared, run: SuiteRun, log: Log) -> int:
    """Run the suite; while its process ends early (a case crashed it, hung past its timeout or
    hit a sticky CUDA error), record the case in flight and run the rest in a fresh process
    (--continue-run: the suite skips what already has a line). Each round must record at least
    one more case, so a process that dies before any case (at collection) ends the loop. Cases
    share one process until one of them kills it: no interpreter is paid for in advance."""
    code = lane.run(prepared, run, log)
    raise_if_stopped()  # a lane that ended without noticing the interrupt: its run is still cut short
    lines = 0
    base = runner.within(run.target, run.out)
    while runner.ended_early(run.out, base):
        crashed = runner.record_crashes(run.target, code, results_dir=run.out)
        recorded = runner.line_count(run.out, base)
        if recorded <= lines:
            break
        lines = recorded
        where = f" in {', '.join(crashed)}" if crashed else ""
        log(f"{run.target.cell.id}: the suite process ended early ({runner.describe_exit(code)}{where}); "
            "the rest of its cases go on in a fresh one")
        code = lane.run(prepared, replace(run, args=(*run.args, "--continue-run")), log)
        raise_if_stopped()
    return code


def rerun_blocking(lane: Lane, prepared: Prepared, target: runner.Target, opts: options.RunOptions,
                   log: Log, *, env: dict[str, str] | None = None) -> None:
    """Re-run the failing cases with CUDA_LAUNCH_BLOCKING=1 into <results>/blocking/, so that an
    asynchronous CUDA error is reported at the call that caused it."""
    select = runner.failing_nodeids(target.results_dir)
    if not select:
        return
    left = rundir.claim_dir(target.results_dir / rundir.BLOCKING, target.results_dir)
    if left:
        log(f"{target.cell.id}: {rundir.BLOCKING}/ was {left} (the suite left it): replaced by a folder, "
            "never followed")
    blocking = SuiteRun(target=target, args=suite_args(target.cell, opts), select=select,
                        results_dir=target.results_dir / rundir.BLOCKING,
                        env={**(env or {}), "CUDA_LAUNCH_BLOCKING": "1"})
    code = run_continuing(lane, prepared, blocking, log)
    runner.record_crashes(target, code, results_dir=blocking.out)
    log(f"{target.cell.id}: failing cases re-run with CUDA_LAUNCH_BLOCKING=1 in {rundir.BLOCKING}/")


def suite_args(cell: Cell, opts: options.RunOptions) -> tuple[str, ...]:
    """The user's suite options, then the cell's knob set (`+pad8`: --pad-channels 8): last, so
    that the set the cell is named after is the one that runs (pytest keeps an option's last value)."""
    return (*opts.suite_args, *knobs.suite_args(cell.knobs))


def record_not_run(target: runner.Target, reason: str, matrix: Matrix, *, field: str = "not_run",
                   cause: infra.RootCause | None = None) -> None:
    """A planned cell this runner cannot run (no torch for the host lane, no container engine; with
    field "unsupported", a driver older than the stack's CUDA needs): a results directory holding
    its cell.json with the reason, so every format shows it (NOT RUN, greyed when the matrix made
    it optional; UNSUPPORTED) instead of leaving it out."""
    with contextlib.suppress(rundir.Busy), runner.fresh(target) as staged:  # busy: its writer records it
        runner.write_cell_json(staged, python="", control=target.cell == matrix.control,
                               extra={"matrix": str(matrix.path), field: reason,
                                      "optional": target.cell.id in matrix.optional, "ended": rundir.records.now(),
                                      **({"cause": cause.record()} if cause else {})})
        rundir.write_whole(staged.results_dir / rundir.LOG, [f"convmatrix: not run here: {reason}\n"])


def record_setup_failure(target: runner.Target, reason: str, matrix: Matrix,
                         cause: infra.RootCause | None = None) -> None:
    """A cell that never reached the suite still gets a results directory, so the report shows
    it (INVALID, with the reason, and its cause: the first decisive line of its install, build or
    engine log, results/infra.py); it replaces whatever an earlier attempt left, as any rerun does."""
    with contextlib.suppress(rundir.Busy), runner.fresh(target) as staged:  # busy: its writer records it
        meta = runner.write_cell_json(staged, python="", control=target.cell == matrix.control,
                                      extra={"matrix": str(matrix.path), "error": reason,
                                             **({"cause": cause.record()} if cause else {})})
        rundir.write_whole(staged.results_dir / rundir.LOG, [f"convmatrix: {reason}\n"])
        runner.finish(staged, 255, meta)
