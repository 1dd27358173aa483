"""Bisect a stack axis: between a good cell and a bad cell of a matrix, the first published version
on one axis (cuDNN, torch, CUDA variant, base image) where the selected cases fail as the bad
cell's do.

Three parts, so the search itself is a pure function:
- plan(): the axis, and the versions between the two cells on it, from the stack facts (matrix/
  stacks.py): the cuDNN overrides the cell's torch accepts (matrix/prune.py: the pin's major, not
  older than the pin), the torch patches published for the cell's variant, the CUDA variants of
  its torch, or the base tags the caller lists. The other axes are held at the good cell's values.
- search(): the end checks (the good end passes, the bad end fails, the good end passes again),
  then a binary search over a `run_step(value) -> StepResult` callable; a step that could not be
  installed, or that neither passes nor fails as the bad end does, is left out and the search
  goes on over the rest.
- CellRunner: a step as an ordinary cell run, through run/orchestrate.py into a run directory of
  its own, from a generated matrix holding that one cell (its own control), read back by
  results.load and judged by judge().
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from convmatrix import popen, results, tomlwrite
from convmatrix.errors import BadInput, ConvmatrixError, InfrastructureError
from convmatrix.matrix import parse, stacks
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.prune import impossible
from convmatrix.matrix.values import IMAGE
from convmatrix.results import rundir
from convmatrix.run import options

AXES = ("cudnn", "torch", "cuda", "base")  # the order the default axis is picked in
SCHEMA = 1
LABELS = {"cudnn": "cuDNN", "torch": "torch", "cuda": "CUDA", "base": "base"}


class NotBisectable(ConvmatrixError):
    """The two cells cannot be bisected on the axis, for a reason known before anything runs."""

    exit_code = 1


class Outcome(StrEnum):
    PASS = "pass"  # every selected case passed
    FAIL = "fail"  # a selected case failed with the bad end's failure family
    ERROR = "error"  # it ran, and did neither (another failure, no case, another stack)
    SKIPPED = "skipped"  # it could not be installed or run here: left out of the search


@dataclass(frozen=True, kw_only=True)
class StepResult:
    outcome: Outcome
    detail: str = ""  # why, for anything but a plain pass
    seconds: float = 0.0
    path: str | None = None  # the step's run directory
    families: tuple[str, ...] = ()  # the failure families its failing cases had
    reused: bool = False  # its result was a stored one of the same stack (--reuse-results)


@dataclass(frozen=True, kw_only=True)
class Step:
    value: str
    role: str  # "good end", "bad end", "good end again", "step"
    result: StepResult


@dataclass(frozen=True, kw_only=True)
class Plan:
    axis: str
    good: Cell  # the good end: the good cell
    bad: Cell  # the bad end: the good cell with the bad cell's value on the axis
    good_cell: str  # the cell ids as given
    bad_cell: str
    values: tuple[str, ...]  # from the good end's value to the bad end's, each a published one
    held: dict[str, tuple[str, str]] = field(default_factory=dict)  # axis -> (good's value, bad's): held at good's
    left_out: tuple[tuple[str, str], ...] = ()  # (value, why) between the ends that no cell can have
    package: str = ""  # the nvidia-cudnn-cuXX package of a cuDNN bisect

    def label(self, value: str) -> str:
        """`cuDNN 9.4.0.58`, `cuDNN bundled (9.1.0.70)`, `torch 2.5.1`, `CUDA cu124`, `base <tag>`."""
        if self.axis == "cudnn" and value == "bundled":
            return f"cuDNN bundled ({pin(self.good)})"
        return f"{LABELS[self.axis]} {value}"

    def named(self, value: str) -> str:
        """The answer's spelling: `nvidia-cudnn-cu12 9.4.0.58`, `torch 2.6.0`, `cu126`, the tag."""
        if self.axis == "cudnn":
            shown = pin(self.good) + " (bundled)" if value == "bundled" else value
            return f"{self.package} {shown}"
        if self.axis == "torch":
            return f"torch {value}"
        return value

    def cell(self, value: str) -> Cell:
        if value == self.values[0]:
            return self.good
        return with_value(self.good, self.axis, value)


@dataclass(kw_only=True)
class Answer:
    plan: Plan
    steps: list[Step] = field(default_factory=list)
    first_bad: str | None = None
    last_good: str | None = None
    found: bool = False
    reason: str | None = None  # why not found (exit 1), or why an end could not be installed (exit 4)
    infrastructure: bool = False
    skipped: list[str] = field(default_factory=list)  # values left out: install failures and errors
    family: tuple[str, ...] = ()  # the bad end's failure families, what a failing step must show

    @property
    def exit_code(self) -> int:
        if self.found:
            return 0
        return InfrastructureError.exit_code if self.infrastructure else 1

    @property
    def cell_runs(self) -> int:
        return len(self.steps)


# --- the versions between --------------------------------------------------------------------

def with_value(cell: Cell, axis: str, value: str) -> Cell:
    """The cell with another value on one axis (a str field of Cell)."""
    changed: dict[str, Any] = {axis: value}
    return replace(cell, **changed)


def pin(cell: Cell) -> str:
    """The cuDNN the cell's torch wheel pins, what `bundled` loads ("" unknown)."""
    return cell.expected_cudnn() if cell.cudnn == "bundled" else replace(cell, cudnn="bundled").expected_cudnn()


def choose_axis(good: Cell, bad: Cell, axis: str | None) -> str:
    differ = [a for a in AXES if getattr(good, a) != getattr(bad, a)]
    if axis is None:
        if not differ:
            raise BadInput(f"{good.id} and {bad.id} do not differ on {', '.join(AXES)}: nothing to bisect")
        return differ[0]
    if axis not in AXES:
        raise BadInput(f"--axis {axis!r}: one of {', '.join(AXES)}")
    if axis not in differ:
        raise BadInput(f"--axis {axis}: {good.id} and {bad.id} do not differ on it "
                       f"(they differ on: {', '.join(differ) or 'none of ' + ', '.join(AXES)})")
    return axis


def plan(good: Cell, bad: Cell, *, axis: str | None = None, bases: Sequence[str] = ()) -> Plan:
    """The bisect of good against bad on one axis (BadInput for what cannot be asked)."""
    for cell, side in ((good, "--good"), (bad, "--bad")):
        if cell.lane == "host":
            raise BadInput(f"{side} {cell.id}: the host cell installs no stack, so it has no versions to bisect")
    chosen = choose_axis(good, bad, axis)
    if IMAGE in (getattr(good, chosen), getattr(bad, chosen)):
        raise BadInput(f"--axis {chosen}: a value taken from the base image ({IMAGE!r}) has no published versions")
    held = {k: (v, bad.values().get(k, "")) for k, v in good.values().items()
            if k != chosen and v != bad.values().get(k, "")}
    bad_end = with_value(good, chosen, getattr(bad, chosen))
    if held:
        why = impossible(bad_end)
        if why:
            fixed = ", ".join(f"{k}={v[0]}" for k, v in held.items())
            raise NotBisectable(f"not bisectable on {chosen} with {fixed} held at the good cell's values: "
                                f"the bad end {bad_end.id} is no published stack ({why})")
    ordered, left_out = candidates(good, chosen, bases)
    values = between(ordered, getattr(good, chosen), getattr(bad, chosen), chosen, good)
    gap = tuple((v, why) for v, why in left_out if _strictly_between(v, values, chosen, good))
    return Plan(axis=chosen, good=good, bad=bad_end, good_cell=good.id, bad_cell=bad.id, values=tuple(values),
                held=held, left_out=gap,
                package=stacks.cudnn_package(good.cuda) if chosen == "cudnn" else "")


def candidates(cell: Cell, axis: str, bases: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Every value the axis has in the stack facts for this cell, in order, that a cell with the
    other axes held can have; and those it cannot, with why (prune.impossible)."""
    facts = stacks.load()
    if axis == "cudnn":
        if cell.cuda in ("cpu", IMAGE):
            raise BadInput(f"--axis cudnn: {cell.id} is a {cell.cuda} cell, which loads no cuDNN wheel")
        published = list(facts.cudnn_wheels.get(stacks.cudnn_package(cell.cuda), ()))
    elif axis == "torch":
        published = [p for r in facts.releases.values() if cell.cuda in r.variants for p in r.patches]
    elif axis == "cuda":
        release = facts.release(cell.torch)
        published = [v for v in release.variants if v.startswith("cu")] if release else []
    else:
        if not bases:
            raise BadInput("--axis base: give the tags to bisect over, in order: --bases TAG,TAG,...")
        return list(dict.fromkeys(bases)), []
    published = sorted(dict.fromkeys(published), key=lambda v: _key(axis, v, cell))
    kept, left_out = [], []
    for value in published:
        why = impossible(with_value(cell, axis, value))
        if why:
            left_out.append((value, why))
        else:
            kept.append(value)
    return kept, left_out


def _key(axis: str, value: str, cell: Cell) -> tuple[int, ...]:
    if axis == "cuda":
        return stacks.version_key(value[2:]) if value.startswith("cu") else ()
    if axis == "cudnn" and value == "bundled":
        return stacks.version_key(pin(cell))
    return stacks.version_key(value)


def between(ordered: Sequence[str], good: str, bad: str, axis: str, cell: Cell) -> list[str]:
    """The values from good to bad, both ends included, in that direction (a bad end older than
    the good one is bisected backwards). For cuDNN, `bundled` is its pin's version; an override of
    the pin itself is then the same stack and left out."""
    if axis == "base":
        for value, side in ((good, "good"), (bad, "bad")):
            if value not in ordered:
                raise BadInput(f"--bases: the {side} cell's base {value!r} is not in the list given")
        i, j = ordered.index(good), ordered.index(bad)
        return list(ordered[i:j + 1] if i <= j else reversed(ordered[j:i + 1]))
    low, high = _key(axis, good, cell), _key(axis, bad, cell)
    if low == high:
        raise BadInput(f"--axis {axis}: {good} and {bad} are the same version")
    lo, hi = min(low, high), max(low, high)
    inner = [v for v in ordered if lo < _key(axis, v, cell) < hi]
    values = [good, *(inner if low < high else reversed(inner)), bad]
    return values


def _strictly_between(value: str, values: Sequence[str], axis: str, cell: Cell) -> bool:
    if axis == "base" or len(values) < 2:
        return False
    ends = sorted((_key(axis, values[0], cell), _key(axis, values[-1], cell)))
    return ends[0] < _key(axis, value, cell) < ends[1]


def parse_bases(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    tags = tuple(t.strip() for t in text.split(","))
    if any(not t or not t.isprintable() for t in tags):
        raise BadInput(f"--bases {text!r}: a comma-separated list of image tags")
    return tags


# --- the search ------------------------------------------------------------------------------

RunStep = Callable[[str], StepResult]


def search(plan: Plan, run_step: RunStep, *, on_step: Callable[[Step], None] | None = None) -> Answer:
    """The end checks, then a binary search for the first value that fails. Each call of run_step
    is one cell run; at most ceil(log2(n)) of them after the three end checks, where n is the
    number of values after the good end (more only where a step is left out)."""
    answer = Answer(plan=plan)
    values = plan.values

    def run(value: str, role: str) -> StepResult:
        result = run_step(value)
        step = Step(value=value, role=role, result=result)
        answer.steps.append(step)
        if on_step is not None:
            on_step(step)
        return result

    good, bad = values[0], values[-1]
    for value, role, wanted in ((good, "good end", Outcome.PASS), (bad, "bad end", Outcome.FAIL),
                                (good, "good end again", Outcome.PASS)):
        result = run(value, role)
        if role == "bad end" and result.outcome == Outcome.FAIL:
            answer.family = result.families
        if result.outcome == wanted:
            continue
        if result.outcome == Outcome.SKIPPED:
            answer.infrastructure = True
            answer.reason = f"the {role.replace(' again', '')} {plan.label(value)} could not be run: {result.detail}"
        else:
            answer.reason = end_problem(plan, role, value, result)
        return answer
    lo, hi = 0, len(values) - 1  # values[lo] passes, values[hi] fails
    left: set[int] = set()
    while True:
        inner = [i for i in range(lo + 1, hi) if i not in left]
        if not inner:
            break
        middle = lo + (hi - lo) // 2
        index = min(inner, key=lambda i: (abs(i - middle), i))  # the middle, or the nearest one not left out
        result = run(values[index], "step")
        if result.outcome == Outcome.PASS:
            lo = index
        elif result.outcome == Outcome.FAIL:
            hi = index
        else:
            left.add(index)
            answer.skipped.append(f"{plan.label(values[index])}: {result.outcome.upper()}: {result.detail}")
    gap = values[lo + 1:hi]
    answer.last_good, answer.first_bad = values[lo], values[hi]
    if gap:
        answer.reason = (f"the change lies between {plan.label(values[lo])} (good) and {plan.label(values[hi])} "
                         f"(bad), and {', '.join(gap)} between them could not be judged")
        return answer
    unpublished = [v for v, _ in plan.left_out if _strictly_between(v, (values[lo], values[hi]), plan.axis, plan.good)]
    if unpublished:
        answer.reason = (f"the change lies between {plan.label(values[lo])} (good) and {plan.label(values[hi])} "
                         f"(bad), with {', '.join(unpublished)} between them, which no cell here can have")
        return answer
    answer.found = True
    return answer


def end_problem(plan: Plan, role: str, value: str, result: StepResult) -> str:
    """Why an end check makes the range not bisectable, in one line."""
    label = plan.label(value)
    said = f" ({result.detail})" if result.detail else ""
    if role == "good end":
        if result.outcome == Outcome.FAIL:
            return f"both ends fail: the good end {label} fails too{said}"
        return f"the good end {label} does not pass: {result.outcome}{said}"
    if role == "bad end":
        if result.outcome == Outcome.PASS:
            held = f" (with {', '.join(f'{k}={v[0]}' for k, v in plan.held.items())} held)" if plan.held else ""
            return f"both ends pass: the bad end {label}{held} passes the selected cases"
        return f"the bad end {label} does not fail the selected cases: {result.outcome}{said}"
    return f"the good end {label} is flaky: it passed, then {result.outcome} on the second run{said}"


def steps_bound(n: int) -> int:
    """The most cell runs a search over n values after the good end takes, nothing left out."""
    return 3 + (math.ceil(math.log2(n)) if n > 1 else 0)


# --- a step's outcome ------------------------------------------------------------------------

def judge(found: Sequence[results.CellResult], family: Sequence[str] | None) -> StepResult:
    """A step's outcome from its results (one per GPU generation). family: the bad end's failure
    families (None while the bad end itself is judged: then any failure is a failure)."""
    if not found:
        return StepResult(outcome=Outcome.ERROR, detail="no result was written")
    failing: set[str] = set()
    problems: list[str] = []
    passed = 0
    for result in found:
        problems += [f"{result.gpu_key}: {p}" for p in (*result.problems, *result.stack_mismatch)]
        if result.not_run or result.unsupported:
            problems.append(f"{result.gpu_key}: not run: {result.not_run or result.unsupported}")
        for case in result.cases.values():
            if case.outcome.failing:
                failing.add(case.family or "other")
            elif case.outcome == "pass":
                passed += 1
    families = tuple(sorted(failing))
    wanted = set(family) if family is not None else failing
    if failing & wanted:
        return StepResult(outcome=Outcome.FAIL, detail=", ".join(families), families=families)
    if problems:
        return StepResult(outcome=Outcome.ERROR, detail=problems[0], families=families)
    if failing:
        return StepResult(outcome=Outcome.ERROR, detail=f"failed with {', '.join(families)}, not "
                          f"{', '.join(sorted(wanted))}", families=families)
    if not passed:
        return StepResult(outcome=Outcome.ERROR, detail="no selected case passed (none ran, or all were skipped)")
    return StepResult(outcome=Outcome.PASS)


# --- a step as a cell run --------------------------------------------------------------------

Log = Callable[[str], None]


def slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", value).strip("._-") or "value"


def step_matrix(source: parse.Matrix, cell: Cell, name: str) -> str:
    """A matrix file holding exactly this cell, as the only cell and its control, with the source
    matrix's allow_cpu, wheelhouse and case files (absolute, so the file can live anywhere)."""
    q = tomlwrite.string

    lines = [f"name = {q(name)}"]
    if source.allow_cpu:
        lines.append("allow_cpu = true")  # the source's word that its CUDA stacks may run on a CPU runner
    if source.wheelhouse is not None:
        lines.append(f"wheelhouse = {q(str(source.wheelhouse))}")
    if source.cases:
        lines.append(f"cases = [{', '.join(q(str(p)) for p in source.cases)}]")
    values = cell.values()
    if cell.lane == "container":
        lines += ["[container]", f"base = {q(cell.base)}", f"flavour = {q(cell.flavour or 'wheel')}"]
    axes = {k: values[k] for k in ("lane", "torch", "cuda", "cudnn", "python")}
    if cell.base_in_id:
        axes["base"] = cell.base
    if cell.knobs:
        axes["knobs"] = cell.knobs
    lines.append("[axes]")
    lines += [f"{k} = [{q(v)}]" for k, v in axes.items()]
    lines.append("[control]")
    lines += [f"{k} = {q(v)}" for k, v in axes.items()]
    return "\n".join(lines) + "\n"


class CellRunner:
    """run_step for the real thing: each value's cell run through the normal lanes, each into
    its own run directory under out (NN-<value>/), its matrix beside it (matrices/NN-<value>.toml).
    A stored result of the same stack is reused (--reuse-results), except for a value run again
    (the good end's second run must be a run of its own)."""

    def __init__(self, source: parse.Matrix, plan: Plan, opts: options.RunOptions, log: Log, *,
                 reuse: bool = True,
                 run: Callable[..., Any] | None = None) -> None:
        self.source, self.plan, self.opts, self.log, self.reuse = source, plan, opts, log, reuse
        self.family: tuple[str, ...] | None = None
        self.ran: dict[str, int] = {}
        self.count = 0
        self._run = run

    def __call__(self, value: str) -> StepResult:
        self.count += 1
        again = self.ran.get(value, 0) > 0
        self.ran[value] = self.ran.get(value, 0) + 1
        cell = self.plan.cell(value)
        name = f"{self.count:02d}-{slug(value)}"
        out = self.opts.out / name
        matrices = self.opts.out / "matrices"
        matrices.mkdir(parents=True, exist_ok=True)
        path = matrices / f"{name}.toml"
        path.write_text(step_matrix(self.source, cell, f"bisect {self.plan.axis} step {self.count}: {value}"),
                        encoding="utf-8")
        step = parse.load(path)
        if [c.id for c in step.cells] != [cell.id]:
            raise BadInput(f"{path}: expected the one cell {cell.id}, got {', '.join(c.id for c in step.cells)}")
        opts = replace(self.opts, out=out, reuse_results=self.reuse and not again, resume=False, shard=None)
        started = time.monotonic()
        try:
            with popen.quiet(True):  # the suite's output is in each result's log.txt
                self.runner()(step, step.cells, opts, self.log, strict=True,
                              selection={"lanes": [], "cells": [cell.id]})
        except InfrastructureError as exc:
            return StepResult(outcome=Outcome.SKIPPED, detail=str(exc), seconds=time.monotonic() - started,
                              path=str(out))
        seconds = time.monotonic() - started
        loaded = results.load([out])
        found = [r for r in loaded.results if r.cell == cell.id]
        if loaded.errors and not found:
            return StepResult(outcome=Outcome.ERROR, detail=loaded.errors[0], seconds=seconds, path=str(out))
        # Until the bad end has run, any failure is a failure; after it, only its families are.
        judged = judge(found, self.family)
        if value == self.plan.values[-1] and self.family is None and judged.outcome == Outcome.FAIL:
            self.family = judged.families
        reused = bool(found) and all(rundir.read_json(r.path / rundir.CELL_JSON).get("reused") for r in found)
        return replace(judged, seconds=seconds, path=str(out), reused=reused)

    def runner(self) -> Callable[..., Any]:
        if self._run is not None:
            return self._run
        from convmatrix.run import orchestrate  # here: planning a bisect (and its tests) need no orchestrator

        return orchestrate.run


# --- output ----------------------------------------------------------------------------------

def seconds_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def step_line(plan: Plan, step: Step) -> str:
    result = step.result
    role = f"; {step.role}" if step.role != "step" else ""
    role += "; reused" if result.reused else ""
    detail = f": {result.detail}" if result.detail and result.outcome != Outcome.PASS else ""
    return f"{plan.label(step.value)}: {result.outcome.upper()} ({seconds_text(result.seconds)}{role}){detail}"


def header_lines(plan: Plan) -> list[str]:
    what = f"{plan.axis} ({plan.package})" if plan.package else plan.axis
    lines = [f"bisect {what} from {plan.good_cell} (good) to {plan.bad_cell} (bad): "
             f"{len(plan.values)} versions, {', '.join(plan.values)}"]
    if plan.held:
        held = ", ".join(f"{k}={good} (bad cell: {bad or 'none'})" for k, (good, bad) in plan.held.items())
        lines.append(f"held fixed at the good cell's values: {held}")
    if plan.left_out:
        lines.append("left out (no cell can have them): " + "; ".join(f"{v}: {why}" for v, why in plan.left_out))
    return lines


def answer_lines(answer: Answer) -> list[str]:
    plan = answer.plan
    lines = [f"left out: {s}" for s in answer.skipped]
    runs = f"{answer.cell_runs} step{'s' if answer.cell_runs != 1 else ''}"
    if answer.found:
        assert answer.first_bad is not None and answer.last_good is not None
        last_good = plan.named(answer.last_good).removeprefix(f"{plan.package} ").removeprefix("torch ")
        lines.append(f"first bad: {plan.named(answer.first_bad)}; last good: {last_good}; {runs}")
    elif answer.infrastructure:
        lines.append(f"could not bisect: {answer.reason}; {runs}")
    else:
        lines.append(f"not bisectable: {answer.reason}; {runs}")
    return lines


def render_text(answer: Answer) -> str:
    lines = [*header_lines(answer.plan), *(step_line(answer.plan, s) for s in answer.steps), *answer_lines(answer)]
    return "\n".join(lines) + "\n"


def to_json(answer: Answer, out: Path | None = None) -> dict[str, Any]:
    plan = answer.plan
    return {
        "schema": SCHEMA,
        "axis": plan.axis,
        "package": plan.package or None,
        "good": {"cell": plan.good_cell, "value": plan.values[0], "ran_as": plan.good.id},
        "bad": {"cell": plan.bad_cell, "value": plan.values[-1], "ran_as": plan.bad.id},
        "held_fixed": {k: {"good": g, "bad": b} for k, (g, b) in plan.held.items()},
        "versions": list(plan.values),
        "left_out": [{"value": v, "reason": why} for v, why in plan.left_out],
        "family": list(answer.family),
        "steps": [{"value": s.value, "role": s.role, "outcome": str(s.result.outcome), "seconds":
                   round(s.result.seconds, 1), "detail": s.result.detail or None, "path": s.result.path,
                   "reused": s.result.reused}
                  for s in answer.steps],
        "skipped": list(answer.skipped),
        "cell_runs": answer.cell_runs,
        "found": answer.found,
        "first_bad": answer.first_bad if answer.found else None,
        "last_good": answer.last_good if answer.found else None,
        "reason": answer.reason,
        "exit_code": answer.exit_code,
        "out": str(out) if out is not None else None,
    }


def render_json(answer: Answer, out: Path | None = None) -> str:
    return json.dumps(to_json(answer, out), indent=1) + "\n"
