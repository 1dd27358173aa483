from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import testkit
from convmatrix.errors import BadInput
from convmatrix.report import verdicts
from convmatrix.results import Case, CellResult
from convmatrix.results.infra import RootCause
from convmatrix.results.outcomes import Outcome


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
    # A control that never ran says its cause's one line, not the harness's long message.
    down = RootCause(cause="index unreachable", line="dns error", log="/v/ctl.install.log", line_no=3)
    assert reason(result(cases={}, problems=("ctl: install failed: ...",), infra_cause=down)) == (
        "the control did not run: index unreachable: dns error (log /v/ctl.install.log:3)")


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


def test_typical_slowdown_is_a_geometric_mean_when_most_cases_differ_beyond_noise() -> None:
    assert verdicts.typical_slowdown([2.0, 8.0, None]) == 4.0
    assert verdicts.typical_slowdown([2.0, 8.0, 1.0]) == 2.52  # two of three beyond noise
    assert verdicts.typical_slowdown([8.0, 1.0, 1.0]) == 1.0  # one outlier does not make a stack slow
    assert verdicts.typical_slowdown([None]) is None


def runs(*ms: float) -> Case:
    return Case(case="c", outcome=Outcome.PASS, family=None, message=None, knobs={}, warnings=(),
                forward_ms=sorted(ms)[len(ms) // 2], forward_runs=ms)


def test_a_case_is_timed_against_the_control_only_beyond_the_noise_of_their_repeats() -> None:
    assert verdicts.timed_ratio(runs(1.0, 1.1, 1.05), runs(3.0, 3.2, 3.1)) == 3.0  # tight, apart
    assert verdicts.timed_ratio(runs(3.0, 3.2, 3.1), runs(1.0, 1.1, 1.05)) == 0.333
    assert verdicts.timed_ratio(runs(1.0, 1.1, 1.05), runs(1.02, 1.2, 1.01)) == 1.0  # overlapping
    # A stall in one run of either side (a busy machine) is noise, not a slower stack.
    assert verdicts.timed_ratio(runs(0.05, 0.05, 0.05), runs(16.0, 4.0, 0.066)) == 1.0
    assert verdicts.timed_ratio(runs(1.0), runs(9.0, 9.0, 9.0)) is None  # one timing says nothing
    assert verdicts.timed_ratio(None, runs(1.0, 1.0, 1.0)) is None


@pytest.mark.parametrize(("control", "candidate"), [("run1", "run2"), ("run2", "run1")])
def test_two_runs_of_one_stack_are_not_slower_either_way(control: str, candidate: str) -> None:
    """Recorded: the conv2d cases of one stack run twice on a busy 2-core CPU VM (the suite with 3
    repeats). One timing per case gave ratios of 0.005-593 between the two runs; a rule on them
    may call the stack slower, this one must not."""
    def read(name: str) -> dict[str, Case]:
        path = testkit.REPO / "tests" / "data" / "timings" / f"conv2d-cpu-{name}.jsonl"
        cases = {}
        for line in path.read_text().splitlines():
            record = json.loads(line)
            timing = record["timing"] or {}
            if record["status"] == "passed" and timing.get("forward_runs"):
                cases[record["case"]] = runs(*timing["forward_runs"])
        return cases

    before, after = read(control), read(candidate)
    ratios = [verdicts.timed_ratio(before[name], after[name]) for name in before if name in after]
    assert len([r for r in ratios if r]) >= 50
    typical = verdicts.typical_slowdown(ratios)
    assert typical is not None and typical < 1.5
    # What one timing per case said: the spread the old rule took for a difference.
    single = [after[n].forward_runs[0] / before[n].forward_runs[0] for n in before if n in after]
    assert max(single) / min(single) > 100


def test_fingerprint_changed() -> None:
    assert verdicts.fingerprint_changed(timed("pass", 1, "aa"), timed("pass", 1, "bb")) is True
    assert verdicts.fingerprint_changed(timed("pass", 1, "aa"), timed("pass", 1, "aa")) is False
    assert verdicts.fingerprint_changed(timed("pass", 1, None), timed("pass", 1, "aa")) is None
