"""The verdict policy, in one place (docs/contracts.md: Verdicts, Exit codes): control health,
per-case deltas, cell verdicts, and what a report means for the exit status."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from convmatrix.errors import InfrastructureError, NotGreen, UnhealthyControl
from convmatrix.results import night
from convmatrix.results import verdicts as results_verdicts

# The control's health, a cell's own fact and the control's id are the judged night's
# (results/night.py); named here too for the report's callers.
from convmatrix.results.night import Health, cell_fact, control_id, health

__all__ = ["Health", "cell_fact", "control_id", "health"]
from convmatrix.results.outcomes import FAILING, Delta, Outcome, Verdict
from convmatrix.results.read import CellResult

# first-red: red only for what went red tonight for the first time on its stack and GPU (needs
# --history; report/nights.first_red, judged in judge); the views then describe the regression policy.
FIRST_RED = "first-red"
FAIL_ON = (*results_verdicts.POLICIES, FIRST_RED, "never")
# The members delta and slowdown read for each of a fleet's 200,000 rows, as module names (why:
# results/verdicts.py, beside its own).
_PASS = Outcome.PASS
_SAME, _REGRESSION, _FIXED, _CHANGED, _NEW = Delta.SAME, Delta.REGRESSION, Delta.FIXED, Delta.CHANGED, Delta.NEW


def fail_on(given: str) -> str:
    """A --fail-on value: one of FAIL_ON or a comma-separated list of them (`regression,fallback`;
    `first-red` then applies to the findings of the others listed; `never` stands alone). Raises
    ValueError naming what is not one (argparse says it as a bad value: exit 2)."""
    named = [p.strip() for p in given.split(",")]
    wrong = [p for p in named if p not in FAIL_ON]
    if wrong or not named:
        raise ValueError(f"{', '.join(wrong) or given!r}: not one of {', '.join(FAIL_ON)}")
    if "never" in named and len(named) > 1:
        raise ValueError("never stands alone")
    return ",".join(dict.fromkeys(named))


class Judged(Protocol):
    """A case's result as a delta needs it: a recorded case, or a report row."""

    @property
    def outcome(self) -> Outcome: ...

    @property
    def family(self) -> str | None: ...


class Timed(Judged, Protocol):
    @property
    def forward_ms(self) -> float | None: ...

    @property
    def forward_runs(self) -> tuple[float, ...]: ...


class Printed(Judged, Protocol):
    @property
    def fingerprint(self) -> str | None: ...


class VerdictedCell(Protocol):
    """A cell as the exit status needs it (report.model.CellRow is one)."""

    @property
    def where(self) -> str: ...

    @property
    def gpu_key(self) -> str: ...

    @property
    def verdict(self) -> Verdict: ...

    @property
    def signature(self) -> bool: ...

    @property
    def baseline_regressions(self) -> int | None: ...

    @property
    def excused(self) -> bool: ...

    @property
    def did_not_run(self) -> bool: ...

    @property
    def found(self) -> frozenset[Verdict]: ...


class Verdicted(Protocol):
    """What `judge` reads of a report: the policy needs no more of it (report.model.Report is one)."""

    @property
    def control(self) -> str | None: ...

    @property
    def health(self) -> Mapping[str, Health]: ...

    @property
    def cells(self) -> Sequence[VerdictedCell]: ...


def delta(control: Judged | None, case: Judged) -> Delta:
    """One case against the control's (or an earlier run's) same case."""
    if control is None:
        # A case the control never ran is no pass by default: failing, it is a regression.
        return _REGRESSION if case.outcome in FAILING else _NEW
    was_bad, is_bad = control.outcome in FAILING, case.outcome in FAILING  # .failing, without a property call
    if was_bad and is_bad:
        return _SAME if control.family == case.family else _REGRESSION
    if is_bad:
        return _REGRESSION if control.outcome == _PASS else _CHANGED
    if was_bad:
        return _FIXED if case.outcome == _PASS else _CHANGED
    return _SAME if control.outcome == case.outcome else _CHANGED


def timing_comparable(result: CellResult, control: CellResult | None, fact: Verdict | None) -> bool:
    """results/night.timing_comparable: the night decides where timings are compared."""
    return night.timing_comparable(result, control, fact)


def slowdown(control: Timed | None, case: Timed) -> float | None:
    """How many times slower than on the control this case's conv ran (both must have passed)."""
    if control is None or control.outcome != _PASS or case.outcome != _PASS:
        return None
    if not control.forward_ms or case.forward_ms is None:
        return None
    return round(case.forward_ms / control.forward_ms, 3)


MIN_RUNS = 3  # repeated timings a case needs on both sides before its speed is compared


def timed_ratio(control: Timed | None, case: Timed) -> float | None:
    """A case's time against the control's, beyond the noise of their repeats: the ratio of their
    fastest runs (noise only ever adds time) when it exceeds both sides' spreads multiplied
    (max/min of each side's runs), else 1.0 (no measurable difference). None when either side
    has too few runs to say: one timing is noise (two runs of one stack gave 0.11 to 99.7 times)."""
    if control is None or len(control.forward_runs) < MIN_RUNS or len(case.forward_runs) < MIN_RUNS:
        return None
    mine, theirs = case.forward_runs, control.forward_runs
    if min(mine) <= 0 or min(theirs) <= 0:
        return None
    ratio = min(mine) / min(theirs)
    noise = (max(mine) / min(mine)) * (max(theirs) / min(theirs))
    return round(ratio, 3) if ratio > noise or ratio < 1 / noise else 1.0


def typical_slowdown(ratios: Sequence[float | None]) -> float | None:
    """A cell's slowdown beyond noise (timed_ratio per case): their geometric mean when at least
    half of the cases compared differ beyond their noise, else 1.0 (a stack is slower when most of
    its convolutions are; one slow outlier, or a noisy machine, does not make it so). None when no
    case could be compared."""
    known = [r for r in ratios if r]
    if not known:
        return None
    if sum(1 for r in known if r != 1.0) * 2 < len(known):
        return 1.0
    return round(math.exp(sum(math.log(r) for r in known) / len(known)), 3)


def fingerprint_changed(control: Printed | None, case: Printed) -> bool | None:
    """Whether the output differs from the control's beyond rounding (None: nothing to compare)."""
    if control is None or control.fingerprint is None or case.fingerprint is None:
        return None
    return control.fingerprint != case.fingerprint


def policy(fail_on: str) -> str:
    """The policy the views describe for a --fail-on: `never` changes the exit, not what is red;
    `first-red` alone describes the regression policy, beside others those others."""
    named = [p for p in fail_on.split(",") if p in results_verdicts.POLICIES]
    return ",".join(named) if named else "regression"


def first_red_policy(fail_on: str) -> bool:
    return FIRST_RED in fail_on.split(",")


def failing(cell: VerdictedCell, fail_on: str) -> bool:
    """Whether this cell makes the report red under fail_on's policy (results.verdicts.fails), a
    regression against --baseline counting as one: every view and the exit code ask this."""
    said = policy(fail_on)
    return night.red(cell, said) or bool("regression" in results_verdicts.policies(said)
                                         and cell.baseline_regressions)


def tally(cells: Sequence[VerdictedCell]) -> str:
    """How many cells got each verdict, worst first ("1 regression, 2 not-run, 5 ok"): the
    nightly's last line and the top of every format say it the same way."""
    counts = Counter(cell.verdict for cell in cells)
    ordered = [Verdict.CONTROL, *results_verdicts.ORDER, Verdict.NO_CONTROL]
    return ", ".join(f"{counts[v]} {v}" for v in ordered if counts[v])


def judge(report: Verdicted, fail_on: str, first_red: Sequence[str] = (), history: str = "") -> None:
    """The report's verdict as an exit: UnhealthyControl (3) where a sick control has candidates,
    NotGreen (1) for every cell `failing` names; nothing when it is green. Under first-red,
    `first_red` names what went red for the first time (report/nights.first_red: cells that ran,
    and their cases; `history` its summary line): NotGreen for those alone. In both, a run whose
    red is the infrastructure alone is InfrastructureError (4): a dead index is not a finding on
    its first night, and not green on its second."""
    judged = {c.gpu_key for c in report.cells if c.verdict not in (Verdict.CONTROL, Verdict.NOT_RUN)}
    ran = {c.gpu_key for c in report.cells if c.verdict == Verdict.CONTROL}
    # A control that ran and is unhealthy gives no verdict, even as the only cell: exit 3. A control
    # absent from a host it ran on elsewhere is its cells' problem (INVALID, exit 1); one that was
    # planned on a GPU no runner reported is NOT RUN with the rest (exit 1).
    sick = sorted(key for key, h in report.health.items()
                  if not h.healthy and not h.elsewhere and (key in judged or key in ran))
    if report.control and sick:
        raise UnhealthyControl("\n".join(f"control unhealthy on {key}: {report.health[key].reason}" for key in sick))
    if fail_on == "never":
        return
    red = [c for c in report.cells if failing(c, fail_on)]
    if first_red_policy(fail_on):
        if first_red:
            more = f" and {len(first_red) - 5} more" if len(first_red) > 5 else ""
            raise NotGreen(f"{len(first_red)} first-red: {', '.join(first_red[:5])}{more} ({history})")
        red = [c for c in red if c.did_not_run]  # recurring, flaky, recovered: nothing new; outages still say so
    if red:
        # One clause per verdict, worst first, each naming its first cells: the nightly's last line.
        def why(cell: VerdictedCell) -> str:
            if cell.verdict in (Verdict.INVALID, Verdict.NOT_RUN):
                return "INVALID" if cell.verdict == Verdict.INVALID else "NOT RUN"
            said = results_verdicts.policies(policy(fail_on))
            if cell.verdict == Verdict.REGRESSION and "regression" in said:
                return "regressed"
            if "signature" in said and cell.signature:
                return "hit the signature"
            costs = [str(v) for v in results_verdicts.COSTS if v in cell.found and str(v) in said]
            if costs:
                return "passed at a cost (" + ", ".join(costs) + ")"
            return "regressed since the baseline"

        if all(c.did_not_run for c in red):
            # Nothing red is a finding about a stack: the infrastructure is all that failed (exit 4),
            # which a fleet's owners, not the stacks' ones, have to mend.
            more = f" and {len(red) - 5} more" if len(red) > 5 else ""
            raise InfrastructureError(f"{len(red)} cell(s) did not run, for the infrastructure alone: "
                                      f"{', '.join(c.where for c in red[:5])}{more} (of {len(report.cells)} cells: "
                                      f"{tally(report.cells)})")
        said = []
        words = ["INVALID", "regressed", "NOT RUN", "hit the signature", *dict.fromkeys(why(c) for c in red)]
        for word in dict.fromkeys(words):
            cells = [c.where for c in red if why(c) == word]
            if cells:
                more = f" and {len(cells) - 5} more" if len(cells) > 5 else ""
                said.append(f"{len(cells)} cell(s) {word}: {', '.join(cells[:5])}{more}")
        raise NotGreen("; ".join(said) + f" (of {len(report.cells)} cells: {tally(report.cells)})")
