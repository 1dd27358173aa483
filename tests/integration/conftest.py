"""Integration tests: real suite runs, real wheels, a real Docker engine. Every test here is
marked `slow`, so that `-m "not slow"` is the unit tests alone; CI runs both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from suiterun import Run, run_suite

HERE = Path(__file__).parent
WHEELHOUSE = Path.home() / ".cache" / "convmatrix" / "test-wheelhouse"


# The modules that share a machine-wide resource, under the name of what they share: with
# `--dist loadgroup` (nox -s tests runs the tests on every core with pytest-xdist) one group runs on
# one worker, one test after another, so two of them never use it at once. "engines": the Docker
# and Podman engines' images and containers (test_container_lane counts the cell containers left
# on the engine), the base image that base_image.ensure builds with debootstrap when it is missing,
# the machine's image-lock folder and the test wheelhouse the cells install from.
SHARED = {
    "engines": ("test_audit_container.py", "test_base_image_runs.py", "test_container_lane.py",
                "test_plain_bases_runs.py", "test_podman_lane.py", "test_system_bases_runs.py"),
}
GROUP_OF = {module: group for group, modules in SHARED.items() for module in modules}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
            # Every other module is a group of its own: its module-scoped fixtures (a real suite
            # run, a Slurm cluster, a browser) run once, on one worker, not once on each. The
            # Slurm cluster (own ports, names and state, tests/slurmkit.py) and chromium (its
            # DevTools port chosen by itself) are each one module's.
            item.add_marker(pytest.mark.xdist_group(GROUP_OF.get(item.path.name, item.path.name)))


@pytest.fixture(scope="session")
def default_cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The whole suite on the CPU with its defaults, run once for every test that reads it."""
    run = run_suite(tmp_path_factory.mktemp("default") / "results")
    assert run.returncode == 0, run.output
    return run


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """torch 2.13.0 (CPU) and the suite's requirements as wheels, kept between runs: the cells
    install from here alone (--no-index), as on an air-gapped GPU cluster."""
    if not any(WHEELHOUSE.glob("torch-2.13.0*.whl")):
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(WHEELHOUSE),
                        "torch==2.13.0", "pytest>=8", "pytest-xdist>=3"], check=True, timeout=1800)
    return WHEELHOUSE
