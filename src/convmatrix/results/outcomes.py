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
    CONTROL = "control"
    OK = "ok"
    FIXED = "fixed"
    REGRESSION = "regression"
    INVALID = "invalid"
    NOT_RUN = "not-run"  # planned here and not run: red, unless the matrix marked the cell optional
    UNSUPPORTED = "unsupported"  # this runner's driver cannot run the stack: a fact about the runner
    NO_CONTROL = "no-control"
