"""The one writer of -o (cli/output.py): a report written whole or not at all, and the system's own
streams (/dev/null, /dev/stdout) written through, never replaced."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmatrix.cli import output
from convmatrix.errors import BadInput
from convmatrix.results import rundir


@pytest.fixture
def no_replacing(monkeypatch: pytest.MonkeyPatch) -> None:
    """write_whole would rename a file over the name: as root, over /dev/null itself. Refused here, so
    that a writer that would do it fails the test instead of breaking the machine."""
    def refuse(path: Path, parts: Any, base: Path | None = None) -> None:
        raise AssertionError(f"write_whole({path}) would replace it")

    monkeypatch.setattr(rundir, "write_whole", refuse)  # output calls it as rundir.write_whole


@pytest.mark.usefixtures("no_replacing")
def test_dev_null_is_written_through_and_stays_a_device() -> None:
    before = os.stat("/dev/null")
    output.write_output(iter(["a report\n", "of two lines\n"]), Path("/dev/null"))
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.usefixtures("no_replacing")
def test_dev_stdout_reaches_what_the_shell_gave_as_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    """Under capfd, fd 1 is a regular file (as `-o /dev/stdout > report.txt` makes it): still written
    through /dev/stdout, after what was there."""
    print("before", flush=True)
    output.write_output("the report\n", Path("/dev/stdout"))
    assert capfd.readouterr().out == "before\nthe report\n"
    assert os.path.islink("/dev/stdout")


@pytest.mark.usefixtures("no_replacing")
def test_a_name_dev_lacks_is_one_line_and_nothing_is_made() -> None:
    with pytest.raises(BadInput, match=r"^-o /dev/convmatrix-no-such-device: cannot write the report"):
        output.write_output("x\n", Path("/dev/convmatrix-no-such-device"))
    assert not os.path.lexists("/dev/convmatrix-no-such-device")


def test_a_link_to_dev_null_elsewhere_is_replaced_not_followed(tmp_path: Path) -> None:
    """A run directory's file may be a link a cell planted: the name gets the report, the target
    nothing (a link to /dev/null here, which is harmless to follow; one to a user's file would not be)."""
    link = tmp_path / "report.json"
    link.symlink_to("/dev/null")
    output.write_output("{}\n", link)
    assert not link.is_symlink() and link.read_text() == "{}\n"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_file_is_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "report.md"
    output.write_output(iter(["# a\n", "b\n"]), target)
    assert target.read_text() == "# a\nb\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.md"]


@settings(max_examples=25)
@given(name=st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="/"), min_size=1,
                    max_size=20).filter(lambda n: n not in (".", "..")),
       target=st.sampled_from(("/dev/null", "/dev/stdout", "/dev/zero", "/proc/self/fd/1")))
def test_no_name_outside_the_system_folders_writes_through_a_link(tmp_path_factory: pytest.TempPathFactory,
                                                                   name: str, target: str) -> None:
    """Whatever a run directory's file is called and wherever its link points, -o replaces the link
    there (never writes through it); only the system's own folders are written through."""
    folder = tmp_path_factory.mktemp("run")
    link = folder / name
    link.symlink_to(target)
    before = os.stat("/dev/null")
    output.write_output("report\n", link)
    assert not link.is_symlink() and link.read_text() == "report\n"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.stat("/dev/null").st_ino == before.st_ino
