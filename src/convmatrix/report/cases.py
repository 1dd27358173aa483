"""Which cases a report lists, in what order: every failing or changed case, regressions first,
then the other changes, then failures the control shares; the formats list the same ones."""

from __future__ import annotations

from collections.abc import Iterable

from convmatrix.report.model import CaseRow
from convmatrix.results.outcomes import Delta, Outcome

# A reader looks for regressions first; a failure the control shares matters least.
_URGENCY = {Delta.REGRESSION: 0, Delta.MISSING: 1, Delta.CHANGED: 2, Delta.NEW: 3, Delta.FIXED: 4}


def noteworthy(case: CaseRow) -> bool:
    return case.outcome.failing or case.outcome == Outcome.MISSING or case.delta not in (None, Delta.SAME)


def listed(cases: Iterable[CaseRow]) -> list[CaseRow]:
    """The noteworthy cases, most urgent first (stable: the report's order within a rank)."""
    return sorted((c for c in cases if noteworthy(c)), key=urgency)


def urgency(case: CaseRow) -> int:
    return _URGENCY.get(case.delta, 5) if case.delta else 5
