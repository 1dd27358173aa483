"""Where the shipped folders are: a checkout's own, else the wheel's copy (src/convmatrix/shipped.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmatrix import shipped
from testkit import REPO


def test_a_source_tree_uses_its_own_folders() -> None:
    assert shipped.shipped("suites", "conftest.py") == REPO / "suites"
    assert shipped.shipped("images", "Dockerfile") == REPO / "images"


def test_an_installed_package_uses_its_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "lib" / "python3.11" / "site-packages" / "convmatrix"
    (package / "suites").mkdir(parents=True)
    (tmp_path / "lib" / "python3.11" / "suites").mkdir()  # a stray folder beside site-packages: not it
    (tmp_path / "lib" / "python3.11" / "suites" / "conftest.py").write_text("")
    monkeypatch.setattr(shipped, "PACKAGE", package)
    assert shipped.shipped("suites", "conftest.py") == package / "suites"


def test_a_source_tree_without_the_folder_falls_back_to_the_package(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "src" / "convmatrix"
    package.mkdir(parents=True)
    (tmp_path / "images").mkdir()  # no Dockerfile in it
    monkeypatch.setattr(shipped, "PACKAGE", package)
    assert shipped.shipped("images", "Dockerfile") == package / "images"
