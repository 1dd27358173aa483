"""Issue 48: what a case that passed on both sides cost against the control (results.verdicts.Cost):
fallback, then memory, then slower, each with its ratio; red only under a --fail-on naming it; and
no slower claimed for the same stack against itself, however loaded the runner."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies
from convmatrix.report import verdicts as report_verdicts
from convmatrix.results import verdicts as v
from convmatrix.results.outcomes import Outcome, Verdict

MIB = 1 << 20


@dataclass
class Rec:
    backend: str | None = "Mkldnn"
    peak_bytes: int | None = 2 * MIB
    forward_runs: tuple[float, ...] = (10.0, 10.5, 11.0)
    reference_ms: tuple[float, ...] = (1.0, 1.05, 1.0, 1.02)  # before each run, and after the last
    outcome: Outcome = Outcome.PASS
    family: str | None = None


def test_onednn_to_slow3d_is_a_fallback_naming_both_with_its_ratios() -> None:
    cost = v.cost_of(Rec(), Rec(backend="Slow3d", peak_bytes=28 * MIB, forward_runs=(31.0, 32.0, 33.0)))
    assert cost.verdict == Verdict.FALLBACK and cost.memory and cost.slower
    assert cost.memory_ratio == 14.0 and cost.time_ratio == pytest.approx(32 / 10.5, abs=1e-3)
    assert cost.words().startswith("Mkldnn → Slow3d; memory ×14.00; time ×3.05 (at least ×2.82)")


@pytest.mark.parametrize(("control", "case", "expected"), [
    ("Cudnn", "SlowDilated2d", Verdict.FALLBACK), ("MiopenTranspose", "SlowTranspose3d", Verdict.FALLBACK),
    ("Slow2d", "Mkldnn", Verdict.OK), ("Cudnn", "CudaDepthwise2d", Verdict.OK), (None, "Slow3d", Verdict.OK),
])
def test_fallback_is_a_library_path_left_for_a_native_one(control: str | None, case: str, expected: Verdict) -> None:
    assert v.cost_of(Rec(backend=control), Rec(backend=case)).verdict == expected


def test_memory_needs_the_ratio_and_a_mebibyte_more() -> None:
    assert v.cost_of(Rec(), Rec(peak_bytes=4 * MIB)).verdict == Verdict.MEMORY
    assert v.cost_of(Rec(peak_bytes=1000), Rec(peak_bytes=100_000)).verdict == Verdict.OK  # x100, but 97 kB


def test_a_loaded_runner_leaves_it_ok_and_says_the_timing_was_unsure() -> None:
    slow = Rec(forward_runs=(40.0, 41.0, 42.0), reference_ms=(4.0, 4.2, 4.1, 4.0))
    cost = v.cost_of(Rec(), slow)
    assert cost.verdict == Verdict.OK and cost.unsure and "timing unsure" in cost.words()
    assert v.cost_of(Rec(), Rec(forward_runs=(40.0, 41.0, 42.0))).verdict == Verdict.SLOWER
    assert v.cost_of(Rec(), Rec(forward_runs=(40.0, 41.0, 42.0)), timed=False).verdict == Verdict.OK


def test_a_load_between_two_references_claims_no_slower() -> None:
    """The false slower of a real run (tests/integration/test_report_browser.py): a clean candidate
    beside a control, both runs loaded by the other's, the candidate's three runs slow and its two
    references, before and after them, quick. Without a reference beside every run, no claim."""
    quick = (1.0, 1.02)
    cost = v.cost_of(Rec(reference_ms=quick), Rec(forward_runs=(40.0, 41.0, 42.0), reference_ms=quick))
    assert cost.verdict == Verdict.OK and cost.unsure and "not one beside each" in cost.unsure


@given(strategies.bursty_self_timings())
def test_a_burst_between_measurements_never_reads_slower(timed: tuple[tuple[float, ...], ...]) -> None:
    control, candidate, control_ref, candidate_ref = timed
    cost = v.cost_of(Rec(forward_runs=control, reference_ms=control_ref),
                     Rec(forward_runs=candidate, reference_ms=candidate_ref))
    assert cost.verdict != Verdict.SLOWER, cost


def test_one_fast_candidate_run_keeps_it_from_slower() -> None:
    assert v.cost_of(Rec(), Rec(forward_runs=(10.9, 40.0, 41.0))).verdict == Verdict.OK


@given(st.booleans(), st.booleans(), st.booleans())
def test_the_worst_cost_wins_in_the_one_order(fallback: bool, memory: bool, slower: bool) -> None:
    case = Rec(backend="Slow3d" if fallback else "Mkldnn", peak_bytes=8 * MIB if memory else 2 * MIB,
               forward_runs=(40.0, 41.0, 42.0) if slower else (10.0, 10.5, 11.0))
    found = [w for w, on in ((Verdict.FALLBACK, fallback), (Verdict.MEMORY, memory), (Verdict.SLOWER, slower)) if on]
    assert v.cost_of(Rec(), case).verdict == v.worst(found)
    assert v.RANK[Verdict.UNSUPPORTED] < v.RANK[Verdict.FALLBACK] < v.RANK[Verdict.MEMORY] \
        < v.RANK[Verdict.SLOWER] < v.RANK[Verdict.CHANGED]


@given(strategies.self_timings())
def test_the_same_stack_against_itself_is_never_slower_however_loaded(timed: tuple[tuple[float, ...], ...]) -> None:
    control, candidate, control_ref, candidate_ref = timed
    cost = v.cost_of(Rec(forward_runs=control, reference_ms=control_ref),
                     Rec(forward_runs=candidate, reference_ms=candidate_ref))
    assert cost.verdict != Verdict.SLOWER


@pytest.mark.parametrize(("policy", "found", "red"), [
    ("regression", {Verdict.FALLBACK}, False), ("fallback", {Verdict.FALLBACK}, True),
    ("regression,fallback", {Verdict.MEMORY}, False), ("memory,slower", {Verdict.MEMORY}, True),
])
def test_a_cost_is_red_only_under_a_policy_naming_it(policy: str, found: set[Verdict], red: bool) -> None:
    (worst,) = found
    assert v.fails(worst, policy=policy, found=found) is red


def test_a_regressed_cell_holding_a_fallback_is_red_under_fail_on_fallback() -> None:
    assert v.fails(Verdict.REGRESSION, policy="fallback", found={Verdict.REGRESSION, Verdict.FALLBACK})
    assert not v.fails(Verdict.REGRESSION, policy="fallback", found={Verdict.REGRESSION})


def test_fail_on_takes_a_comma_separated_list() -> None:
    assert report_verdicts.fail_on("regression,fallback") == "regression,fallback"
    assert report_verdicts.policy("first-red,fallback") == "fallback"
    for bad in ("regression,fallbak", "never,fallback"):
        with pytest.raises(ValueError, match=r"fallbak|never"):
            report_verdicts.fail_on(bad)
