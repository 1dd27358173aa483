from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convmatrix.errors import BadInput
from convmatrix.report import verdicts
from convmatrix.results import Case, CellResult
from convmatrix.results.outcomes import Delta, Outcome


def case(outcome: str, family: str | None = None) -> Case:
    return Case(case="c", outcome=Outcome(outcome), family=family, message=None, knobs={}, warnings=())


@pytest.mark.parametrize(
    ("control", "here", "expected"),
    [
        (case("pass"), case("pass"), "same"),
        (case("pass"), case("fail", "cudnn_not_supported"), "regression"),
        (case("pass"), case("crash", "crash"), "regression"),
        (case("fail", "cudnn_not_supported"), case("pass"), "fixed"),
        (case("fail", "cudnn_not_supported"), case("fail", "cudnn_not_supported"), "same"),
        (case("fail", "cudnn_not_supported"), case("fail", "cudnn_no_engine"), "regression"),
        (case("skip"), case("fail", "other"), "changed"),
        (case("fail", "other"), case("skip"), "changed"),
        (None, case("pass"), "new"),
    ],
)
def test_delta(control: Case | None, here: Case, expected: str) -> None:
    assert verdicts.delta(control, here) == expected


def test_verdict_precedence() -> None:
    assert verdicts.verdict([Delta.SAME, Delta.FIXED, Delta.REGRESSION]) == "regression"
    assert verdicts.verdict([Delta.SAME, Delta.FIXED]) == "fixed"
    assert verdicts.verdict([Delta.SAME, Delta.NEW, Delta.CHANGED]) == "ok"


def result(cell: str = "ctl", **kw: Any) -> CellResult:
    fields = {"cases": {"c": case("pass")}, **kw}
    return CellResult(cell=cell, gpu_key="cpu", gpu={}, lane="baremetal", path=Path("r"), **fields)


def reason(control: CellResult) -> str:
    """Why the control is unhealthy (it must be)."""
    why = verdicts.health(control).reason
    assert why is not None
    return why


def test_health() -> None:
    assert verdicts.health(result()).healthy
    assert not verdicts.health(None).healthy
    assert "did not finish" in reason(result(problems=("the suite did not finish",)))
    assert "stack mismatch" in reason(result(stack_mismatch=("cudnn: x",)))
    sick = result(cases={"c": case("fail", "cuda_no_device")})
    assert "infrastructure failure on the control: cuda_no_device" in reason(sick)
    # A conv failure on a healthy control is a baseline fact, not sickness.
    assert verdicts.health(result(cases={"c": case("fail", "cudnn_not_supported")})).healthy


def test_control_id() -> None:
    rs = [result("a", marked_control=True), result("b")]
    assert verdicts.control_id(rs, None) == "a"
    assert verdicts.control_id(rs, "b") == "b"
    with pytest.raises(BadInput, match="no results for that cell"):
        verdicts.control_id(rs, "zzz")
    with pytest.raises(BadInput, match="several cells are marked control"):
        verdicts.control_id([*rs, result("b", marked_control=True)], None)


def timed(outcome: str, ms: float | None, sha: str | None = None) -> Case:
    return Case(case="c", outcome=Outcome(outcome), family=None, message=None, knobs={}, warnings=(),
                forward_ms=ms, fingerprint=sha)


def test_slowdown_only_between_passing_timed_cases() -> None:
    assert verdicts.slowdown(timed("pass", 2.0), timed("pass", 5.0)) == 2.5
    assert verdicts.slowdown(timed("pass", 2.0), timed("fail", 5.0)) is None
    assert verdicts.slowdown(timed("pass", None), timed("pass", 5.0)) is None
    assert verdicts.slowdown(timed("pass", 0.0), timed("pass", 5.0)) is None
    assert verdicts.slowdown(None, timed("pass", 5.0)) is None


def test_typical_slowdown_is_a_geometric_mean() -> None:
    assert verdicts.typical_slowdown([2.0, 8.0, None]) == 4.0
    assert verdicts.typical_slowdown([None]) is None


def test_fingerprint_changed() -> None:
    assert verdicts.fingerprint_changed(timed("pass", 1, "aa"), timed("pass", 1, "bb")) is True
    assert verdicts.fingerprint_changed(timed("pass", 1, "aa"), timed("pass", 1, "aa")) is False
    assert verdicts.fingerprint_changed(timed("pass", 1, None), timed("pass", 1, "aa")) is None
