"""The conv suite run for real, as the harness runs it: `python -m pytest suites/` on the CPU in a
subprocess from the repository root, optionally with the fault-injection plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit import REPO

PLUGINS = REPO / "tests" / "plugins"

# What `pytest suites/` collects besides the catalogue: the library audit's case, first in every run and
# no conv (suites/test_audit.py, issue 47), and the model zoo's cases after the catalogue's (issue 50).
AUDIT = "audit-cuda-libraries"
AUDIT_NODEID = f"suites/test_audit.py::test_audit[{AUDIT}]"
# How the CPU skips a zoo case whose code path another zoo case already runs (suites/test_conv.py).
ZOO_SAME_PATH = "on the CPU this zoo case takes the code path of "


def collected_ids(catalog: Any) -> list[str]:
    """The case ids a whole run of the suite records, in order (catalog: suites/catalog.py loaded)."""
    return [AUDIT, *(case.id for case in catalog.CASES), *(case.id for case in catalog.ZOO_CASES)]


def skipped_on_cpu_as_said(record: dict[str, Any]) -> bool:
    """A skip the CPU owes: the case needs CUDA, or it is a zoo case whose code path another one runs."""
    message = record["message"] or ""
    return record["status"] == "skipped" and (message.startswith("the case needs CUDA")
                                              or message.startswith(ZOO_SAME_PATH))


@dataclass(frozen=True, kw_only=True)
class Run:
    returncode: int
    output: str
    results_dir: Path
    wall_s: float

    def env(self) -> dict[str, Any]:
        env: dict[str, Any] = json.loads((self.results_dir / "env.json").read_text())
        return env

    def records(self) -> list[dict[str, Any]]:
        lines = (self.results_dir / "results.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def by_case(self) -> dict[str, dict[str, Any]]:
        return {record["case"]: record for record in self.records()}

    def markers(self) -> list[Path]:
        return sorted(self.results_dir.glob("running-*.json"))


def run_suite(results_dir: Path, *args: str, cases: tuple[str, ...] = (),
              faults: dict[str, Any] | None = None, cwd: Path = REPO,
              env_extra: dict[str, str] | None = None, cell_id: str = "test-cell") -> Run:
    """python -m pytest suites/ with --results-dir, as the harness runs it. `faults` is a
    convmatrix_faults spec (tests/plugins): injected errors, warnings, wrong results, kills."""
    # The outer pytest's own settings (PYTEST_ADDOPTS, xdist worker ids) must not leak in.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env.update(env_extra or {})
    targets = [f"suites/test_conv.py::test_conv[{case}]" for case in cases] or ["suites/"]
    command = [sys.executable, "-m", "pytest", *targets, "--results-dir", str(results_dir),
               "--cell-id", cell_id, "--device", "cpu", *args]
    if faults is not None:
        results_dir.parent.mkdir(parents=True, exist_ok=True)
        spec = results_dir.parent / f"{results_dir.name}.faults.json"
        spec.write_text(json.dumps(faults))
        env["CONVMATRIX_FAULTS"] = str(spec)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
        command += ["-p", "convmatrix_faults"]
    begin = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    return Run(returncode=done.returncode, output=done.stdout + done.stderr, results_dir=results_dir,
               wall_s=time.monotonic() - begin)
