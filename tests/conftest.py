"""Shared fixtures; plain helpers live in testkit.py."""

from __future__ import annotations

import itertools
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from testkit import HOST, docker_answers, stub_nvidia_smi

# How low the session brought the disk, and after which test (CI's disk has a size of its own).
pytest_plugins = ["diskwatch"]

# The property tests' profiles (tests/strategies.py): the default tests run a small, derandomized
# set (the same examples on every machine, so a red CI is reproducible); `nox -s properties` runs
# the long one (`--hypothesis-profile long`), random, many times more examples. No example
# database: nothing is written into the checkout.
settings.register_profile("default", max_examples=40, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=2000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Every run in the tests is on host HOST (testkit), whatever this machine is called, so that a
# test can name the result directories a run leaves (<cell>@<gpu-key>@HOST): set for the whole
# session, module- and session-scoped fixtures and the subprocesses they start included. A test
# of the default takes it away with monkeypatch.delenv.
os.environ["CONVMATRIX_HOST"] = HOST
# The tests run CUDA-labelled matrices (cu124 stacks) on this GPU-less machine's CPU on purpose:
# the product refuses that unless asked (run/orchestrate.refuse_cpu), so the whole session asks,
# subprocesses included. The refusal's own tests take it away with monkeypatch.delenv.
os.environ["CONVMATRIX_ALLOW_CPU"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    # Strict: any warning in the project's own tests is an error (see pyproject.toml for why here).
    config.addinivalue_line("filterwarnings", "error")
    # pytest-xdist registers it where it is loaded; a run with -p no:xdist still knows the marker
    # that tests/integration/conftest.py gives (--strict-markers would refuse it).
    config.addinivalue_line("markers", "xdist_group(name): tests that share a machine-wide resource; one worker runs them")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every Hypothesis test is a property test (`-m properties`, `nox -s properties`), marked or
    not: a new one cannot be left out of the long profile by a forgotten marker."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.properties)


@pytest.fixture(autouse=True)
def runs_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """In-process runs record their LATEST pointer here, not in the checkout's reports/runs."""
    from convmatrix.run import options

    runs = tmp_path_factory.mktemp("runs")
    monkeypatch.setattr(options, "RUNS_DIR", runs)
    monkeypatch.setattr(options, "LATEST", runs / "LATEST")
    return runs


@pytest.fixture
def write_matrix(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str, name: str = "m.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Real-engine tests: skipped where no engine answers, but failed in CI, which starts one
    (.ci/docker-up), so that a broken engine set-up can never pass as skipped tests."""
    import os

    problem = docker_answers()
    if problem and os.environ.get("CI"):
        pytest.fail(f"CI must have a Docker engine (.ci/docker-up): {problem}")
    if problem:
        pytest.skip(f"no Docker engine answers here ({problem}); start one with .ci/docker-up")


@pytest.fixture
def two_gpu_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runner whose nvidia-smi lists two identical GPUs (the suite itself runs on the CPU)."""
    import os

    bin_dir = stub_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


# ---- The history database (tests/unit/history, cli history tests): a real PostgreSQL server ----


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """One PostgreSQL server per test process (tests/pgserver.py); skipped where none is
    installed, failed in CI, whose .ci/run installs Debian's postgresql."""
    import pgserver

    if pgserver.binaries() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have PostgreSQL (.ci/run installs Debian's postgresql)")
        pytest.skip("no PostgreSQL installed (initdb): Debian's postgresql package")
    with pgserver.server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty history database of each back-end: a file under tmp_path, or a fresh database on
    the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    import pgserver

    server: str = request.getfixturevalue("pg_server")
    return pgserver.fresh_database(server, f"t{next(_DATABASES)}")


_DATABASES = itertools.count()
