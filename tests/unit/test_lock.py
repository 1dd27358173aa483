"""The lock of this repository's own runs (requirements/*.txt, requirements/lock.py): it satisfies
every range that pyproject.toml and tests/requirements.txt state, and a change there that the lock
does not follow fails here, naming the package, the range and where it is stated."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit import REPO


def load_lock() -> Any:
    """requirements/lock.py by its path: requirements/ is a folder of files, not a package."""
    spec = importlib.util.spec_from_file_location("requirements_lock", REPO / "requirements" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lock = load_lock()
LOCKS = ("harness.txt", "tests.txt", "lint.txt")


def pins(name: str) -> dict[str, str]:
    result: dict[str, str] = lock.read_lock(REPO / "requirements" / name)
    return result


@pytest.mark.parametrize("name", LOCKS)
def test_each_lock_satisfies_every_range_stated_for_it(name: str) -> None:
    assert lock.disagreements(lock.roots()[name], pins(name), name) == []


def test_the_locks_are_one_resolution() -> None:
    """tests.txt and harness.txt are compiled under lint.txt's pins: a package in two files has
    one version, and the smaller files hold nothing lint.txt lacks."""
    everything = pins("lint.txt")
    for name in ("tests.txt", "harness.txt"):
        assert {p: v for p, v in pins(name).items() if everything.get(p) != v} == {}, name
    assert set(pins("harness.txt")) <= set(pins("tests.txt"))


def test_the_locked_torch_is_the_cpu_build_without_cuda_wheels() -> None:
    """The trap the lock is compiled around (requirements/lock.py): PyPI's torch 2.13.0 for Linux
    brings nvidia-* and triton wheels (GBs); the CPU build that pip takes from disk brings none."""
    tests = pins("tests.txt")
    assert tests["torch"] == "2.13.0+cpu"
    cuda = [p for name in LOCKS for p in pins(name) if p.startswith(("nvidia-", "triton", "cuda-"))]
    assert cuda == []


def test_the_lint_tools_are_locked() -> None:
    assert {"ruff", "mypy", "types-tabulate"} <= set(pins("lint.txt"))
    assert {"pytest", "pytest-xdist", "hypothesis", "nox", "uv"} <= set(pins("tests.txt"))


def repo_copy(tmp_path: Path) -> Path:
    """What roots() reads, in a folder of its own to change."""
    (tmp_path / "tests").mkdir()
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy2(REPO / "tests" / "requirements.txt", tmp_path / "tests" / "requirements.txt")
    return tmp_path


def test_a_range_in_pyproject_that_the_lock_misses_is_named(tmp_path: Path) -> None:
    repo = repo_copy(tmp_path)
    text = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(text.replace('"pytest-xdist>=3"', '"pytest-xdist>=99"', 1))
    found = lock.disagreements(lock.roots(repo)["tests.txt"], pins("tests.txt"), "tests.txt")
    assert found == [f"tests.txt: pytest-xdist=={pins('tests.txt')['pytest-xdist']} does not satisfy 'pytest-xdist>=99' "
                     "(pyproject.toml [project.optional-dependencies] test)"]


def test_a_package_added_to_the_tests_requirements_but_not_locked_is_named(tmp_path: Path) -> None:
    repo = repo_copy(tmp_path)
    with (repo / "tests" / "requirements.txt").open("a") as f:
        f.write("# a new test tool\nleft-pad>=1  # trailing comment\n")
    found = lock.disagreements(lock.roots(repo)["tests.txt"], pins("tests.txt"), "tests.txt")
    assert found == ["tests.txt: left-pad is not locked, but tests/requirements.txt asks for 'left-pad>=1'"]
    # The harness's lock is not asked for the tests' tools; lint's is, and lacks it too.
    assert lock.disagreements(lock.roots(repo)["harness.txt"], pins("harness.txt"), "harness.txt") == []
    assert len(lock.disagreements(lock.roots(repo)["lint.txt"], pins("lint.txt"), "lint.txt")) == 1


def test_a_lint_tool_range_is_checked_against_the_lint_lock(tmp_path: Path) -> None:
    repo = repo_copy(tmp_path)
    text = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(text.replace('"mypy>=2.4"', '"mypy<1"', 1))
    (line,) = lock.disagreements(lock.roots(repo)["lint.txt"], pins("lint.txt"), "lint.txt")
    assert line.startswith("lint.txt: mypy==") and "'mypy<1' (pyproject.toml [dependency-groups] lint)" in line


def test_names_compare_as_pip_compares_them_and_a_false_marker_asks_nothing() -> None:
    stated = [("here", "PyYAML>=6"), ("here", "Typing_Extensions"), ("here", "tomli; python_version < '3.11'")]
    assert lock.disagreements(stated, {"pyyaml": "6.0.4", "typing-extensions": "4.16.0"}, "x.txt") == []


def test_a_local_version_satisfies_its_public_pin() -> None:
    """torch==2.13.0 in tests/requirements.txt, 2.13.0+cpu in the lock: PEP 440 ignores the local
    label for == without one."""
    assert lock.disagreements([("here", "torch==2.13.0")], {"torch": "2.13.0+cpu"}, "x.txt") == []
    assert lock.disagreements([("here", "torch==2.14.0")], {"torch": "2.13.0+cpu"}, "x.txt") != []


def test_a_lock_line_that_is_not_a_pin_and_an_option_in_a_requirements_file_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("# header\npytest>=8\n")
    with pytest.raises(ValueError, match=r"bad.txt: 'pytest>=8' is not a pin \(name==version\)"):
        lock.read_lock(bad)
    bad.write_text("-r other.txt\n")
    with pytest.raises(ValueError, match=r"bad.txt: '-r other.txt': options are not read"):
        lock.requirement_lines(bad)


def test_an_environment_is_compared_with_its_lock_both_ways() -> None:
    """What `lock.py verify` prints after a session installed its lock: a pin missing or at
    another version, and a package the lock does not hold (pip and the project itself aside)."""
    locked = {"pytest": "9.2.0", "torch": "2.13.0+cpu", "numpy": "2.4.6"}
    present = {"pytest": "9.2.0", "torch": "2.13.0", "nvidia-cudnn-cu12": "9.10.2.21", "pip": "23.2.1",
               "convmatrix": "0.1.0"}
    assert lock.differences(locked, present, "tests.txt") == [
        "numpy: tests.txt pins 2.4.6, but it is not installed",
        "torch: tests.txt pins 2.13.0+cpu, but 2.13.0",
        "nvidia-cudnn-cu12==9.10.2.21 is installed but not in tests.txt",
    ]
    assert lock.differences(locked, {**locked, "pip": "26.0"}, "tests.txt") == []


def test_verify_fails_in_an_environment_that_is_not_the_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.txt"
    other.write_text("pytest==0.0.1\n")
    assert lock.main(["verify", str(other)]) == 1
    err = capsys.readouterr().err
    assert f"lock: pytest: {other} pins 0.0.1, but " in err and "run the session again with --reuse-venv=no" in err
    assert lock.main(["nonsense"]) == 2
