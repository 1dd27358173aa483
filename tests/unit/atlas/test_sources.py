"""atlas/sources.py and sources.toml: every known issue the project carries, plus the two published
facts only the atlas shows, each with its public link; one checker for both files."""

from __future__ import annotations

import pytest

from convmatrix.atlas import sources
from convmatrix.results import known
from convmatrix.results.known import KnownIssuesError


def test_every_carried_known_issue_is_a_source_row_with_its_link() -> None:
    rows = {s.issue.id: s for s in sources.load()}
    for issue in known.load():
        assert rows[issue.id].issue.source == issue.source and rows[issue.id].origin == "known_issues.toml"
    assert all(s.issue.source.startswith("https://") for s in rows.values())


def test_the_pre_turing_facts_come_with_their_links_and_cover_pre_turing_gpus_only() -> None:
    rows = {s.issue.id: s for s in sources.load() if s.origin == "sources.toml"}
    assert {s.issue.source for s in rows.values()} == {
        "https://github.com/conda-forge/admin-requests/pull/1742",
        "https://github.com/pytorch/pytorch/issues/162574"}
    for source in rows.values():
        assert source.issue.cudnn == known.Range(min="9.11.0")
        assert [sources.covers_capability(source.issue, c) for c in ("6.1", "7.0", "7.5", "9.0")] == [
            True, True, False, False]
    conda = rows["conda-forge-cudnn-9-11-cuda-12-pre-turing-broken"]
    assert conda.ranges == "CUDA [12.0, 13.0); cuDNN [9.11.0, inf); capability [-inf, 7.5)"


def test_an_id_in_both_files_is_refused() -> None:
    carried = known.load()
    with pytest.raises(KnownIssuesError, match=r"atlas/sources.toml: issue '.+': id: already in known_issues.toml"):
        sources.combine(carried, carried[:1])


def test_version_keys_order_as_versions_and_the_top_of_a_range_covers_its_patches() -> None:
    keys = [sources.version_key(v) for v in ("8.9.7", "9.1.0", "9.9.0", "9.10.2", "2.10.0+cu128")]
    assert keys == [8_009_007, 9_001_000, 9_009_000, 9_010_002, 2_010_000]
    assert sources.version_key("9.10", high=True) == 9_010_999
    assert sources.version_key("9", high=True) == 9_999_999
    assert sources.version_key(None) is None and sources.version_key("abc") is None
    assert sources.bounds(known.Range(max="9.3.0")) == (0, 9_003_000)
    assert sources.bounds(known.Range(min="9.11.0")) == (9_011_000, 10**12)
    assert sources.bounds(None) == (0, 10**12)
