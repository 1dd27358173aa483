"""What the tests share that is not a fixture: the checkout's path, the suite's modules loaded by
path, and results directories written the way the suite and the harness write them. Importable as
`testkit` (pyproject's pytest `pythonpath`), so no test imports conftest."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HOST = "testhost"  # $CONVMATRIX_HOST in every test (conftest.one_host): the host a run records


def ran(out: Path, cell_id: str, gpu: str = "cpu") -> Path:
    """Where a harness run of a cell leaves its result in run directory `out` (on HOST)."""
    return out / f"{cell_id}@{gpu}@{HOST}"


def results_in(out: Path) -> list[Path]:
    """The result directories (and .partial ones) in a run directory: not its plans/ or .locks/."""
    return sorted(p for p in out.iterdir() if p.is_dir() and "@" in p.name)


def load_suite_module(name: str) -> Any:
    """suites/<name>.py by its path, as `suite_<name>`: suites/ is not a package, and the
    harness must not be able to import the suite by accident."""
    spec = importlib.util.spec_from_file_location(f"suite_{name}", REPO / "suites" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


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
    env: dict[str, Any] | None = None, cell: dict[str, Any] | None = None, host: str | None = None,
) -> Path:
    """A results directory as the harness leaves it (cell.json may be None for a direct run);
    with a host, named and recorded as that host's (without: as results from before hosts)."""
    directory = run / (f"{cell_id}@{gpu}@{host}" if host else f"{cell_id}@{gpu}")
    if host is not None and cell is not None:
        cell = {**cell, "host": host}
    directory.mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps(env if env is not None else env_json(cell_id)))
    (directory / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if cell is not None:
        (directory / "cell.json").write_text(json.dumps({"schema": 1, "cell": cell_id, "exit_code": 0, **cell}))
    return directory


def docker_answers() -> str | None:
    """Why no Docker engine answers here, or None when one does."""
    from convmatrix.run.lanes.images import docker_cli

    try:
        done = subprocess.run([docker_cli(), "info"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["docker info failed"])[-1]


# The default matrix's two baremetal stacks: torch 2.5.1 cu124 with its bundled cuDNN (the
# control) and with a cuDNN 9.5.1.17 override; both install from PyPI here.
OVERRIDE_MATRIX = """
name = "cudnn-override"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["bundled", "9.5.1.17"]
python = ["3.11"]
[control]
cudnn = "bundled"
"""

# What nvidia-smi prints (the format gpus.py cites from NVIDIA): `--query-gpu=<gpus.FIELDS>
# --format=csv,noheader,nounits`, then `-L`. Two identical whole H100s, MIG off (an H100 can have
# MIG, so its mode reads Disabled, not [N/A]); one H200 split into two 3g.71gb slices.
TWO_H100 = (
    "0, GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b01, NVIDIA H100 80GB HBM3, 9.0, 81559, Disabled, Disabled\n"
    "1, GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b02, NVIDIA H100 80GB HBM3, 9.0, 81559, Disabled, Disabled\n",
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b01)\n"
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b02)\n",
)
H200_SLICES = (
    "0, GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39, NVIDIA H200, 9.0, 143771, Enabled, Enabled\n",
    "GPU 0: NVIDIA H200 (UUID: GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39)\n"
    "  MIG 3g.71gb     Device  0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)\n"
    "  MIG 3g.71gb     Device  1: (UUID: MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23)\n",
)
SLICE_UUIDS = ("MIG-0929581a-2be6-5dec-bf34-0954c6c529a6", "MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23")

# A stand-in nvidia-smi: the driver's version, the -L listing, or the query lines (the suite
# itself then runs with --device cpu, so the work is real).
STUB_SMI = """#!/bin/sh
here=$(dirname "$0")
case "$*" in
  *driver_version*) echo "550.54.15" ;;
  -L) cat "$here/smi-list.txt" ;;
  *) cat "$here/smi-query.txt" ;;
esac
"""


def stub_nvidia_smi(bin_dir: Path, outputs: tuple[str, str] = TWO_H100) -> Path:
    """bin_dir with STUB_SMI in it as nvidia-smi, printing outputs (query lines, -L listing), to
    put first on PATH: by default a runner with two identical H100s."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    query, listing = outputs
    (bin_dir / "smi-query.txt").write_text(query)
    (bin_dir / "smi-list.txt").write_text(listing)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(STUB_SMI)
    smi.chmod(0o755)
    return bin_dir
