"""Issue 38's done-when, as a user meets it: a fresh venv holding a model's packages (torch and
the torchvision release made for it, from the package index) and convmatrix installed from this
checkout; `convmatrix cases --from-model torchvision.models:resnet50 ...` writes the cases without
the torch hub, `convmatrix cases` lists them and the CPU lane runs them. The unit tests record the
same model beside the tests' CPU build of torch through tests/modelzoo.py's shim; this one needs
none, which is what a user's environment is like."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from wheelkit import build_wheel, sh

pytestmark = pytest.mark.slow

# A matched pair from the package index: torchvision 0.20 is the release for torch 2.5 (the
# compatibility table of https://github.com/pytorch/vision#installation; 0.20.1's wheel requires
# torch==2.5.1). PyPI's builds of both are CUDA builds (cu124), which import and run on a CPU. Not the
# tests' own torch 2.13.0+cpu: PyPI's torchvision is built for PyPI's torch and fails to import
# beside a CPU-only build ("operator torchvision::nms does not exist"), which the product tells
# in one line (tests/unit/triage/test_from_model.py). torch 2.5.1 cu124 because the baremetal
# tests' cells already hold it in uv's cache: uv links the same files into this venv instead of
# a second copy of about 5 GB (pip, with its own cache, ran CI's disk out; tests/diskwatch.py).
MODEL_PACKAGES = ("torch==2.5.1", "torchvision==0.20.1", "pytest>=8,<9.2")
COMMAND = ("cases", "--from-model", "torchvision.models:resnet50", "--input", "8x3x224x224", "--dtype", "float16",
           "--channels-last", "--backward", "-o", "rn50.toml")


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    """A fresh venv's folder, removed after the test even when it fails: it holds about 5 GB (CUDA
    builds, linked from uv's cache where the filesystem allows, copied where it does not)."""
    folder = tmp_path / "venv"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_from_model_in_a_fresh_environment_writes_lists_and_runs_resnet50s_cases(tmp_path: Path, venv: Path) -> None:
    wheel = build_wheel(tmp_path)
    uv = shutil.which("uv")
    assert uv, "no uv on PATH (.ci/run installs it; python3 -m pip install uv)"
    # The system store's CA roots, as the product's baremetal lane gives uv (a TLS proxy's CA is there).
    uv_env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1"), "VIRTUAL_ENV": str(venv)}
    sh(uv, "venv", "-q", "--python", sys.executable, venv, cwd=tmp_path, env=uv_env)
    sh(uv, "pip", "install", "-q", *MODEL_PACKAGES, wheel, cwd=tmp_path, env=uv_env, timeout=1200)

    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    hub = home / "torch"  # torch's hub and checkpoints go under TORCH_HOME (torch.hub.get_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CONVMATRIX_PYTHON")}
    env.update(HOME=str(home), TORCH_HOME=str(hub), XDG_CACHE_HOME=str(home / ".cache"),
               CONVMATRIX_HOME=str(home / "convmatrix"), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    convmatrix = venv / "bin" / "convmatrix"

    started = time.monotonic()
    done = sh(convmatrix, *COMMAND, cwd=work, env=env)
    took = time.monotonic() - started
    print(f"cases --from-model resnet50 in a fresh venv: {took:.1f} s (imports included)")
    cases = tomllib.loads((work / "rn50.toml").read_text(encoding="utf-8"))["case"]
    assert len(cases) >= 20, done.stderr
    assert f"{len(cases)} case(s) from " in done.stderr
    assert not hub.exists() or not any(hub.rglob("*")), sorted(hub.rglob("*"))  # no weights, no hub
    assert not (home / ".cache" / "torch").exists()

    listed = sh(convmatrix, "cases", "rn50.toml", cwd=work, env=env).stdout
    assert listed.startswith(f"{len(cases)} cases from"), listed[:300]
    for case in cases:
        assert "rn50-" in listed and case["name"] in listed, case["name"]

    # The CPU lane: the host cell on the venv's own interpreter, the recorded cases only.
    (work / "matrix.toml").write_text('name = "rn50-cpu"\ncases = ["rn50.toml"]\n[[include]]\nlane = "host"\n')
    sh(convmatrix, "run", "-m", "matrix.toml", "--out", "runs/rn50", "--allow-cpu", "--", "--device", "cpu",
       "-k", "rn50", cwd=work, env=env, timeout=1200)
    report = json.loads(sh(convmatrix, "report", "runs/rn50", "--format", "json", cwd=work, env=env).stdout)
    ran = {row["case"]: row["outcome"] for row in report["cases"]}
    assert len(ran) == len(cases), sorted(ran)
    assert set(ran.values()) == {"pass"}, ran
