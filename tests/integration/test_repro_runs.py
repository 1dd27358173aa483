"""`convmatrix repro` over a real suite run on the CPU: a fault raises the signature in three cases
(a scaled one whose reference covers a slice, nhwc_strided in bfloat16; a double backward; a sliced
bfloat16 channels_last double backward); each case's script, run on its own, reproduces it when
torch.nn.functional.conv2d raises with cuDNN on (exit 1), passes without the fault (exit 0) and
says its control fails when the conv always raises (exit 3)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import suiterun
from convmatrix.prove import repro
from faultcases import CUDNN_SIGNATURE, EVERY_CONV_WHEN_CUDNN

pytestmark = pytest.mark.slow

SIG = CUDNN_SIGNATURE
CELL = "baremetal-torch2.13.0-cpu-cudnn9.5.1.17-py3.11"
NHWC_BF16 = "conv2d-bf16-k3-p1-nhwc_strided-non_contiguous-bhwc_3x3"  # scaled, sliced reference
DOUBLE = "conv2d-fp32-k5-p2-double_bwd-double_backward-mnist"  # scaled
DOUBLE_SLICED = "conv2d-bf16-k3-p1-channels_last-double_bwd-double_backward-r1"
CASES = (NHWC_BF16, DOUBLE, DOUBLE_SLICED)
WHEN_CUDNN = f"""
import torch
import torch.nn.functional

_real = torch.nn.functional.conv2d


def conv2d(*args, **kwargs):
    if torch.backends.cudnn.enabled:
        raise RuntimeError({SIG!r})
    return _real(*args, **kwargs)


torch.nn.functional.conv2d = conv2d
"""
ALWAYS = """
import torch.nn.functional


def conv2d(*args, **kwargs):
    raise RuntimeError("conv2d is broken everywhere")


torch.nn.functional.conv2d = conv2d
"""
WRONG = """
import torch
import torch.nn.functional

_real = torch.nn.functional.conv2d


def conv2d(*args, **kwargs):
    out = _real(*args, **kwargs)
    return out * 1.01 if torch.backends.cudnn.enabled else out


torch.nn.functional.conv2d = conv2d
"""
# Runs the script in isolated mode and fails when anything of convmatrix got imported (numpy may
# come with torch itself; the script's text is checked for an import of its own).
NO_CONVMATRIX = (
    "import runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except SystemExit as stop:\n"
    "    code = stop.code\n"
    "leaked = sorted(m for m in sys.modules if m.split('.')[0] == 'convmatrix')\n"
    "if leaked:\n"
    "    print('IMPORTED', leaked)\n"
    "    sys.exit(99)\n"
    "sys.exit(code)\n"
)


def cell_json() -> dict[str, Any]:
    requested = {"lane": "baremetal", "torch": "2.13.0", "cuda": "cpu", "cudnn": "9.5.1.17", "python": "3.11",
                 "base": ""}
    return {"schema": 1, "cell": CELL, "lane": "baremetal", "requested": requested, "knobs": "default",
            "expected": {}, "control": False, "gpu_key": "cpu", "gpu": None, "python": "py",
            "started": "2026-12-02T00:00:00Z", "ended": "2026-12-02T00:02:00Z", "exit_code": 1, "evidence": {}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The run with the fault (its cell.json as the harness writes it), and the clean run's lines."""
    out = tmp_path_factory.mktemp("repro")
    faulted = suiterun.run_suite(out / "run" / f"{CELL}@cpu", "-q", cases=CASES,
                                 faults={"raise": dict.fromkeys(CASES, SIG)}, cell_id=CELL)
    assert faulted.returncode == 1, faulted.output
    (faulted.results_dir / "cell.json").write_text(json.dumps(cell_json()))
    clean = suiterun.run_suite(out / "clean" / f"{CELL}@cpu", "-q", cases=CASES, cell_id=CELL)
    assert clean.returncode == 0, clean.output
    return out / "run", clean.by_case()


def run_script(script: Path, fault: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHON"))}
    if fault is None:  # isolated: no PYTHONPATH, no user site, not the script's directory
        command = [sys.executable, "-I", "-c", NO_CONVMATRIX, str(script)]
    else:
        site = cwd / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(fault)
        env["PYTHONPATH"] = str(site)
        command = [sys.executable, str(script)]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize("case", CASES)
def test_the_script_reproduces_passes_and_knows_its_control(case: str, runs: tuple[Path, dict[str, Any]],
                                                            tmp_path: Path) -> None:
    run, clean = runs
    text = repro.repro(run, CELL, case)
    script = tmp_path / "repro.py"
    script.write_text(text)
    assert not re.search(r"^\s*(import|from)\s+(convmatrix|numpy)", text, re.MULTILINE)
    assert "pip install nvidia-cudnn-cu12==9.5.1.17" in text
    assert f"status:  failed: RuntimeError: {SIG}" in text

    reproduced = run_script(script, WHEN_CUDNN, tmp_path)
    assert reproduced.returncode == 1, reproduced.stdout + reproduced.stderr
    assert f"REPRODUCES: RuntimeError: {SIG}" in reproduced.stdout
    assert "torch.backends.cudnn.version():" in reproduced.stdout and "torch: 2." in reproduced.stdout

    passed = run_script(script, None, tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "PASSES" in passed.stdout
    # The same numbers as the suite's: the output's float64 sum and the worst ratio to the bound.
    line = clean[case]
    shown = re.search(r"output sum \(float64\): (\S+)", passed.stdout)
    assert shown is not None and float(shown[1]) == line["fingerprint"]["sum"]
    ratios = [float(r) for r in re.findall(r"worst \|got - ref\| / tol = (\S+) ", passed.stdout)]
    assert max(ratios) == pytest.approx(line["numeric"]["ratio"], rel=1e-2)

    broken = run_script(script, ALWAYS, tmp_path)
    assert broken.returncode == 3, broken.stdout + broken.stderr
    assert "CONTROL FAILS TOO: the float64 reference raised RuntimeError: conv2d is broken everywhere" in broken.stdout


def test_a_wrong_result_reproduces_as_a_numeric_mismatch(runs: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    run, _clean = runs
    script = tmp_path / "repro.py"
    script.write_text(repro.repro(run, CELL, DOUBLE))
    done = run_script(script, WRONG, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REPRODUCES: numeric mismatch: output is" in done.stdout


def test_the_scaled_case_builds_the_shapes_the_cell_ran(runs: tuple[Path, dict[str, Any]]) -> None:
    run, clean = runs
    line = clean[NHWC_BF16]
    params = line["params"]
    assert line["scaled"] and line["shapes"]["input"] != [params["n"], params["c_in"], *params["size"]]
    text = repro.repro(run, CELL, NHWC_BF16)
    assert f"INPUT_SHAPE = {tuple(line['shapes']['input'])!r}" in text
    assert "LAYOUT = 'nhwc_strided'" in text and "DTYPE = 'bfloat16'" in text and "SLICED = True" in text


# --- issue 39: a repro for a cell run with --pad-channels -------------------------------------------
PADDED = ("conv_transpose3d-fp32-k3-s2", "conv2d-fp16-k3-p1-g3-channels_last-bwd-channels_last_odd-c30",
          "conv2d-fp32-k3-p2-dilated2-bwd-det_on-dilation_deterministic",
          "conv2d-fp32-k3x1-s2x1-depthwise-bwd_input-large_batch-b131072")


@pytest.fixture(scope="module")
def padded_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """A cell run with --pad-channels 8 under a fault that raises the signature, and the clean run."""
    out = tmp_path_factory.mktemp("padded")
    faulted = suiterun.run_suite(out / "run" / f"{CELL}@cpu", "-q", "--pad-channels", "8", cases=PADDED,
                                 faults={"raise": dict.fromkeys(PADDED, SIG)}, cell_id=CELL)
    assert faulted.returncode == 1, faulted.output
    (faulted.results_dir / "cell.json").write_text(json.dumps({**cell_json(), "knobs": "pad=8"}))
    clean = suiterun.run_suite(out / "clean" / f"{CELL}@cpu", "-q", "--pad-channels", "8", cases=PADDED,
                               cell_id=CELL)
    assert clean.returncode == 0, clean.output
    return out / "run", clean.by_case()


@pytest.mark.parametrize("case", PADDED)
def test_a_padded_cells_repro_pads_as_the_cell_did(case: str, padded_runs: tuple[Path, dict[str, Any]],
                                                    tmp_path: Path) -> None:
    """Issue 39: repro refused a cell run with the pad knob ('repro builds the case unpadded
    only'). Its script pads the channels as the suite did: it reproduces under the fault and
    passes without it, with the suite's own output sum (the padded channels cut back off)."""
    run, clean = padded_runs
    text = repro.repro(run, CELL, case)
    assert "# Padded: the cell ran with --pad-channels 8" in text and "PAD = (" in text
    script = tmp_path / "repro.py"
    script.write_text(text)
    reproduced = run_script(script, EVERY_CONV_WHEN_CUDNN, tmp_path)
    assert reproduced.returncode == 1, reproduced.stdout + reproduced.stderr
    assert f"REPRODUCES: RuntimeError: {SIG}" in reproduced.stdout
    passed = run_script(script, None, tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    shown = re.search(r"output sum \(float64\): (\S+)", passed.stdout)
    assert shown is not None and float(shown[1]) == clean[case]["fingerprint"]["sum"]


# --- issue 49: repro --minimal of a case the fault plugin failed in a real suite run ----------------
@pytest.mark.parametrize("case", CASES)
def test_the_minimal_script_reproduces_under_the_fault_and_passes_without(case: str, runs: tuple[Path, dict[str, Any]],
                                                                           tmp_path: Path) -> None:
    from convmatrix.prove import minimal

    run, _clean = runs
    text = minimal.minimal(run, CELL, case, "cpu")
    script = tmp_path / "repro_min.py"
    script.write_text(text)
    assert not re.search(r"^\s*(import|from)\s+(convmatrix|numpy)", text, re.MULTILINE)
    reproduced = run_script(script, WHEN_CUDNN, tmp_path)
    assert reproduced.returncode == 1, reproduced.stdout + reproduced.stderr
    assert "REPRODUCES: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED" in reproduced.stdout
    passed = run_script(script, None, tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "PASSES" in passed.stdout
