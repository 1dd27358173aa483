"""Issue 40, done when (its export half): two real runs on different stand-in GPU keys (a stub
nvidia-smi: an sm90 H100 and an sm70 V100; the suite itself on the CPU) export to bundles with
nothing identifying in them, though a case's failure message quotes the run's own folder, the
host and user names, an address and a home folder (the fault plugin raises it inside the conv)."""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import suiterun
from convmatrix.atlas import bundle
from exportkit import bundle_text, leaks
from testkit import REPO, TWO_H100, stub_nvidia_smi

V100 = ("0, GPU-11111111-2222-3333-4444-555555555555, Tesla V100-SXM2-16GB, 7.0, 16160, [N/A], [N/A]\n",
        "GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n")
MATRIX = 'name = "export"\n[axes]\nlane = ["host"]\nknobs = ["default", "pad=8"]\n[control]\nknobs = "default"\n'


def run_on(tmp_path: Path, name: str, smi: tuple[str, str]) -> Path:
    out = tmp_path / name
    spec = tmp_path / f"{name}-faults.json"
    message = (f"CUDNN_STATUS_NOT_SUPPORTED in {out}/cache on {socket.gethostname()} as {getpass.getuser()} "
               f"via 172.16.5.9, home /home/{getpass.getuser()}/.cache and /root/.nv")
    spec.write_text(json.dumps({"raise": {"conv1d-fp32-k3-p1": message}}))
    (tmp_path / "m.toml").write_text(MATRIX)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PATH=f"{stub_nvidia_smi(tmp_path / f'{name}-bin', smi)}{os.pathsep}{os.environ['PATH']}",
               CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_FAULTS=str(spec),
               PYTHONPATH=os.pathsep.join(filter(None, [str(suiterun.PLUGINS), env.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(tmp_path / "m.toml"), "--lane", "host",
                           "--out", str(out), "--", "--device", "cpu", "-k", "conv1d-fp32-k3", "-p", "convmatrix_faults"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_two_runs_on_two_stub_gpus_export_with_nothing_identifying(tmp_path: Path) -> None:
    runs = [run_on(tmp_path, "night-h100", TWO_H100), run_on(tmp_path, "night-v100", V100)]
    bundles = []
    for run in runs:
        out = tmp_path / f"{run.name}.bundle.json"
        done = subprocess.run([sys.executable, "-m", "convmatrix", "export", str(run), "-o", str(out), "--show",
                               "--fleet", "lab"],
                              cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
        assert done.returncode == 0, done.stderr
        shown = [line for line in done.stdout.splitlines() if not line.startswith(f"wrote {out}: ")]
        assert leaks(bundle_text(out), run, tmp_path) == [] and leaks("\n".join(shown), run, tmp_path) == []
        bundles.append(bundle.read(out))
    seen = {(cell.gpu.model, cell.gpu.generation) for made in bundles for run in made.runs for cell in run.cells}
    assert seen == {("NVIDIA H100 80GB HBM3", "sm90"), ("Tesla V100-SXM2-16GB", "sm70")}
    failing = [case for made in bundles for run in made.runs for cell in run.cells for case in cell.cases
               if case.outcome == "fail"]
    assert len(failing) == 4 and all(c.repro is not None and c.subcode == 3000 for c in failing)
    assert all((c.reason or "").startswith("cudnn_not_supported: CUDNN_STATUS_NOT_SUPPORTED in <path>")
               for c in failing)
