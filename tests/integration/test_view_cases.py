"""Any view (issue 39) through the real suite on the CPU and `convmatrix repro`: a case file's
`input_strides`, `storage_offset` and `weight_memory_format` run as written (the transposed
(1, 1024, 1) view of pytorch#3512; a channels_last input from a permute beside an NCHW weight), a
scaled case keeps its view, every results line records the view the conv got, and each case's
repro script builds that same view: it passes as the suite did, and reproduces under a fault."""

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

pytestmark = pytest.mark.slow

SIG = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
CELL = "baremetal-torch2.13.0-cpu-cudnn9.5.1.17-py3.11"
CASES = """
[[case]]
name = "pytorch3512"
op = "conv_transpose1d"
input = [1, 1024, 1]
out_channels = 1
kernel = 1
input_strides = [1024, 1, 1]
direction = "backward"
sources = ["https://github.com/pytorch/pytorch/issues/3512"]

[[case]]
name = "permuted_nhwc"
op = "conv2d"
input = [2, 8, 6, 6]
out_channels = 4
kernel = 3
input_strides = [288, 1, 48, 8]
storage_offset = 3
direction = "backward"

[[case]]
name = "cl_nchw_weight"
op = "conv2d"
input = [2, 8, 6, 6]
out_channels = 4
kernel = 3
memory_format = "channels_last"
weight_memory_format = "contiguous"
direction = "double_backward"

[[case]]
name = "scaled_gap"
op = "conv2d"
input = [16, 256, 64, 64]
out_channels = 256
kernel = 3
padding = 1
dtype = "bfloat16"
input_strides = [2097152, 1, 32768, 512]
direction = "backward"
"""
IDS = {
    "pytorch3512": "views-conv_transpose1d-fp32-k1-view1024x1x1-bwd-pytorch3512",
    "permuted_nhwc": "views-conv2d-fp32-k3-view288x1x48x8-offset3-bwd-permuted_nhwc",
    "cl_nchw_weight": "views-conv2d-fp32-k3-channels_last-weight_contiguous-double_bwd-cl_nchw_weight",
    "scaled_gap": "views-conv2d-bf16-k3-p1-view2097152x1x32768x512-bwd-scaled_gap",
}
# Every conv the script calls with cuDNN on (the case's, not the control's) writes the view it got
# to $VIEW_LOG, then raises the signature when asked to.
RECORDER = """
import json
import os

import torch
import torch.nn.functional


def watched(real):
    def conv(x, weight, *args, **kwargs):
        if torch.backends.cudnn.enabled:
            with open(os.environ["VIEW_LOG"], "a") as log:
                log.write(json.dumps({"input_strides": list(x.stride()), "storage_offset": x.storage_offset(),
                                      "weight_strides": list(weight.stride())}) + "\\n")
            if os.environ.get("RAISE"):
                raise RuntimeError(os.environ["RAISE"])
        return real(x, weight, *args, **kwargs)
    return conv


for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
    setattr(torch.nn.functional, name, watched(getattr(torch.nn.functional, name)))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """A cell whose view cases all failed under a fault (its cell.json as the harness writes it),
    and the clean run's lines."""
    out = tmp_path_factory.mktemp("views")
    cases = out / "views.toml"
    cases.write_text(CASES)
    faulted = suiterun.run_suite(out / "run" / f"{CELL}@cpu", "-q", "--cases", str(cases), "-k", "views",
                                 faults={"raise": dict.fromkeys(IDS.values(), SIG)}, cell_id=CELL)
    assert faulted.returncode == 1, faulted.output[-3000:]
    cell = {"schema": 1, "cell": CELL, "lane": "baremetal", "knobs": "default", "expected": {}, "control": False,
            "requested": {"lane": "baremetal", "torch": "2.13.0", "cuda": "cpu", "cudnn": "9.5.1.17",
                          "python": "3.11", "base": ""},
            "gpu_key": "cpu", "gpu": None, "python": "py", "started": "2026-12-05T00:00:00Z",
            "ended": "2026-12-05T00:02:00Z", "exit_code": 1, "evidence": {}}
    (faulted.results_dir / "cell.json").write_text(json.dumps(cell))
    clean = suiterun.run_suite(out / "clean" / f"{CELL}@cpu", "-q", "--cases", str(cases), "-k", "views",
                               cell_id=CELL)
    assert clean.returncode == 0, clean.output[-3000:]
    return out / "run", clean.by_case()


def test_the_views_run_on_the_cpu_as_written(runs: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    """Issue 39: the transposed (1, 1024, 1) view was refused ('a transposed layout needs a batch
    and channels of 2 or more'), and a channels_last input could not have an NCHW weight."""
    _run, clean = runs
    assert set(clean) == set(IDS.values())
    for record in clean.values():
        assert record["status"] == "passed", (record["case"], record["message"])
    transposed = clean[IDS["pytorch3512"]]
    assert transposed["scaled"] is False and transposed["shapes"]["input"] == [1, 1024, 1]
    assert transposed["view"] == {"input_strides": [1024, 1, 1], "storage_offset": 0, "weight_strides": [1, 1, 1]}
    assert transposed["params"]["input_strides"] == [1024, 1, 1]
    permuted = clean[IDS["permuted_nhwc"]]
    assert permuted["view"] == {"input_strides": [288, 1, 48, 8], "storage_offset": 3,
                                "weight_strides": [72, 9, 3, 1]}  # NCHW beside the channels-last input
    mixed = clean[IDS["cl_nchw_weight"]]
    assert mixed["view"] == {"input_strides": [288, 1, 48, 8], "storage_offset": 0, "weight_strides": [72, 9, 3, 1]}
    # Scaled down, the view keeps its order and its gap (every other pixel of a channels-last buffer).
    scaled = clean[IDS["scaled_gap"]]
    _n, c, h, w = scaled["shapes"]["input"]
    assert scaled["scaled"] is True and c < 256
    assert scaled["view"]["input_strides"] == [2 * c * w * h, 1, 2 * c * w, 2 * c]


@pytest.mark.parametrize("name", sorted(IDS))
def test_the_repro_builds_the_view_the_cell_ran(name: str, runs: tuple[Path, dict[str, dict[str, Any]]],
                                               tmp_path: Path) -> None:
    run, clean = runs
    case = IDS[name]
    text = repro.repro(run, CELL, case)
    assert f"INPUT_STRIDES = {tuple(clean[case]['view']['input_strides'])!r}" in text or \
        clean[case]["params"]["input_strides"] is None
    script = tmp_path / "repro.py"
    script.write_text(text)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "views.jsonl"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHON"))}
    env.update(PYTHONPATH=str(site), VIEW_LOG=str(log))

    passed = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600, check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    shown = re.search(r"output sum \(float64\): (\S+)", passed.stdout)
    assert shown is not None and float(shown[1]) == clean[case]["fingerprint"]["sum"]
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen and all(view == clean[case]["view"] for view in seen), (seen, clean[case]["view"])

    reproduced = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={**env, "RAISE": SIG},
                                capture_output=True, text=True, timeout=600, check=False)
    assert reproduced.returncode == 1, reproduced.stdout + reproduced.stderr
    assert f"REPRODUCES: RuntimeError: {SIG}" in reproduced.stdout


PADDED = """
[[case]]
name = "odd"
op = "conv2d"
input = [2, 6, 6, 6]
out_channels = 6
kernel = 3
input_strides = [216, 1, 36, 6]
storage_offset = 1
direction = "backward"
"""
PADDED_ID = "views-conv2d-fp32-k3-view216x1x36x6-offset1-bwd-odd"


def test_a_padded_view_is_the_same_view_of_the_padded_input_and_its_repro_builds_it(tmp_path: Path) -> None:
    """--pad-channels 8 widens the input from 6 to 8 channels: the view stays channels-last with its
    offset, recomputed for the padded shape, and the repro builds that view (and pads as the cell did)."""
    cases = tmp_path / "views.toml"
    cases.write_text(PADDED)
    done = suiterun.run_suite(tmp_path / "run" / f"{CELL}@cpu", "-q", "--cases", str(cases), "-k", "views",
                              "--pad-channels", "8", cell_id=CELL)
    assert done.returncode == 0, done.output[-3000:]
    line = done.by_case()[PADDED_ID]
    assert line["view"] == {"input_strides": [288, 1, 48, 8], "storage_offset": 1, "weight_strides": [72, 9, 3, 1]}
    assert line["fingerprint"]["computed"]["padded"] is True
    cell = {"schema": 1, "cell": CELL, "lane": "baremetal", "knobs": "pad=8", "expected": {}, "control": False,
            "requested": {"lane": "baremetal", "torch": "2.13.0", "cuda": "cpu", "cudnn": "bundled",
                          "python": "3.11", "base": ""},
            "gpu_key": "cpu", "gpu": None, "python": "py", "started": "2026-12-05T00:00:00Z",
            "ended": "2026-12-05T00:02:00Z", "exit_code": 0, "evidence": {}}
    (done.results_dir / "cell.json").write_text(json.dumps(cell))
    text = repro.repro(tmp_path / "run", CELL, PADDED_ID)
    assert "INPUT_STRIDES = (288, 1, 48, 8)" in text and "STORAGE_OFFSET = 1" in text and "PAD = (1, 6, 6, 8, 8)" in text
    script = tmp_path / "repro.py"
    script.write_text(text)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHON"))}
    passed = subprocess.run([sys.executable, "-I", str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600, check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    shown = re.search(r"output sum \(float64\): (\S+)", passed.stdout)
    assert shown is not None and float(shown[1]) == line["fingerprint"]["sum"]
