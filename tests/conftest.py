"""Shared helpers: matrix files and results directories written the way the suite writes them."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_suite_module(name: str) -> Any:
    """suites/<name>.py by its path, as `suite_<name>`: suites/ is not a package, and the
    harness must not be able to import the suite by accident."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"suite_{name}", REPO / "suites" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def pytest_configure(config: pytest.Config) -> None:
    # Strict: any warning in the project's own tests is an error (see pyproject.toml for why here).
    config.addinivalue_line("filterwarnings", "error")


@pytest.fixture(autouse=True)
def runs_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """In-process runs record their LATEST pointer here, not in the checkout's reports/runs."""
    from convmatrix import options

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


def env_json(cell_id: str, **overrides: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "schema": 1, "cell_id": cell_id, "torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100,
        "cudnn_error": None, "python": "3.11.7", "platform": "Linux", "machine": "x86_64",
        "driver": None, "gpus": [], "device": "cpu", "lane": "baremetal", "image_id": None,
        "hostname": "h", "pid": 1, "started": "2026-12-02T00:00:00Z", "ended": "2026-12-02T00:01:00Z",
        "knobs": {}, "argv": [],
    }
    env.update(overrides)
    return env


def record(case: str, status: str = "passed", message: str | None = None, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "schema": 1, "cell_id": "x", "case": case, "nodeid": f"suites/test_conv.py::test_conv[{case}]",
        "params": {}, "knobs": {"device": "cpu", "cudnn_benchmark": False, "cudnn_deterministic": False},
        "device": "cpu", "status": status, "exc_type": "RuntimeError" if status == "failed" else None,
        "message": message, "warnings": [], "numeric": None, "duration_s": 0.01, "worker": "main",
        "started": "2026-12-02T00:00:00Z", "ended": "2026-12-02T00:00:01Z",
    }
    rec.update(extra)
    return rec


def write_result(
    run: Path, cell_id: str, records: list[dict[str, Any]], *, gpu: str = "cpu",
    env: dict[str, Any] | None = None, cell: dict[str, Any] | None = None,
) -> Path:
    """A results directory as the harness leaves it (cell.json may be None for a direct run)."""
    directory = run / f"{cell_id}@{gpu}"
    directory.mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps(env if env is not None else env_json(cell_id)))
    (directory / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if cell is not None:
        (directory / "cell.json").write_text(json.dumps({"schema": 1, "cell": cell_id, "exit_code": 0, **cell}))
    return directory


def docker_answers() -> str | None:
    """Why no Docker engine answers here, or None when one does."""
    import subprocess

    from convmatrix.lanes.images import docker_cli

    try:
        done = subprocess.run([docker_cli(), "info"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["docker info failed"])[-1]


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
