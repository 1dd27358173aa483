"""atlas/merge.py: fleets kept apart in each cell of the table, a disagreement kept (never averaged),
what a run says of a stack (absolute, not against its fleet's control), a run given twice counted once."""

from __future__ import annotations

import dataclasses

import atlaskit
from atlaskit import H200, H200_MIG, NEW, OLD, V100, cell, failed, passed, run
from convmatrix.atlas import merge
from convmatrix.atlas.merge import DISAGREE, FAIL, FLAKY, OTHER, PASS, Column, Row
from convmatrix.atlas.model import Bundle, Stack


def bundle(fleet: str, *runs: object) -> Bundle:
    return Bundle(fleet=fleet, created="2026-12-05", tool="0.1.0", runs=runs)  # type: ignore[arg-type]


def new_on(column: Column) -> merge.AtlasCell:
    atlas = merge.merge([atlaskit.fleet_a(), atlaskit.fleet_b()])
    return atlas.cells[(Row(NEW.torch, NEW.cuda, NEW.cudnn), column)]


def test_two_fleets_that_disagree_are_both_kept() -> None:
    here = new_on(Column("9.0"))
    assert here.status == DISAGREE and here.disagree
    a, b = here.tallies["fleet-a"], here.tallies["fleet-b"]
    assert (a.status, a.count(FAIL), a.count(PASS)) == (FAIL, 2, 0)
    assert (b.status, b.count(FAIL), b.count(PASS)) == (PASS, 0, 1)
    assert here.runs(FAIL) == 2 and here.runs(PASS) == 1
    assert (here.first, here.last) == ("2026-12-01", "2026-12-05")
    assert (a.first, a.last) == ("2026-12-01", "2026-12-03")
    assert dict(here.families) == {"cudnn_not_supported": 2} and dict(here.subcodes) == {3002: 2}


def test_a_case_page_lists_the_fleet_that_passed_beside_the_ones_that_failed() -> None:
    listed = new_on(Column("9.0")).failing_cases("cudnn_not_supported")
    assert list(listed) == ["conv2d-fp16"]
    assert sorted((s.fleet, s.failing) for s in listed["conv2d-fp16"]) == [
        ("fleet-a", True), ("fleet-a", True), ("fleet-b", False)]


def test_a_mig_profile_is_a_column_of_its_own_under_its_generation() -> None:
    atlas = merge.merge([atlaskit.fleet_a(), atlaskit.fleet_b()])
    assert [c.key for c in atlas.columns] == ["sm70", "sm90", "sm90 1g.18gb"]
    assert {c.generation for c in atlas.columns} == {"sm70", "sm90"}
    assert new_on(Column("9.0", "1g.18gb")).status == PASS


def test_a_failure_in_either_of_two_cells_of_one_run_is_the_runs_failure() -> None:
    found = merge.merge([bundle("f", run("r1", "2026-12-01", cell(NEW, H200, passed("x")),
                                         cell(NEW, H200, failed("y"))))])
    tally = found.cells[(Row(NEW.torch, NEW.cuda, NEW.cudnn), Column("9.0"))].tallies["f"]
    assert tally.runs == {"r1r1r1r1r1r1r1r1": FAIL}


def test_what_a_run_says_is_absolute_not_against_its_control() -> None:
    # A case that fails as on the control (verdict ok) still fails the stack; a driver too old
    # (verdict unsupported) and a cell that never completed say nothing of it.
    as_on_control = failed("x", verdict="ok")
    too_old = dataclasses.replace(failed("x", family="cuda_driver_insufficient"), verdict="unsupported")
    found = merge.merge([bundle("f",
                                run("r1", "2026-12-01", cell(NEW, H200, as_on_control, verdict="ok")),
                                run("r2", "2026-12-02", cell(NEW, H200, too_old, verdict="unsupported")),
                                run("r3", "2026-12-03", cell(NEW, H200, verdict="invalid")))])
    tally = found.cells[(Row(NEW.torch, NEW.cuda, NEW.cudnn), Column("9.0"))].tallies["f"]
    assert sorted(tally.runs.values()) == [FAIL, OTHER, OTHER]
    assert dict(tally.families) == {"cudnn_not_supported": 1}


def test_a_fleet_with_runs_that_fail_and_pass_is_flaky_not_a_disagreement() -> None:
    found = merge.merge([bundle("f", run("r1", "2026-12-01", cell(NEW, H200, failed("x"))),
                                run("r2", "2026-12-02", cell(NEW, H200, passed("x"))))])
    here = found.cells[(Row(NEW.torch, NEW.cuda, NEW.cudnn), Column("9.0"))]
    assert here.status == FLAKY and not here.disagree


def test_a_run_given_twice_is_counted_once_and_said() -> None:
    found = merge.merge([atlaskit.fleet_a(), atlaskit.fleet_a()])
    here = found.cells[(Row(NEW.torch, NEW.cuda, NEW.cudnn), Column("9.0"))]
    assert here.runs(FAIL) == 2
    assert found.fleets == ["fleet-a"] and found.bundles == 2
    assert found.notes == [f"fleet fleet-a: run {r} given twice; the first copy kept"
                           for r in ("a1a1a1a1a1a1a1a1", "a2a2a2a2a2a2a2a2")]


def test_rows_and_columns_are_ordered_as_versions() -> None:
    stacks = [dataclasses.replace(OLD, torch=t, cudnn=c) for t, c in
              (("2.10.0", "9.10.2"), ("2.9.1", "9.8.0"), ("2.9.1", "9.10.2"))]
    gpus = [V100, dataclasses.replace(H200, capability="12.0"), H200]
    found = merge.merge([bundle("f", run("r1", "2026-12-01", *(cell(s, g, passed("x")) for s in stacks for g in gpus)))])
    assert [(r.torch, r.cudnn) for r in found.rows] == [("2.9.1", "9.8.0"), ("2.9.1", "9.10.2"), ("2.10.0", "9.10.2")]
    assert [c.key for c in found.columns] == ["sm70", "sm90", "sm120"]


def test_unknown_versions_still_make_a_row() -> None:
    bare = Stack(torch="2.5.1", cuda=None, cudnn=None, driver=None, image_digest=None, lane="host")
    found = merge.merge([bundle("f", run("r1", "2026-12-01", cell(bare, H200_MIG, passed("x"))))])
    assert [r.label for r in found.rows] == ["torch 2.5.1 · CUDA none · cuDNN none"]
