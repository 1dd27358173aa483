"""The one order of outcomes (docs/contracts.md: Verdicts): a case's verdict from its own record
and the control's, a cell's as the worst of its cases and its own facts, and whether a verdict
fails a run. Everything that judges (the report in every format, prove, later the history and
the atlas) reads these functions; nothing above may excuse a worse case with a cell-level rule.

Here, below report/ and prove/, so that nothing needs the report to know a verdict."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Protocol

from convmatrix.results.outcomes import Outcome, Verdict

# Worst first. Small and stable: the history database stores these words and the atlas
# publishes them, so a new verdict is a contract change (docs/contracts.md).
ORDER: tuple[Verdict, ...] = (
    Verdict.INVALID,
    Verdict.REGRESSION,
    Verdict.NOT_RUN,
    Verdict.UNSUPPORTED,
    Verdict.CHANGED,
    Verdict.FIXED,
    Verdict.OK,
    Verdict.DECLARED_SKIP,
)
RANK = {verdict: rank for rank, verdict in enumerate(ORDER)}
# Outside the order: the control itself, and a cell with nothing to be compared with. An
# unhealthy control is no verdict at all (exit 3, report/verdicts.judge).
OUTSIDE = frozenset({Verdict.CONTROL, Verdict.NO_CONTROL})
# What makes a run red under --fail-on regression (signature: INVALID, NOT_RUN and the signature).
RED = frozenset({Verdict.INVALID, Verdict.REGRESSION, Verdict.NOT_RUN})
POLICIES = ("regression", "signature")
# A case failing with this family is one the runner's driver cannot run: unsupported, which is
# a fact about the runner, and only that case's verdict (never a cell's excuse).
DRIVER = "cuda_driver_insufficient"


class Recorded(Protocol):
    """A case's record as a verdict needs it (results.Case, a report row)."""

    @property
    def outcome(self) -> Outcome: ...

    @property
    def family(self) -> str | None: ...


def worst(verdicts: Iterable[Verdict], default: Verdict = Verdict.OK) -> Verdict:
    """The worst of verdicts in the order (default when there are none)."""
    return min(verdicts, key=RANK.__getitem__, default=default)


def case_verdict(control: Recorded | None, case: Recorded | None, *, declared: bool = False) -> Verdict:
    """One case against the control's same case on the same host and GPU (the control is there and
    healthy: the cell's facts decide otherwise). control None: the control has no record of the
    case; case None (or outcome missing): the candidate has none. declared: the matrix declares
    this case's skip on this cell expected ([[expected_skip]])."""
    if case is None or case.outcome == Outcome.MISSING:
        return Verdict.NOT_RUN if control is not None else Verdict.OK
    if case.outcome.failing:
        if case.family == DRIVER:
            return Verdict.UNSUPPORTED
        if control is not None and control.outcome.failing and control.family == case.family:
            return Verdict.OK  # fails as on the control: the control is not known-good for it (an alert)
        # It passes on the control, fails otherwise there, or the control never ran it: a failure
        # is never excused by the control's silence.
        return Verdict.REGRESSION
    if case.outcome == Outcome.SKIP:
        if control is None or control.outcome == Outcome.SKIP:
            return Verdict.OK
        # The control ran it (passed or failed) and this cell did not: not-run, unless declared.
        return Verdict.DECLARED_SKIP if declared else Verdict.NOT_RUN
    if control is None or control.outcome == Outcome.PASS:
        return Verdict.OK
    return Verdict.FIXED if control.outcome.failing else Verdict.CHANGED


def in_cell(fact: Verdict | None, own: Verdict) -> Verdict:
    """A case's verdict within its cell: a fact outside the order (the control, no control) is
    every case's; otherwise the case keeps its own (the cell's worst then covers the fact)."""
    return fact if fact in OUTSIDE else own


def cell_verdict(fact: Verdict | None, cases: Iterable[Verdict]) -> Verdict:
    """A cell's verdict: its fact when that is outside the order (control, no-control), else the
    worst of its fact (invalid, not-run, unsupported) and every case's verdict."""
    if fact in OUTSIDE:
        return fact
    return worst([*([fact] if fact is not None else []), *cases])


def fails(verdict: Verdict, *, policy: str = "regression", signature: bool = False,
          excused: bool = False) -> bool:
    """Whether a cell with this verdict makes the run red: INVALID and NOT_RUN always (excused: an
    optional cell that never ran), REGRESSION under the regression policy, a signature failure under
    the signature policy. The exit code (report/verdicts.judge) and every view ask this."""
    if verdict == Verdict.NOT_RUN and excused:
        return False
    if verdict in (Verdict.INVALID, Verdict.NOT_RUN):
        return True
    if policy == "signature":
        return signature and verdict not in OUTSIDE
    return verdict == Verdict.REGRESSION


def declared(case: str, skips: Iterable[tuple[tuple[str, ...], str]]) -> str | None:
    """The reason of the first expected skip whose case globs match the case id, else None."""
    for globs, reason in skips:
        if any(fnmatchcase(case, glob) for glob in globs):
            return reason
    return None
