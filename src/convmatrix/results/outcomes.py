"""The report's vocabulary as enums: a case's outcome, its delta against the control, a cell's
verdict (docs/contracts.md). Their values are the strings of the report JSON."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    CRASH = "crash"
    TIMEOUT = "timeout"
    MISSING = "missing"  # the control ran the case, this cell has no result for it

    @property
    def failing(self) -> bool:
        return self in FAILING


FAILING = frozenset({Outcome.FAIL, Outcome.CRASH, Outcome.TIMEOUT})

# A results.jsonl status (suites/records.py STATUSES) -> the outcome it means.
OF_STATUS = {
    "passed": Outcome.PASS,
    "failed": Outcome.FAIL,
    "error": Outcome.FAIL,
    "skipped": Outcome.SKIP,
    "crashed": Outcome.CRASH,
    "timeout": Outcome.TIMEOUT,
}


class Delta(StrEnum):
    SAME = "same"
    REGRESSION = "regression"
    FIXED = "fixed"
    CHANGED = "changed"
    NEW = "new"  # the control has no such case
    MISSING = "missing"


class Verdict(StrEnum):
    """A case's or a cell's verdict; their order, worst first, is results/verdicts.ORDER."""

    CONTROL = "control"
    OK = "ok"
    FIXED = "fixed"
    REGRESSION = "regression"
    INVALID = "invalid"
    NOT_RUN = "not-run"  # planned or owed (the control ran it) and not run: red, unless optional or declared
    UNSUPPORTED = "unsupported"  # this runner's driver cannot run it: a fact about the runner
    NO_CONTROL = "no-control"
    CHANGED = "changed"  # ran otherwise than on the control without failing (it passes what the control skipped)
    DECLARED_SKIP = "declared-skip"  # skipped where the control ran, as the matrix's [[expected_skip]] declares
    # Passed on both, at a cost (results/verdicts.cost_verdict): the worst of these wins.
    FALLBACK = "fallback"  # its backend left the control's accelerated one for a native path (Mkldnn -> Slow3d)
    MEMORY = "memory"  # its peak memory above the control's beyond verdicts.MEMORY_BOUND
    SLOWER = "slower"  # its time above the control's beyond verdicts.SLOWER_BOUND, at the ratio's lower bound
