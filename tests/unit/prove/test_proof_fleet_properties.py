"""Issue 45, property-tested over fleets (tests/strategies.py: i45 prove): a fix is PROVEN exactly
when no AFTER candidate anywhere fails with the signature, every control on every host and GPU key
of both sides is healthy and passing, something failed with the signature BEFORE and each such
cell has its counterpart AFTER, and a GPU took part AFTER (or --allow-cpu). Neither the order of
the results nor the names of the hosts change it."""

from __future__ import annotations

import random

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import strategies as gen
from convmatrix.prove import proof
from convmatrix.results import CellResult, Loaded
from convmatrix.results.outcomes import Outcome

pytestmark = pytest.mark.properties


def signature(result: CellResult) -> bool:
    return any(c.outcome.failing and c.family == gen.SIGNATURE for c in result.cases.values())


def pairs(was: CellResult, now: CellResult) -> bool:
    return was.gpu_key == now.gpu_key and (not was.host or not now.host or was.host == now.host)


def expected(fleet: gen.ProveFleet) -> proof.Verdict:
    after = [r for r in fleet.after if r.cell == "cand"]
    # The proof's places: each AFTER candidate's, each BEFORE candidate's that pairs or failed with
    # the signature (one that does neither is listed, not judged).
    places = {"before": {(r.host, r.gpu_key) for r in fleet.before
                         if r.cell == "cand" and (signature(r) or any(pairs(r, a) for a in after))},
              "after": {(r.host, r.gpu_key) for r in after}}
    controls = {side: {(r.host, r.gpu_key): r for r in results if r.cell == "ctrl"}
                for side, results in (("before", fleet.before), ("after", fleet.after))}
    # Every control that ran, on either side, and one on each place of the proof.
    for side, where in places.items():
        for place in where | set(controls[side]):
            found = controls[side].get(place)
            if found is None or found.problems or any(c.outcome.failing for c in found.cases.values()):
                return proof.Verdict.UNHEALTHY_CONTROL
    broken = [r for r in fleet.before if r.cell == "cand" and signature(r)]
    paired = all(any(pairs(b, a) for a in after) for b in broken)
    gpu = any(r.gpu_key != "cpu" and r.cases for r in fleet.after)
    if broken and paired and not any(signature(r) for r in after) and (gpu or fleet.allow_cpu):
        return proof.Verdict.PROVEN
    return proof.Verdict.NOT_PROVEN


def run(before: list[CellResult] | tuple[CellResult, ...], after: list[CellResult] | tuple[CellResult, ...],
        allow_cpu: bool) -> proof.Proof:
    return proof.prove(Loaded(results=list(before)), Loaded(results=list(after)), before_paths=["B"],
                       after_paths=["A"], pairing=None, allow_cpu=allow_cpu)


def renamed(results: tuple[CellResult, ...], names: dict[str, str]) -> list[CellResult]:
    from dataclasses import replace

    return [replace(r, host=names.get(r.host, r.host)) for r in results]


@given(gen.prove_fleets(), st.randoms(use_true_random=False))
def test_proven_exactly_when_no_after_cell_fails_with_the_signature_and_every_control_passes(
    fleet: gen.ProveFleet, rng: random.Random
) -> None:
    found = run(fleet.before, fleet.after, fleet.allow_cpu)
    event(str(found.verdict))
    assert found.verdict == expected(fleet), (found.reasons, fleet)
    if found.verdict == proof.Verdict.PROVEN:
        assert not any(signature(r) for r in fleet.after if r.cell == "cand")
        assert all(line.after == Outcome.PASS for p in found.pairs for line in p.lines)
    # The order of the results, and which host is called what, change nothing.
    before, after = list(fleet.before), list(fleet.after)
    rng.shuffle(before)
    rng.shuffle(after)
    assert run(before, after, fleet.allow_cpu) == found
    names = dict(zip(gen.PROVE_HOSTS, rng.sample(gen.PROVE_HOSTS, len(gen.PROVE_HOSTS)), strict=True))
    assert run(renamed(fleet.before, names), renamed(fleet.after, names), fleet.allow_cpu).verdict == found.verdict
