"""The one order of outcomes (results/verdicts.py): a case's verdict from its record and the
control's, a cell's as the worst, and which verdicts make a run red."""

from __future__ import annotations

import pytest

from convmatrix.results import Case
from convmatrix.results import verdicts as v
from convmatrix.results.outcomes import Outcome, Verdict


def case(outcome: str, family: str | None = None) -> Case:
    return Case(case="c", outcome=Outcome(outcome), family=family, message=None, knobs={}, warnings=())


SIG = "cudnn_not_supported"


def test_the_order_is_written_worst_first_and_is_total() -> None:
    assert [str(x) for x in v.ORDER] == ["invalid", "regression", "not-run", "unsupported", "fallback", "memory",
                                         "slower", "changed", "fixed", "ok", "declared-skip"]
    assert set(v.ORDER) | v.OUTSIDE == set(Verdict) and not set(v.ORDER) & v.OUTSIDE
    assert v.worst([Verdict.OK, Verdict.UNSUPPORTED, Verdict.NOT_RUN]) == Verdict.NOT_RUN
    assert v.worst([]) == Verdict.OK


@pytest.mark.parametrize(("control", "here", "declared", "expected"), [
    (case("pass"), case("pass"), False, "ok"),
    (case("pass"), case("fail", SIG), False, "regression"),
    (case("pass"), case("crash", "crash"), False, "regression"),
    (case("pass"), case("fail", "cuda_driver_insufficient"), False, "unsupported"),
    (case("pass"), case("skip"), False, "not-run"),
    (case("pass"), case("skip"), True, "declared-skip"),
    (case("pass"), None, True, "not-run"),  # a case with no line is never declared away
    (case("pass"), case("missing"), False, "not-run"),
    (case("fail", SIG), case("pass"), False, "fixed"),
    (case("fail", SIG), case("fail", SIG), False, "ok"),  # as on the control: an alert, not a delta
    (case("fail", SIG), case("fail", "cudnn_no_engine"), False, "regression"),
    (case("fail", SIG), case("skip"), False, "not-run"),
    (case("skip"), case("pass"), False, "changed"),
    (case("skip"), case("skip"), False, "ok"),
    (case("skip"), case("fail", "other"), False, "regression"),  # the control never ran it
    (None, case("fail", SIG), False, "regression"),
    (None, case("pass"), False, "ok"),
    (None, case("skip"), False, "ok"),
])
def test_case_verdict(control: Case | None, here: Case | None, declared: bool, expected: str) -> None:
    assert v.case_verdict(control, here, declared=declared) == expected


def test_a_cell_takes_the_worst_of_its_fact_and_cases_and_no_fact_excuses_a_case() -> None:
    cases = [Verdict.UNSUPPORTED, Verdict.REGRESSION, Verdict.OK]
    assert v.cell_verdict(None, cases) == Verdict.REGRESSION
    assert v.cell_verdict(Verdict.UNSUPPORTED, cases) == Verdict.REGRESSION
    assert v.cell_verdict(Verdict.INVALID, cases) == Verdict.INVALID
    assert v.cell_verdict(Verdict.CONTROL, cases) == Verdict.CONTROL
    assert v.cell_verdict(None, []) == Verdict.OK


@pytest.mark.parametrize("verdict", list(Verdict))
def test_what_is_red(verdict: Verdict) -> None:
    assert v.fails(verdict) == (verdict in v.RED)
    assert not v.fails(Verdict.NOT_RUN, excused=True)
    # the signature policy: INVALID and NOT_RUN still, and a signature whatever the case verdicts
    assert v.fails(verdict, policy="signature") == (verdict in (Verdict.INVALID, Verdict.NOT_RUN))
    assert v.fails(verdict, policy="signature", signature=True) == (verdict not in v.OUTSIDE)


def test_declared_takes_the_first_matching_entry() -> None:
    skips = ((("conv1d-*",), "no conv1d"), (("*",), "everything"))
    assert v.declared("conv1d-fp16", skips) == "no conv1d"
    assert v.declared("conv2d-fp16", skips) == "everything"
    assert v.declared("conv2d-fp16", ()) is None
