"""tree.py: the directory-descriptor owner. Each test plants what a hostile cell could leave (a
symlink to a folder outside, a FIFO, a folder 1,100 levels deep) and checks that nothing outside
the tree changes and that what is refused is one line (Refused), never a traceback of another kind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from convmatrix import tree
from convmatrix.tree import Refused, Tree


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "precious").write_text("keep me\n")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"")
            for p in folder.rglob("*")}


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\0b", "x" * 256])
def test_a_name_is_one_bounded_component(name: str) -> None:
    with pytest.raises(Refused):
        tree.check_name(name)


def test_the_root_is_never_a_symlink(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "run").symlink_to(outside)
    with pytest.raises(Refused, match="not followed"):
        Tree.open(tmp_path / "run")


def test_a_planted_link_in_place_of_the_harness_folder_is_replaced_not_followed(tmp_path: Path,
                                                                               outside: Path) -> None:
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "explain").symlink_to(outside)
    before = snapshot(outside)
    with Tree.open(cell) as root:
        with pytest.raises(Refused, match="a symlink"):
            root.sub("explain")
        with root.sub("explain", create=True) as explain:
            explain.write("case.json", b"{}")
            with explain.sub("case", create=True) as case, case.append("log.txt") as log:
                log.write(b"line\n")
    assert snapshot(outside) == before
    assert (cell / "explain").is_dir() and not (cell / "explain").is_symlink()
    assert (cell / "explain" / "case" / "log.txt").read_text() == "line\n"


def test_a_write_never_follows_a_planted_temporary_name(tmp_path: Path, outside: Path) -> None:
    cell = tmp_path / "cell"
    cell.mkdir()
    # Every name the old writer could have picked for this process and its parent.
    for pid in (os.getpid(), os.getppid()):
        (cell / f".cell.json.{pid}.tmp").symlink_to(outside / "precious")
    with Tree.open(cell) as root:
        root.write("cell.json", b'{"schema": 1}\n')
    assert (outside / "precious").read_text() == "keep me\n"
    assert (cell / "cell.json").read_text() == '{"schema": 1}\n'


def test_a_write_replaces_a_symlink_or_fifo_at_its_name(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "a.json").symlink_to(outside / "precious")
    os.mkfifo(tmp_path / "b.json")
    with Tree.open(tmp_path) as root:
        root.write("a.json", b"A")
        root.write("b.json", b"B")
    assert (outside / "precious").read_text() == "keep me\n"
    assert (tmp_path / "a.json").read_text() == "A" and (tmp_path / "b.json").read_text() == "B"


def test_reads_and_appends_take_regular_files_only(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "link").symlink_to(outside / "precious")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 100)
    with Tree.open(tmp_path) as root:
        for name in ("link", "fifo"):
            with pytest.raises(Refused):
                root.read(name, 10)
            with pytest.raises(Refused):
                root.append(name)
        with pytest.raises(Refused, match="larger than"):
            root.read("big", 99)
        assert root.read("big", 100) == b"x" * 100
    assert (outside / "precious").read_text() == "keep me\n"


def deep(folder: Path, levels: int) -> Path:
    """folder/d/d/.../d, levels deep, made one level at a time (os.makedirs recurses)."""
    folder.mkdir(exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(fd)
    return folder.joinpath(*["d"] * levels)


def test_rmtree_removes_a_folder_1100_deep_and_never_follows_a_link(tmp_path: Path, outside: Path) -> None:
    doomed = tmp_path / "cell"
    bottom = deep(doomed, 1100)
    (bottom / "link").symlink_to(outside)
    (doomed / "top-link").symlink_to(outside)
    before = snapshot(outside)
    with Tree.open(tmp_path) as root:
        root.rmtree("cell")
    assert not doomed.exists() and snapshot(outside) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]


def test_rmtree_stops_past_its_entry_bound_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "many").mkdir()
    for i in range(20):
        (tmp_path / "many" / str(i)).write_text("")
    with Tree.open(tmp_path) as root, pytest.raises(Refused, match="more than 10 entries"):
        root.rmtree("many", max_entries=10)


def test_walks_and_copies_are_bounded_in_depth(tmp_path: Path) -> None:
    deep(tmp_path / "cell", 1100)
    (tmp_path / "copy").mkdir()
    with Tree.open(tmp_path / "cell") as cell, Tree.open(tmp_path / "copy") as copy:
        with pytest.raises(Refused, match=f"deeper than {tree.MAX_DEPTH} levels"):
            list(cell.walk())
        with pytest.raises(Refused, match="deeper than"):
            cell.copy_into(copy, limit=1 << 20)
    with Tree.open(tmp_path) as root:  # pytest's own cleanup recurses (shutil.rmtree on 3.11)
        root.rmtree("cell")
        root.rmtree("copy")


def test_a_copy_keeps_plain_files_and_folders_only(tmp_path: Path, outside: Path) -> None:
    source = tmp_path / "source"
    (source / "evidence").mkdir(parents=True)
    (source / "evidence" / "a.txt").write_text("A")
    (source / "cell.json").write_text("{}")
    (source / "cell.json").chmod(0o4755)
    (source / "link").symlink_to(outside / "precious")
    (source / "dirlink").symlink_to(outside)
    os.mkfifo(source / "fifo")
    (source / "big").write_bytes(b"x" * 11)
    (source / "skipped").mkdir()
    (source / "skipped" / "x").write_text("x")
    (tmp_path / "target").mkdir()
    with Tree.open(source) as src, Tree.open(tmp_path / "target") as dst:
        src.copy_into(dst, limit=10, only=["evidence", "cell.json", "link", "dirlink", "fifo", "big"])
    target = tmp_path / "target"
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == ["cell.json", "evidence",
                                                                            "evidence/a.txt"]
    assert not (target / "cell.json").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)


def test_parent_of_opens_each_component_without_following(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "blocking").symlink_to(outside)
    with pytest.raises(Refused), tree.parent_of(tmp_path / "blocking" / "results.jsonl", tmp_path):
        pass
    with tree.parent_of(tmp_path / "blocking" / "results.jsonl", tmp_path, create=True) as (folder, name):
        folder.write(name, b"{}\n")
    assert (tmp_path / "blocking" / "results.jsonl").is_file() and snapshot(outside) == {"precious": b"keep me\n"}
    with pytest.raises(Refused, match="outside"), tree.parent_of(tmp_path.parent / "x", tmp_path):
        pass


def test_a_name_of_255_bytes_in_fewer_characters_is_written(tmp_path: Path) -> None:
    """Found by the tree property test (issue 32, item 8): the temporary name kept 200 characters
    of the name, 254 bytes for 127 'é', and the write failed with ENAMETOOLONG (exit 4)."""
    name = "é" * 127
    with Tree.open(tmp_path) as root:
        root.write(name, b"x")
    assert (tmp_path / name).read_bytes() == b"x" and sorted(p.name for p in tmp_path.iterdir()) == [name]
