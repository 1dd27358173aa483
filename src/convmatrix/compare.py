"""Compare every cell with the control on the same GPU: control health, per-case deltas, verdicts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from convmatrix import classify
from convmatrix.errors import BadInput
from convmatrix.results import FAILING, Case, CellResult


@dataclass(frozen=True, kw_only=True)
class Health:
    healthy: bool
    reason: str | None
    absent: bool = False  # no control result at all on this GPU (nothing to judge against)


def control_id(results: list[CellResult], given: str | None) -> str | None:
    """--control wins; else the cell the matrix marked as control in its cell.json."""
    if given:
        if not any(r.cell == given for r in results):
            raise BadInput(f"--control {given}: no results for that cell")
        return given
    marked = sorted({r.cell for r in results if r.marked_control})
    if len(marked) > 1:
        raise BadInput(f"several cells are marked control ({', '.join(marked)}): pick one with --control")
    return marked[0] if marked else None


def health(control: CellResult | None) -> Health:
    """A control that did not complete, ran another stack, or hit the environment is unhealthy."""
    if control is None:
        return Health(healthy=False, reason="the control has no result on this GPU", absent=True)
    if control.problems:
        return Health(healthy=False, reason="; ".join(control.problems))
    if control.stack_mismatch:
        return Health(healthy=False, reason="stack mismatch: " + "; ".join(control.stack_mismatch))
    infra = sorted(control.families() & classify.INFRASTRUCTURE)
    if infra:
        return Health(healthy=False, reason=f"infrastructure failure on the control: {', '.join(infra)}")
    if not control.cases:
        return Health(healthy=False, reason="the control recorded no cases")
    return Health(healthy=True, reason=None)


def delta(control: Case | None, case: Case) -> str:
    """same | regression | fixed | changed | new, for one case against the control's."""
    if control is None:
        return "new"
    was_bad, is_bad = control.outcome in FAILING, case.outcome in FAILING
    if was_bad and is_bad:
        return "same" if control.family == case.family else "regression"
    if is_bad:
        return "regression" if control.outcome == "pass" else "changed"
    if was_bad:
        return "fixed" if case.outcome == "pass" else "changed"
    return "same" if control.outcome == case.outcome else "changed"


def slowdown(control: Case | None, case: Case) -> float | None:
    """How many times slower than on the control this case's conv ran (both must have passed)."""
    if control is None or control.outcome != "pass" or case.outcome != "pass":
        return None
    if not control.forward_ms or case.forward_ms is None:
        return None
    return round(case.forward_ms / control.forward_ms, 3)


def typical_slowdown(ratios: list[float | None]) -> float | None:
    """The geometric mean of a cell's per-case slowdowns: one slow outlier does not make a stack slow."""
    known = [r for r in ratios if r]
    if not known:
        return None
    return round(math.exp(sum(math.log(r) for r in known) / len(known)), 3)


def fingerprint_changed(control: Case | None, case: Case) -> bool | None:
    """Whether the output differs from the control's beyond rounding (None: nothing to compare)."""
    if control is None or control.fingerprint is None or case.fingerprint is None:
        return None
    return control.fingerprint != case.fingerprint


def verdict(deltas: list[str]) -> str:
    """A candidate's verdict from its case deltas: a regression outweighs all; a case the
    control ran and the candidate did not ("missing") makes it invalid, never ok."""
    if "regression" in deltas:
        return "regression"
    if "missing" in deltas:
        return "invalid"
    if "fixed" in deltas:
        return "fixed"
    return "ok"
