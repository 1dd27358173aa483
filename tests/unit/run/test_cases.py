"""A run's case files (run/cases.py): checked once before any cell runs, handed over as JSON
copies named by their content, mounted read-only in containers, and keyed by content for reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmatrix.errors import BadInput
from convmatrix.run import cases

GOOD = '[[case]]\nname = "a"\nop = "conv2d"\ninput = [1, 4, 8, 8]\nout_channels = 4\nkernel = 3\n'


def test_split_takes_every_spelling_of_the_option() -> None:
    rest, files = cases.split(["-k", "x", "--cases", "a.toml", "--cases=b.json", "-x"])
    assert rest == ["-k", "x", "-x"] and files == ["a.toml", "b.json"]


def test_prepare_checks_copies_as_json_and_rewrites_the_options(tmp_path: Path) -> None:
    mine = tmp_path / "prod.toml"
    mine.write_text(GOOD)
    out = tmp_path / "run"
    args, made = cases.prepare([], ["-k", "prod", "--cases", str(mine)], out)
    (item,) = made
    assert item.stem == "prod" and item.count == 1 and item.copy.parent.parent == (out / "cases").resolve()
    assert item.copy.name == "prod.json"  # the stem, so the ids stay prod-...
    assert json.loads(item.copy.read_text())["case"][0]["name"] == "a"
    assert list(args) == ["-k", "prod", "--cases", str(item.copy)]
    assert item.record() == {"path": str(mine), "stem": "prod", "sha256": item.digest, "cases": 1}


def test_a_changed_file_gets_a_copy_of_its_own(tmp_path: Path) -> None:
    mine = tmp_path / "prod.toml"
    mine.write_text(GOOD)
    _, (first,) = cases.prepare([mine], [], tmp_path / "run")
    mine.write_text(GOOD.replace("kernel = 3", "kernel = 5"))
    _, (second,) = cases.prepare([mine], [], tmp_path / "run")
    assert first.copy != second.copy and first.copy.is_file() and second.copy.is_file()


def test_a_bad_file_is_bad_input_before_anything_is_written(tmp_path: Path) -> None:
    mine = tmp_path / "prod.toml"
    mine.write_text(GOOD + 'dtype = "half"\n')
    with pytest.raises(BadInput) as caught:
        cases.prepare([], ["--cases", str(mine)], tmp_path / "run")
    assert caught.value.exit_code == 2
    assert str(caught.value) == (f"{mine}: case 1 (a): dtype: 'half': expected one of float32, float16, "
                                 "bfloat16, float64")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("make", ["missing", "folder"])
def test_a_path_that_is_no_file_is_one_line(tmp_path: Path, make: str) -> None:
    path = tmp_path / "prod.toml"
    if make == "folder":
        path.mkdir()
    with pytest.raises(BadInput, match="no such case file" if make == "missing" else "not a regular file"):
        cases.check([path])


def test_the_reuse_key_sees_content_not_paths(tmp_path: Path) -> None:
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    one.write_text("same")
    two.write_text("same")
    assert cases.for_key(["-k", "x", "--cases", str(one)]) == cases.for_key(["-k", "x", f"--cases={two}"])
    two.write_text("other")
    assert cases.for_key(["--cases", str(one)]) != cases.for_key(["--cases", str(two)])


def test_remap_points_the_suite_at_the_mounts() -> None:
    args = ["-k", "x", "--cases", "/out/cases/ab/prod.json", "--cases", "/out/cases/cd/more.json"]
    mounts = {folder: f"/cases/{n}" for n, folder in enumerate(cases.folders(args))}
    assert mounts == {"/out/cases/ab": "/cases/0", "/out/cases/cd": "/cases/1"}
    assert cases.remap(args, mounts) == ["-k", "x", "--cases", "/cases/0/prod.json", "--cases", "/cases/1/more.json"]
