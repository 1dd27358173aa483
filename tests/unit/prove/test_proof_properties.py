"""prove's invariant (docs/contracts.md: Invariants), property-tested: PROVEN only when every case
that failed with the signature BEFORE ran AFTER and passed, and the control passed every case it
ran, healthy, both times."""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import strategies as gen
from convmatrix.errors import BadInput
from convmatrix.prove import proof
from convmatrix.results import Loaded
from convmatrix.results.outcomes import Outcome

pytestmark = pytest.mark.properties


@st.composite
def sides(draw: st.DrawFn) -> tuple[Loaded, Loaded]:
    """BEFORE and AFTER of one candidate and the control on the GPU keys they share. AFTER is mostly
    BEFORE with its signature cases fixed (so that proofs happen), and any case may change."""
    gpus = draw(st.lists(st.sampled_from(gen.GPU_KEYS), unique=True, min_size=1, max_size=2))
    before, after = [], []
    for gpu in gpus:
        control = draw(gen.case_sets(healthy=bool(draw(st.integers(0, 4)))))
        before.append(gen.cell_result("ctrl", gpu, control, control=True))
        if draw(st.integers(0, 9)):  # most of the time, the control ran AFTER too
            again = {n: c if draw(st.integers(0, 9)) else gen.case(n, *draw(gen.results)) for n, c in control.items()}
            after.append(gen.cell_result("ctrl", gpu, again, control=True))
        cases = draw(gen.case_sets())
        if draw(st.integers(0, 3)):  # mostly something to prove: one case fails with the signature
            hit = draw(st.sampled_from(sorted(cases)))
            cases[hit] = gen.case(hit, Outcome.FAIL, gen.SIGNATURE)
        before.append(gen.cell_result("cand", gpu, cases, facts=gen.Facts(killed=not draw(st.integers(0, 9)))))
        if draw(st.integers(0, 9)):
            fixed = {n: gen.case(n, Outcome.PASS, None) if c.family == gen.SIGNATURE and draw(st.integers(0, 5))
                     else c if draw(st.integers(0, 5)) else gen.case(n, *draw(gen.results)) for n, c in cases.items()}
            if not draw(st.integers(0, 9)):
                fixed.pop(draw(st.sampled_from(sorted(fixed))))
            after.append(gen.cell_result("cand", gpu, fixed, facts=gen.Facts(killed=not draw(st.integers(0, 9)))))
    return Loaded(results=before), Loaded(results=after)


@given(sides())
def test_proven_only_when_every_signature_case_passes_after_and_the_control_passes_both(
    both: tuple[Loaded, Loaded]
) -> None:
    before, after = both
    try:
        found = proof.prove(before, after, before_paths=["B"], after_paths=["A"], pairing=None,
                            allow_cpu=True)
    except BadInput:  # inputs that differ (exit 2): never a proof
        return
    event(str(found.verdict))
    if found.verdict != proof.Verdict.PROVEN:
        return
    signature = [(r.gpu_key, n) for r in before.results if r.cell == "cand"
                 for n, c in r.cases.items() if c.outcome.failing and c.family == gen.SIGNATURE]
    assert signature  # nothing to prove is never proven
    now = {(r.gpu_key, n): c for r in after.results if r.cell == "cand" for n, c in r.cases.items()}
    for key in signature:
        assert key in now and now[key].outcome == Outcome.PASS, key
    for side in (before, after):
        for r in side.results:
            if r.cell == "ctrl" and r.gpu_key in {g for g, _ in signature}:
                assert not r.problems and all(not c.outcome.failing for c in r.cases.values())
    # the candidate's pairs themselves completed, and nothing new fails after
    for r in (*before.results, *after.results):
        if r.cell == "cand" and r.gpu_key in {g for g, _ in signature}:
            assert not r.problems
    was = {(r.gpu_key, n): c for r in before.results if r.cell == "cand" for n, c in r.cases.items()}
    for key, case in now.items():
        if case.outcome.failing and key[0] in {g for g, _ in signature}:
            assert key in was and was[key].outcome.failing and was[key].family == case.family
