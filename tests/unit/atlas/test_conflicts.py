"""Issue 45: two bundles that claim one run (one fleet's label and run id). With different contents
they are a conflict, shown on the index page and in atlas.json, and neither copy is counted or
shown as data, whichever bundle is given first, and `convmatrix atlas` exits 1; the same run given
twice (the same records, whatever the bytes) is kept once. The summary counts the runs kept."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import atlaskit
import strategies
from atlaskit import H200, NEW, cell, passed, run
from convmatrix.atlas import bundle as bundle_file
from convmatrix.atlas import merge, site, sources
from convmatrix.atlas.merge import FAIL, Column, Row
from convmatrix.atlas.model import Bundle
from convmatrix.cli.main import main

A1, A2, B1 = "a1a1a1a1a1a1a1a1", "a2a2a2a2a2a2a2a2", "b1b1b1b1b1b1b1b1"


def forged() -> Bundle:
    """fleet-a's run a1 as someone else wrote it: every case passed (atlaskit.fleet_a's a1 fails)."""
    return Bundle(fleet="fleet-a", created="2026-12-04", tool="0.1.0", runs=(
        run("a1", "2026-12-01", cell(NEW, H200, passed("conv2d-fp16"), passed("conv2d-fp32"))),))


def atlas_of(tmp_path: Path, *bundles: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str,
                                                                                           str, str]:
    """(exit code, atlas.json, index.html, stdout, stderr) of `convmatrix atlas` on the bundles."""
    out = tmp_path / "site"
    code = main(["atlas", *map(str, bundles), "-o", str(out)])
    said = capsys.readouterr()
    return (code, json.loads((out / "atlas.json").read_text()), (out / "index.html").read_text(), said.out,
            said.err)


def conflict_section(index: str) -> str:
    found = re.search(r'<section id="conflicts">.*?</section>', index, re.DOTALL)
    assert found is not None, "no conflict section on the page"
    return found[0]


@pytest.mark.parametrize("forged_first", [True, False])
def test_a_forged_bundle_beside_the_real_one_is_a_conflict_neither_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], forged_first: bool) -> None:
    fake = atlaskit.write(tmp_path / "fake.json", forged())
    real = atlaskit.write(tmp_path / "real.json", atlaskit.fleet_a())
    other = atlaskit.write(tmp_path / "b.json", atlaskit.fleet_b())
    given_ = [fake, real, other] if forged_first else [other, real, fake]
    code, data, index, out, err = atlas_of(tmp_path, *given_, capsys=capsys)

    assert code == 1
    assert data["conflicts"] == [{"fleet": "fleet-a", "run": A1, "bundles": ["fake.json", "real.json"]}]
    assert sorted((r["fleet"], r["run"]) for r in data["runs"]) == [("fleet-a", A2), ("fleet-b", B1)]
    # Neither copy of a1 is data: fleet-a's H200 cell holds its run a2 only (one failure, no pass).
    h200 = next(c for c in data["cells"] if c["column"] == "sm90" and c["torch"] == NEW.torch)
    fleet_a = next(f for f in h200["fleets"] if f["fleet"] == "fleet-a")
    assert fleet_a["runs"] == {"fail": 1, "pass": 0, "other": 0}
    assert {s["run"] for seen in h200["failing_cases"].values() for s in seen} == {A2, B1}
    # fleet-a's MIG slice ran in a1 only: no cell of it is left.
    assert [c["column"] for c in data["cells"]] == ["sm70", "sm90"]
    assert json.dumps(data["cells"]).count(A1) == 0

    section = conflict_section(index)
    assert all(word in section for word in ("fleet-a", A1, "fake.json", "real.json"))
    assert A1 not in index.replace(section, "")
    assert "2 run(s)" in index and "2 run(s)" in out and "4 run(s)" not in out
    assert err.splitlines() == [f"convmatrix: conflict: fleet fleet-a: run {A1} given with different contents by "
                                "fake.json, real.json; neither is counted"]


def test_the_same_bundle_given_twice_is_one_run_counted_once(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    a = atlaskit.write(tmp_path / "a.json", atlaskit.fleet_a())
    again = atlaskit.write(tmp_path / "again.json", atlaskit.fleet_a())
    code, data, index, out, err = atlas_of(tmp_path, a, again, capsys=capsys)
    assert (code, err) == (0, "")
    assert data["conflicts"] == [] and '<section id="conflicts">' not in index
    assert sorted(r["run"] for r in data["runs"]) == [A1, A2]
    assert "2 run(s)" in out and "2 run(s)" in index
    assert data["notes"] == [f"fleet fleet-a: run {r} given twice; the first copy kept" for r in (A1, A2)]
    h200 = next(c for c in data["cells"] if c["column"] == "sm90" and c["torch"] == NEW.torch)
    assert h200["runs"] == {"fail": 2, "pass": 0, "other": 0}


def test_the_same_records_in_other_bytes_and_order_are_one_run(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Compared as records, not bytes: a weekly bundle of another day, holding the run with its cells
    and cases in another order beside a run of its own, in a file laid out otherwise."""
    nightly = atlaskit.fleet_a()
    a1 = nightly.runs[0]
    reordered = dataclasses.replace(a1, cells=tuple(dataclasses.replace(c, cases=c.cases[::-1])
                                                    for c in a1.cells[::-1]))
    a3 = run("a3", "2026-12-04", cell(NEW, H200, passed("conv2d-fp16")))
    weekly = dataclasses.replace(nightly, created="2026-12-07", runs=(a3, reordered), dropped=())
    wrapper = json.loads(bundle_file.write(weekly))
    spaced = tmp_path / "weekly.json"
    spaced.write_text(json.dumps(wrapper, indent=2, sort_keys=True))
    code, data, _, out, _ = atlas_of(tmp_path, spaced, atlaskit.write(tmp_path / "a.json", nightly), capsys=capsys)
    assert code == 0 and data["conflicts"] == []
    assert sorted(r["run"] for r in data["runs"]) == [A1, A2, "a3a3a3a3a3a3a3a3"] and "3 run(s)" in out


def test_a_conflict_with_a_refused_bundle_exits_2_and_says_both(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json")
    code, data, _, _, err = atlas_of(tmp_path, atlaskit.write(tmp_path / "fake.json", forged()), garbage,
                                     atlaskit.write(tmp_path / "real.json", atlaskit.fleet_a()), capsys=capsys)
    assert code == 2 and data["refused"] == 1 and len(data["conflicts"]) == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"convmatrix: refused: {garbage}: ") and lines[1].startswith("convmatrix: conflict: ")


def test_files_of_one_name_in_two_folders_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tonight").mkdir()
    (tmp_path / "lastweek").mkdir()
    code, data, index, _, _ = atlas_of(tmp_path, atlaskit.write(tmp_path / "tonight" / "fleet-a.json", forged()),
                                       atlaskit.write(tmp_path / "lastweek" / "fleet-a.json", atlaskit.fleet_a()),
                                       capsys=capsys)
    assert code == 1
    names = data["conflicts"][0]["bundles"]
    assert len(set(names)) == 2 and all(n.startswith("fleet-a.json (sha256 ") for n in names)
    assert str(tmp_path) not in index and str(tmp_path) not in json.dumps(data)  # the builder's paths stay out


def test_merge_drops_both_copies_whichever_comes_first() -> None:
    named = [("x.json", forged()), ("y.json", atlaskit.fleet_a())]
    for given_ in (named, named[::-1]):
        atlas = merge.merge([b for _, b in given_], names=[n for n, _ in given_])
        assert [(c.fleet, c.run, c.bundles) for c in atlas.conflicts] == [("fleet-a", A1, ("x.json", "y.json"))]
        assert list(atlas.runs) == [("fleet-a", A2)]
        here = atlas.cells[(Row(NEW.torch, NEW.cuda, NEW.cudnn), Column("9.0"))]
        assert here.tallies["fleet-a"].runs == {A2: FAIL}
        assert all(s.run == A2 for seen in here.cases.values() for s in seen)


def test_a_conflict_without_file_names_names_the_bundles_by_checksum() -> None:
    atlas = merge.merge([forged(), atlaskit.fleet_a()])
    assert sorted(atlas.conflicts[0].bundles) == sorted(
        f"bundle sha256 {bundle_file.digest(b)[:12]}" for b in (forged(), atlaskit.fleet_a()))


def test_the_conflict_section_escapes_what_it_names() -> None:
    hostile = atlaskit.HOSTILE
    one = dataclasses.replace(forged(), fleet=hostile)
    other = dataclasses.replace(atlaskit.fleet_a(), fleet=hostile)
    atlas = merge.merge([one, other], names=[hostile + ".json", "b.json"])
    index = next(data for folder, name, data in site.files(atlas, sources.load()) if name == "index.html").decode()
    section = conflict_section(index)
    assert "<script>alert" not in section and "&lt;script&gt;alert(1)&lt;/script&gt;" in section


# --- the property (tests/strategies.py, section i45) ----------------------------------------------

def outputs(claimed: strategies.ClaimedRuns, order: list[int]) -> tuple[merge.Atlas, dict[str, bytes]]:
    atlas = merge.merge([claimed.bundles[i] for i in order], names=[claimed.names[i] for i in order])
    return atlas, {f"{folder}/{name}" if folder else name: data
                   for folder, name, data in site.files(atlas, sources.load())}


@given(strategies.atlas_claimed_runs())
def test_the_order_of_the_bundles_does_not_change_what_is_kept(claimed: strategies.ClaimedRuns) -> None:
    first, files = outputs(claimed, list(range(len(claimed.bundles))))
    second, files_again = outputs(claimed, list(claimed.order))
    data, data_again = json.loads(files["atlas.json"]), json.loads(files_again["atlas.json"])

    assert {(r["fleet"], r["run"]) for r in data["runs"]} == set(claimed.kept)
    assert len(data["runs"]) == len(claimed.kept)
    assert {(c["fleet"], c["run"]) for c in data["conflicts"]} == set(claimed.conflicts)
    for found in (data, data_again):
        for key in ("runs", "conflicts", "cells", "notes", "bundles", "columns"):
            assert found[key] == data[key], key
    assert sorted(data_again["fleets"]) == sorted(data["fleets"])
    assert files_again["atlas.csv"] == files["atlas.csv"]
    assert f"{len(claimed.kept)} run(s)" in files["index.html"].decode()

    # Only kept runs are counted, and a conflicting run's data is nowhere.
    conflicting = {run for _, run in claimed.conflicts}
    for atlas in (first, second):
        assert set(atlas.runs) == set(claimed.kept)
        for here in atlas.cells.values():
            for tally in here.tallies.values():
                assert {(tally.fleet, r) for r in tally.runs} <= claimed.kept
            assert not {s.run for seen in here.cases.values() for s in seen} & conflicting
    index = files["index.html"].decode()
    shown = index.replace(conflict_section(index), "") if claimed.conflicts else index
    for name, text in {**files, "index.html": shown.encode()}.items():
        if name != "atlas.json":
            assert not [run for run in conflicting if run.encode() in text], name


def test_a_repro_param_true_where_the_other_copy_says_1_is_a_difference() -> None:
    """== over the dataclasses takes True for 1; the records (JSON, as the file and a repro script
    have them) do not."""
    real = atlaskit.fleet_a()
    a1 = real.runs[0]
    first = a1.cells[0]
    bias = dataclasses.replace(first.cases[0], repro=atlaskit.repro(bias=1))
    other = dataclasses.replace(a1, cells=(dataclasses.replace(first, cases=(bias, *first.cases[1:])), *a1.cells[1:]))
    assert other == a1  # what == alone would have merged as one run
    tweaked = dataclasses.replace(real, runs=(other,))
    for given_ in ([real, tweaked], [tweaked, real]):
        assert [(c.fleet, c.run) for c in merge.merge(given_).conflicts] == [("fleet-a", A1)]
