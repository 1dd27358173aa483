"""`convmatrix repro --minimal` (issue 49): a script short enough to paste into an upstream issue,
built from the same description of the case as the full script (prove/repro.Spec): versions
printed, the tensors built as the case built them (views, padding, compile), the op, exit 1 when
the signature appears, 0 when it does not. Run here under a fault (a sitecustomize.py that makes
torch.nn.functional's conv raise the signature when cuDNN is on, as the full repro's tests do)
and without one."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from catalogkit import catalog, sizing
from convmatrix.cli import repro as repro_cmd
from convmatrix.prove import minimal, repro
from faultcases import CUDNN_SIGNATURE, EVERY_CONV_WHEN_CUDNN
from testkit import env_json, record, write_result

SIG = CUDNN_SIGNATURE
CELL = "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"
CASES = {case.id: case for case in catalog.CASES}
PLAIN = "conv1d-fp32-k3-p1"
FAULT = EVERY_CONV_WHEN_CUDNN  # tests/faultcases.py: the same fault for the full and the minimal script
WRONG = """
import torch
import torch.nn.functional

for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
    real = getattr(torch.nn.functional, name)
    setattr(torch.nn.functional, name,
            lambda *a, _real=real, **k: _real(*a, **k) * (1.05 if torch.backends.cudnn.enabled else 1.0))
"""


def line_of(case: catalog.Case, *, status: str = "failed", message: str | None = SIG, **extra: Any) -> dict[str, Any]:
    ran = sizing.scaled(case)
    facts: dict[str, Any] = {"params": case.params(), "scaled": ran is not case, "sources": list(case.sources),
                             "shapes": {name: list(shape) for name, shape in sizing.shapes(ran).items()}}
    return record(case.id, status, message, **{**facts, **extra})


def a_run(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    run = tmp_path / "run"
    write_result(run, CELL, lines, gpu="cpu", env=env_json(CELL, device="cpu"))
    return run


def minimal_for(tmp_path: Path, line: dict[str, Any]) -> str:
    return minimal.minimal(a_run(tmp_path, [line]), CELL, line["case"])


def run_script(text: str, fault: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "repro_min.py"
    script.write_text(text)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHON"))}
    if fault is None:
        command = [sys.executable, "-I", str(script), "cpu"]
    else:
        site = cwd / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(fault)
        env["PYTHONPATH"] = str(site)
        command = [sys.executable, str(script), "cpu"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def imports(text: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def test_a_plain_case_is_at_most_30_lines_reproduces_under_the_fault_and_passes_without(tmp_path: Path) -> None:
    text = minimal_for(tmp_path, line_of(CASES[PLAIN]))
    assert len(text.splitlines()) <= 30, text
    assert imports(text) <= {"sys", "torch", "torch.nn.functional"}
    assert 'SIGNATURE = "CUDNN_STATUS_NOT_SUPPORTED"' in text
    faulted = run_script(text, FAULT, tmp_path)
    assert faulted.returncode == 1, faulted.stdout + faulted.stderr
    assert "REPRODUCES" in faulted.stdout and "CUDNN_STATUS_NOT_SUPPORTED" in faulted.stdout
    assert "torch" in faulted.stdout and "cuDNN" in faulted.stdout  # the versions, printed first
    clean = run_script(text, None, tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "PASSES" in clean.stdout


@pytest.mark.parametrize("case", sorted(CASES), ids=str)
def test_every_catalog_case_makes_a_short_script_of_torch_alone(case: str, tmp_path: Path) -> None:
    made = CASES[case]
    text = minimal_for(tmp_path, line_of(made))
    ast.parse(text)
    assert imports(text) <= {"sys", "torch", "torch.nn.functional"}
    assert f"F.{made.op}(" in text
    assert ("torch.compile(" in text) == (made.via == "compile")
    assert ("CUDAGraph" in text) == (made.via == "cuda_graph")
    assert ("torch.autocast(" in text) == (made.autocast is not None)
    if made.layout is None and made.via is None and made.autocast is None and made.kind == "forward":
        assert len(text.splitlines()) <= 30, text


@pytest.mark.parametrize("case", ["conv1d-fp32-k3-permuted-bwd", "conv2d-fp32-k3-p1-sliced",
                                  "conv2d-fp32-k3-transposed", "conv2d-fp32-k5-p2-double_bwd-double_backward-mnist",
                                  "conv2d-bf16-k3-p1-nhwc_strided-non_contiguous-bhwc_3x3",
                                  "conv_transpose2d-fp32-k4-s2-p1-bwd", "conv3d-fp32-autocast_bf16-k3-p1-g2"])
def test_layouts_directions_and_autocast_reproduce_and_pass(case: str, tmp_path: Path) -> None:
    text = minimal_for(tmp_path, line_of(CASES[case]))
    faulted = run_script(text, FAULT, tmp_path)
    assert faulted.returncode == 1, faulted.stdout + faulted.stderr
    clean = run_script(text, None, tmp_path)
    assert clean.returncode == 0, text + clean.stdout + clean.stderr


def test_the_cases_own_view_is_built_and_the_conv_gets_it(tmp_path: Path) -> None:
    case = CASES[PLAIN]
    params = {**case.params(), "n": 2, "c_in": 4, "size": [16], "input_strides": [64, 1, 4]}
    shapes = {"input": [2, 4, 16], "weight": [case.params()["c_out"], 4, 3], "bias": [case.params()["c_out"]],
              "output": [2, case.params()["c_out"], 16]}
    line = record(PLAIN, "failed", SIG, params=params, shapes=shapes, scaled=False, sources=[])
    text = minimal_for(tmp_path, line)
    assert "as_strided((2, 4, 16), (64, 1, 4), 0)" in text
    assert run_script(text, FAULT, tmp_path).returncode == 1
    done = run_script(text + "\nassert x.stride() == (64, 1, 4), x.stride()\n", None, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_padded_channels_are_built_as_the_cell_ran_them(tmp_path: Path) -> None:
    case = CASES["conv2d-fp16-k3-p1-g3-channels_last-bwd-channels_last_odd-c30"]
    text = minimal_for(tmp_path, line_of(case, knobs={"device": "cpu", "pad_channels": 8}))
    assert "--pad-channels 8" in text and "F.pad(" in text
    assert run_script(text, FAULT, tmp_path).returncode == 1


def test_a_numeric_mismatch_is_checked_against_float64(tmp_path: Path) -> None:
    line = line_of(CASES["conv2d-fp32-k3-p1"], message="numeric mismatch: output: 3 of 100 elements beyond the bound",
                   exc_type="AssertionError")
    text = minimal_for(tmp_path, line)
    assert len(text.splitlines()) <= 30, text
    wrong = run_script(text, WRONG, tmp_path)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "REPRODUCES" in wrong.stdout
    assert run_script(text, None, tmp_path).returncode == 0


def test_free_text_stays_out_of_the_code(tmp_path: Path) -> None:
    hostile = "CUDNN_STATUS_BAD_PARAM\"); import os; os.system('x') #\nsecond line"
    text = minimal_for(tmp_path, line_of(CASES[PLAIN], message=hostile))
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "os.system" not in code and "import os" not in code
    assert 'SIGNATURE = "CUDNN_STATUS_BAD_PARAM"' in text


def test_the_command_writes_the_minimal_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = a_run(tmp_path, [line_of(CASES[PLAIN])])
    top = __import__("argparse").ArgumentParser()
    repro_cmd.add_parser(top.add_subparsers(dest="command"))
    assert repro_cmd.run(top.parse_args(["repro", str(run), CELL, PLAIN, "--minimal"])) == 0
    out = capsys.readouterr().out
    assert "F.conv1d(" in out and len(out.splitlines()) <= 30
    # the full script and the minimal one come from one description of the case
    line = line_of(CASES[PLAIN])
    spec = repro.spec_of(line, env_json(CELL, device="cpu"))
    assert repr(spec.input_shape) in out
