"""The lock for this repository's own runs: requirements/*.txt, every package pinned (==), compiled
from the ranges the project states. The wheel keeps the ranges for its users; these files are for
`nox -s tests`, `nox -s lint`, the lane sessions' harness venv (.nox/harness) and .ci/run, so that
a release upstream (a newer mypy, a newer pytest) changes nothing here until `nox -s lock` is run
and its diff committed.

    python requirements/lock.py compile               (what `nox -s lock` runs, in a python 3.11 venv)
    python requirements/lock.py verify LOCK.txt       (this interpreter holds exactly LOCK.txt's pins)

What each file locks, from what (ROOTS):
    harness.txt  pyproject's [build-system] requires and [project] dependencies
    tests.txt    those, its `test` extra and tests/requirements.txt
    lint.txt     those and its `lint` dependency group (ruff, mypy, the stubs mypy reads)
lint.txt is compiled first; the other two are compiled with it as pip's constraints, so that a
package in two files has one version.

Compiled with pip's own resolver (`pip install --dry-run --report`), not uv's: tests/requirements.txt
asks for torch==2.13.0, which pip takes from the CPU build that this kind of machine keeps on disk
(pip's find-links, /opt/wheels; its version is 2.13.0+cpu, which satisfies ==2.13.0) and which needs
no CUDA libraries. A resolver that reads PyPI's metadata for torch 2.13.0 (uv's, poetry's) would lock
the CUDA build's nvidia-* wheels (several GB) that the CPU file does not need and pip would then
install beside it. So the lock holds torch==2.13.0+cpu and installs with pip: elsewhere that file
comes from PyTorch's CPU wheel index (pip --extra-index-url), which PyPI does not serve.

The pins are for CPython 3.11 on Linux x86_64 (the sessions' python and CI's machine); no hashes, as
they would be those of this platform's files alone.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "requirements"
TEST_REQUIREMENTS = REPO / "tests" / "requirements.txt"
HARNESS, TESTS, LINT = "harness.txt", "tests.txt", "lint.txt"
# What a venv built from a lock may hold beside its pins: its installer (from the interpreter's
# ensurepip, not locked) and the project itself (installed --no-deps from the checkout).
UNLOCKED = frozenset({"pip", "convmatrix"})


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (PyYAML, pyyaml and py_yaml are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[str]:
    """The requirement strings of a requirements file: comments and blank lines dropped. Options
    (-r, -c, --index-url) are refused: the lock's check could not see what they bring."""
    found = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.startswith("-"):
            raise ValueError(f"{path}: {line!r}: options are not read by requirements/lock.py")
        if line:
            found.append(line)
    return found


def roots(repo: Path = REPO) -> dict[str, list[tuple[str, str]]]:
    """For each lock file, the requirements it must satisfy, each as (where it is stated, requirement)."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())
    build = [("pyproject.toml [build-system] requires", r) for r in project["build-system"]["requires"]]
    deps = [("pyproject.toml [project] dependencies", r) for r in project["project"]["dependencies"]]
    extra = [("pyproject.toml [project.optional-dependencies] test", r)
             for r in project["project"]["optional-dependencies"]["test"]]
    tests = [("tests/requirements.txt", r) for r in requirement_lines(repo / "tests" / "requirements.txt")]
    lint = [("pyproject.toml [dependency-groups] lint", r) for r in project["dependency-groups"]["lint"]]
    return {HARNESS: build + deps, TESTS: build + deps + extra + tests, LINT: build + deps + extra + tests + lint}


def read_lock(path: Path) -> dict[str, str]:
    """A lock file's pins: canonical name -> version. A line that is not name==version is refused."""
    pins = {}
    for line in requirement_lines(path):
        name, sep, version = line.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) or not version.strip():
            raise ValueError(f"{path}: {line!r} is not a pin (name==version)")
        pins[canonical(name.strip())] = version.strip()
    return pins


def disagreements(stated: Iterable[tuple[str, str]], pins: Mapping[str, str], lock: str) -> list[str]:
    """One line for each stated requirement that the pins do not satisfy: its package missing, or a
    version outside its range. A requirement whose marker is false here (python_version < "3.11")
    asks nothing of this lock."""
    from packaging.requirements import Requirement  # pytest's dependency: in every venv that runs this

    found = []
    for where, text in stated:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        version = pins.get(canonical(requirement.name))
        if version is None:
            found.append(f"{lock}: {requirement.name} is not locked, but {where} asks for {text!r}")
        elif not requirement.specifier.contains(version, prereleases=True):
            found.append(f"{lock}: {requirement.name}=={version} does not satisfy {text!r} ({where})")
    return found


def resolve(requirements: list[str], constraints: Path | None) -> dict[str, str]:
    """What pip would install for these requirements into an empty venv of this interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--report", str(report), *requirements]
        if constraints is not None:
            command += ["-c", str(constraints)]
        subprocess.run(command, check=True)
        installed = json.loads(report.read_text())["install"]
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in installed}


def write_lock(path: Path, pins: Mapping[str, str], sources: str) -> None:
    header = [
        f"# The lock for {sources}:",
        "# compiled by `nox -s lock` (requirements/lock.py) with pip for CPython 3.11 on Linux x86_64.",
        "# Change the ranges there and run `nox -s lock`; do not edit this file by hand.",
    ]
    path.write_text("\n".join([*header, *(f"{name}=={pins[name]}" for name in sorted(pins))]) + "\n")


SOURCES = {
    HARNESS: "the harness (pyproject.toml's build-system requires and dependencies)",
    TESTS: "the project's tests (the harness's, the `test` extra, tests/requirements.txt)",
    LINT: "lint (the tests' and pyproject.toml's `lint` dependency group)",
}


def compile_all() -> None:
    stated = roots()
    for lock in (LINT, TESTS, HARNESS):  # lint.txt first: the others are constrained by it
        constraints = HERE / LINT if lock != LINT else None
        pins = resolve([r for _, r in stated[lock]], constraints)
        pins.pop("convmatrix", None)
        write_lock(HERE / lock, pins, SOURCES[lock])
        print(f"requirements/{lock}: {len(pins)} packages")


def installed() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}


def differences(pins: Mapping[str, str], present: Mapping[str, str], lock: str) -> list[str]:
    """One line for each way an environment differs from a lock: a pin missing or at another
    version, a package the lock does not hold."""
    found = [f"{name}: {lock} pins {version}, but {present.get(name, 'it is not installed')}"
             for name, version in sorted(pins.items()) if present.get(name) != version]
    found += [f"{name}=={version} is installed but not in {lock}"
              for name, version in sorted(present.items()) if name not in pins and name not in UNLOCKED]
    return found


def main(argv: list[str]) -> int:
    if argv == ["compile"]:
        compile_all()
        return 0
    if len(argv) == 2 and argv[0] == "verify":
        lock = Path(argv[1])
        found = differences(read_lock(lock), installed(), str(lock))
        for line in found:
            print(f"lock: {line}", file=sys.stderr)
        if found:
            print(f"lock: this venv is not {lock}: run the session again with --reuse-venv=no (nox), "
                  "or `nox -s lock` after changing a range", file=sys.stderr)
            return 1
        print(f"lock: this venv holds exactly {lock}'s {len(read_lock(lock))} pins")
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
