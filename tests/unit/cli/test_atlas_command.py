"""`convmatrix atlas`: bundles read with the untrusted reader, a bad one reported in one line naming
it and left out while the rest are merged (exit 2), none readable: nothing written (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import atlaskit
from convmatrix.cli.main import main


@pytest.fixture
def bundles(tmp_path: Path) -> list[Path]:
    return [atlaskit.write(tmp_path / "a.json", atlaskit.fleet_a()),
            atlaskit.write(tmp_path / "b.json", atlaskit.fleet_b())]


def hostile_files(tmp_path: Path) -> list[Path]:
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\xff<script>alert(1)</script>")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    edited = tmp_path / "edited.json"
    edited.write_bytes(atlaskit.write(tmp_path / "e.json", atlaskit.fleet_b()).read_bytes()
                       .replace(b'"fleet-b"', b'"fleet-c"'))
    return [garbage, deep, edited]


def test_good_bundles_make_a_site_and_exit_0(bundles: list[Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["atlas", *map(str, bundles), "-o", str(tmp_path / "site")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("atlas: 2 bundle(s) merged (2 fleet(s), 3 run(s), 2 stack(s) on 3 GPU column(s), "
                          "1 where fleets disagree); 0 refused; ")
    data = json.loads((tmp_path / "site" / "atlas.json").read_text())
    assert data["fleets"] == ["fleet-a", "fleet-b"] and data["refused"] == 0
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "atlas.csv").is_file()


def test_a_bad_bundle_among_good_ones_is_one_line_and_the_rest_are_merged(
        bundles: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = atlaskit.write(tmp_path / "hostile.json", atlaskit.hostile(readable=True))
    bad = hostile_files(tmp_path)
    assert main(["atlas", str(bundles[0]), *map(str, bad), str(bundles[1]), str(hostile),
                 "-o", str(tmp_path / "site")]) == 2
    said = capsys.readouterr()
    lines = said.err.splitlines()
    assert len(lines) == 3, lines
    for path, line in zip(bad, lines, strict=True):
        assert line.startswith(f"convmatrix: refused: {path}: "), line
    assert "not a bundle (not JSON" in lines[0] and "nested 100,000 levels deep" in lines[1]
    assert "field sha256: does not match the bundle" in lines[2]
    assert "3 bundle(s) merged (3 fleet(s)" in said.out and "; 3 refused;" in said.out
    data = json.loads((tmp_path / "site" / "atlas.json").read_text())
    assert data["fleets"] == ["fleet-a", "fleet-b", "hostile"] and data["refused"] == 3
    index = (tmp_path / "site" / "index.html").read_text()
    assert "3 bundle(s) could not be read" in index
    assert str(tmp_path) not in index  # the builder's own paths stay out of what is published
    pages = "".join(p.read_text() for p in (tmp_path / "site" / "pages").iterdir())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages and "<script>alert" not in pages


def test_no_readable_bundle_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["atlas", *map(str, hostile_files(tmp_path)), str(tmp_path / "missing.json"),
                 "-o", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == f"convmatrix: refused: {tmp_path / 'missing.json'}: no such file"
    assert err[-1] == "convmatrix: atlas: no bundle could be read; nothing written"
    assert not (tmp_path / "site").exists()


def test_an_output_folder_that_is_not_an_atlas_is_refused(bundles: list[Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    assert main(["atlas", *map(str, bundles), "-o", str(tmp_path / "home")]) == 2
    assert "holds files that are not an atlas" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "home").iterdir()] == ["notes.txt"]


def test_an_output_named_with_a_line_break_is_one_line_each_way(bundles: list[Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A folder name is the user's, but the messages are one line each whatever it holds."""
    made, blocked = tmp_path / "site\nnext", tmp_path / "file\nnext"
    assert main(["atlas", *map(str, bundles), "-o", str(made)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].endswith("file(s) in " + str(tmp_path / "site next")), out
    blocked.write_text("a file, not a folder")
    assert main(["atlas", *map(str, bundles), "-o", str(blocked)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "cannot write the site" in err[0], err
