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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)


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
